//! The demo's plant, checked end to end without a worker: the generated
//! streams go through the worker's own aligner and detector (offline), and
//! through the embedded broker to a real MQTT subscriber.

use std::time::Duration;

use radar_demo::{
    OfflineRun, Plant, PlantConfig, PublishOptions, READINGS, publish_plant, run_offline,
    start_embedded_broker,
};

/// After a fault window ends the repair itself is a change the monitor may
/// still see (a stuck sensor jumping back, a step removed) until the levels
/// settle; alarms may open up to this many ticks after the window.
const REPAIR_SETTLE_TICKS: u64 = 300;

fn describe(run: &OfflineRun) -> String {
    let mut text = String::new();
    for w in &run.windows {
        text.push_str(&format!(
            "window machine {} {:?} [{}, {})\n",
            w.machine, w.kind, w.start_tick, w.end_tick
        ));
    }
    for a in &run.alarms {
        text.push_str(&format!(
            "alarm machine {} opened {} closed {:?} peak {:.1}\n",
            a.machine, a.opened_tick, a.closed_tick, a.peak_score
        ));
    }
    for (m, (n, f)) in run
        .monitored_frames
        .iter()
        .zip(&run.flagged_frames)
        .enumerate()
    {
        text.push_str(&format!(
            "machine {m}: {f} of {n} monitored frames flagged\n"
        ));
    }
    text
}

fn check_alarms_match_faults(run: &OfflineRun) {
    let report = describe(run);
    for window in &run.windows {
        let first = run
            .alarms_of(window.machine)
            .map(|a| a.opened_tick)
            .filter(|&t| window.contains(t))
            .min();
        assert!(
            first.is_some(),
            "no alarm inside {:?} on machine {}:\n{report}",
            window.kind,
            window.machine
        );
    }
    for alarm in &run.alarms {
        let explained = run.windows.iter().any(|w| {
            w.machine == alarm.machine
                && (w.start_tick..w.end_tick + REPAIR_SETTLE_TICKS).contains(&alarm.opened_tick)
        });
        assert!(explained, "alarm outside every fault window:\n{report}");
    }
}

#[test]
fn offline_the_demo_monitors_alarm_inside_every_fault_window_and_never_on_the_clean_pump() {
    // The demo's test run: 20 wall seconds at speed 50.
    let run = run_offline(PlantConfig::default(), 1000).unwrap();
    println!("{}", describe(&run));
    assert_eq!(run.windows.len(), 3);
    check_alarms_match_faults(&run);
    assert_eq!(run.alarms_of(3).count(), 0, "{}", describe(&run));
}

#[test]
fn offline_over_half_a_simulated_day_the_clean_pumps_never_alarm_and_faults_are_caught() {
    for seed in [1, 3] {
        let run = run_offline(
            PlantConfig {
                seed,
                machines: 8,
                ..PlantConfig::default()
            },
            43_200,
        )
        .unwrap();
        let report = describe(&run);
        for clean in [3, 7] {
            assert_eq!(run.alarms_of(clean).count(), 0, "seed {seed}:\n{report}");
        }
        let caught = run
            .windows
            .iter()
            .filter(|w| run.alarms_of(w.machine).any(|a| w.contains(a.opened_tick)))
            .count();
        assert!(
            caught * 10 >= run.windows.len() * 9,
            "seed {seed}: only {caught} of {} fault windows raised an alarm",
            run.windows.len()
        );
        let explained = run
            .alarms
            .iter()
            .filter(|a| {
                run.windows.iter().any(|w| {
                    w.machine == a.machine
                        && (w.start_tick..w.end_tick + REPAIR_SETTLE_TICKS).contains(&a.opened_tick)
                })
            })
            .count();
        assert!(
            explained * 10 >= run.alarms.len() * 9,
            "seed {seed}: {explained} of {} alarms are explained by a fault",
            run.alarms.len()
        );
    }
}

fn subscriber(port: u16, id: &str) -> (rumqttc::AsyncClient, rumqttc::EventLoop) {
    let mut options = rumqttc::MqttOptions::new(id, "127.0.0.1", port);
    options.set_keep_alive(Duration::from_secs(30));
    rumqttc::AsyncClient::new(options, 64)
}

/// Polls until the subscription is acknowledged.
async fn subscribe(client: &rumqttc::AsyncClient, events: &mut rumqttc::EventLoop, filter: &str) {
    client
        .subscribe(filter, rumqttc::QoS::AtLeastOnce)
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            if let rumqttc::Event::Incoming(rumqttc::Packet::SubAck(ack)) =
                events.poll().await.unwrap()
            {
                assert!(
                    ack.return_codes
                        .iter()
                        .all(|c| !matches!(c, rumqttc::SubscribeReasonCode::Failure)),
                    "the embedded broker refused {filter}"
                );
                return;
            }
        }
    })
    .await
    .expect("no SUBACK from the embedded broker within 10 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_publishes_and_subscribes_through_the_embedded_broker() {
    let (port, broker) = start_embedded_broker().unwrap();
    assert_eq!(broker.port(), port);
    assert_eq!(broker.url(), format!("mqtt://127.0.0.1:{port}"));
    let (client, mut events) = subscriber(port, "deploy-demo-echo");
    subscribe(&client, &mut events, "echo/#").await;
    client
        .publish("echo/one", rumqttc::QoS::AtLeastOnce, false, "hello")
        .await
        .unwrap();
    let received = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            if let rumqttc::Event::Incoming(rumqttc::Packet::Publish(p)) =
                events.poll().await.unwrap()
            {
                return p;
            }
        }
    })
    .await
    .expect("the message did not come back within 10 s");
    assert_eq!(received.topic, "echo/one");
    assert_eq!(&received.payload[..], b"hello");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_publisher_plays_the_plant_into_the_broker_tick_by_tick() {
    let (port, _broker) = start_embedded_broker().unwrap();
    let config = PlantConfig {
        topic_prefix: "deploy-test/publisher".into(),
        ..PlantConfig::default()
    };
    let (client, mut events) = subscriber(port, "deploy-demo-listener");
    subscribe(&client, &mut events, "deploy-test/publisher/#").await;
    let ticks = 25u64;
    let expected = ticks as usize * config.machines * READINGS.len();
    let count = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = count.clone();
    let listener = tokio::spawn(async move {
        let mut got = Vec::new();
        while got.len() < expected {
            counter.store(got.len(), std::sync::atomic::Ordering::Relaxed);
            if let rumqttc::Event::Incoming(rumqttc::Packet::Publish(p)) =
                events.poll().await.unwrap()
            {
                let body: serde_json::Value = serde_json::from_slice(&p.payload).unwrap();
                got.push((
                    p.topic,
                    body["ts"].as_i64().unwrap(),
                    body["value"].as_f64().unwrap(),
                ));
            }
        }
        got
    });
    let mut plant = Plant::new(config.clone()).unwrap();
    let options = PublishOptions {
        host: "127.0.0.1".into(),
        port,
        client_id: "deploy-demo-publisher".into(),
        speed: 500.0,
        max_ticks: Some(ticks),
        taken_in: None,
    };
    let (_stop_tx, stop) = tokio::sync::watch::channel(false);
    let report = publish_plant(&mut plant, &options, stop).await.unwrap();
    assert_eq!(report.ticks, ticks);
    assert_eq!(report.messages as usize, expected);
    let got = tokio::time::timeout(Duration::from_secs(20), listener)
        .await
        .unwrap_or_else(|_| {
            panic!(
                "only {} of {expected} published messages arrived within 20 s",
                count.load(std::sync::atomic::Ordering::Relaxed)
            )
        })
        .unwrap();
    // The values are the plant's, in order per topic, and each topic's
    // timestamps strictly increase (a watermark would reject a repeat).
    let mut twin = Plant::new(config).unwrap();
    let mut want: std::collections::HashMap<String, Vec<f64>> = Default::default();
    for _ in 0..ticks {
        for sample in twin.step() {
            want.entry(twin.topic(&sample).unwrap().to_string())
                .or_default()
                .push(sample.value);
        }
    }
    let mut seen: std::collections::HashMap<String, Vec<(i64, f64)>> = Default::default();
    for (topic, ts, value) in got {
        seen.entry(topic).or_default().push((ts, value));
    }
    assert_eq!(seen.len(), want.len());
    for (topic, values) in &want {
        let series = &seen[topic];
        let got_values: Vec<f64> = series.iter().map(|(_, v)| *v).collect();
        // serde_json's default float parser may miss the last bit.
        let same = got_values.len() == values.len()
            && got_values
                .iter()
                .zip(values)
                .all(|(g, w)| (g - w).abs() <= 1e-12 * w.abs());
        assert!(same, "{topic}: got {got_values:?}, want {values:?}");
        assert!(
            series.windows(2).all(|w| w[0].0 < w[1].0),
            "{topic}: timestamps repeat"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_publisher_refuses_a_speed_it_cannot_stamp() {
    let mut plant = Plant::new(PlantConfig::default()).unwrap();
    let (_stop_tx, stop) = tokio::sync::watch::channel(false);
    let options = PublishOptions {
        host: "127.0.0.1".into(),
        port: 1,
        client_id: "deploy-demo-too-fast".into(),
        speed: 5000.0,
        max_ticks: Some(1),
        taken_in: None,
    };
    let err = publish_plant(&mut plant, &options, stop).await.unwrap_err();
    assert!(err.to_string().contains("speed 5000"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_publisher_holds_each_tick_until_subscribers_took_in_the_last_and_never_hangs_on_them()
{
    let (port, _broker) = start_embedded_broker().unwrap();
    let options = |client_id: &str, taken_in| PublishOptions {
        host: "127.0.0.1".into(),
        port,
        client_id: client_id.into(),
        speed: 1000.0,
        max_ticks: Some(2),
        taken_in: Some(taken_in),
    };
    let (_stop_tx, stop) = tokio::sync::watch::channel(false);

    // Nobody takes tick 0 in: tick 1 waits the whole gate time, then goes out.
    let (held_tx, held) = tokio::sync::watch::channel(0u64);
    let mut plant = Plant::new(PlantConfig::default()).unwrap();
    let started = std::time::Instant::now();
    let report = publish_plant(
        &mut plant,
        &options("deploy-demo-gated", held),
        stop.clone(),
    )
    .await
    .unwrap();
    assert_eq!(report.ticks, 2);
    assert!(
        started.elapsed() >= radar_demo::GATE_WAIT_MAX,
        "tick 1 went out after {:?}, before tick 0 was taken in",
        started.elapsed()
    );
    drop(held_tx);

    // The counting side is gone: the plant runs at its own pace.
    let (gone_tx, gone) = tokio::sync::watch::channel(0u64);
    drop(gone_tx);
    let mut plant = Plant::new(PlantConfig::default()).unwrap();
    let started = std::time::Instant::now();
    let report = publish_plant(&mut plant, &options("deploy-demo-ungated", gone), stop)
        .await
        .unwrap();
    assert_eq!(report.ticks, 2);
    assert!(
        started.elapsed() < radar_demo::GATE_WAIT_MAX,
        "an ungated publisher waited {:?}",
        started.elapsed()
    );
}
