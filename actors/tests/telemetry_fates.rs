//! Every observation's fate is visible on a real run (worker binary, real
//! Mosquitto and PostgreSQL): after a known stream, `/metrics` and
//! `radar snapshot inspect` both show received = accepted (the values of
//! formed frames) + each named reason (superseded included) + held.

use std::time::Duration;

use radar_testkit::{
    broker::Mosquitto, db, exposition::sample, monitor::MonitorFile,
    telemetry::create_monitor_from, telemetry::now_ms, telemetry::radar,
    telemetry::snapshot_inspection, telemetry::wait_for, worker::Worker,
};

const FRAMES: i64 = 20;

/// Two readings under `prefix`, fresh for 30 s.
fn monitor_toml(name: &str, prefix: &str) -> String {
    MonitorFile::new(name)
        .readings_under(prefix, &["a", "b"])
        .freshness_ms(30_000)
        .to_toml()
}

#[tokio::test]
async fn received_equals_frames_values_plus_every_named_reason_plus_held_in_metrics_and_inspect() {
    let db = db::migrated_database("telemetry_fates").await;
    let dir = tempfile::tempdir().unwrap();
    let prefix = db::unique_name("fates");
    let id = create_monitor_from(&db, dir.path(), "fates", &monitor_toml("fates", &prefix));
    let broker = Mosquitto::start_anonymous();
    let worker = Worker::spawn(&db, &broker, dir.path(), &[&id], &[]);
    let me = [("monitor_id", id.as_str())];
    wait_for(Duration::from_secs(30), "radar_mqtt_connected 1", || {
        (sample(&worker.metrics(), "radar_mqtt_connected", &me) == Some(1.0)).then_some(())
    });

    let (a, b) = (format!("{prefix}/a"), format!("{prefix}/b"));
    let send = |topic: &str, ts: i64| {
        broker.publish(topic, &format!(r#"{{"ts": {ts}, "value": {}}}"#, ts % 7));
    };
    let base = now_ms() - 10_000;
    for i in 0..FRAMES {
        send(&a, base + i * 10);
        send(&b, base + i * 10);
    }
    // `a` twice before its `b`: the first `a` is superseded.
    let t = base + FRAMES * 10;
    send(&a, t);
    send(&a, t + 1);
    send(&b, t + 1);
    send(&a, base); // at the watermark: stale
    broker.publish(&a, "not json");
    send(&a, t + 2); // waits for a `b` that never comes: held
    let received = FRAMES * 2 + 6;

    let text = wait_for(
        Duration::from_secs(60),
        "every message is received and the last one is held",
        || {
            let text = worker.metrics();
            let got = sample(&text, "radar_observations_received_total", &me);
            let held = sample(&text, "radar_partial_frame_values", &me);
            (got == Some(received as f64) && held == Some(1.0)).then_some(text)
        },
    );
    let value = |name: &str, extra: &[(&str, &str)]| {
        let mut labels = me.to_vec();
        labels.extend_from_slice(extra);
        sample(&text, name, &labels).unwrap_or(f64::NAN)
    };
    // The breakdown by reason is the worker's; it has this one monitor.
    let rejected: Vec<(String, f64)> = text
        .lines()
        .filter(|l| l.starts_with("radar_observations_rejected_by_reason_total{"))
        .filter_map(|l| {
            let reason = l.split("reason=\"").nth(1)?.split('"').next()?.to_string();
            Some((reason, l.rsplit_once(' ')?.1.parse::<f64>().ok()?))
        })
        .collect();
    let rejected_sum: f64 = rejected.iter().map(|(_, n)| n).sum();
    let accepted = value("radar_observations_accepted_total", &[]);
    let frames = value("radar_frames_emitted_total", &[]);
    assert_eq!(frames, (FRAMES + 1) as f64, "{text}");
    assert_eq!(
        accepted,
        frames * 2.0,
        "accepted = the frames' values:\n{text}"
    );
    for reason in ["superseded", "stale", "not_json"] {
        assert_eq!(
            sample(
                &text,
                "radar_observations_rejected_by_reason_total",
                &[("reason", reason)]
            )
            .unwrap_or(f64::NAN),
            1.0,
            "{reason}:\n{text}"
        );
    }
    assert!(
        rejected.iter().any(|(r, _)| r == "partial_cleared"),
        "every reason is a series from admission: {rejected:?}"
    );
    assert_eq!(
        value("radar_observations_rejected_total", &[]),
        rejected_sum,
        "the monitor's total is the sum of the reasons:\n{text}"
    );
    assert_eq!(
        received as f64,
        accepted + rejected_sum + 1.0,
        "received = accepted + rejected by reason + held: {rejected:?}"
    );

    // The last snapshot (graceful stop) carries the same account.
    assert!(worker.terminate().success());
    let inspection = snapshot_inspection(&db, &id);
    let fates = &inspection["fates"];
    assert_eq!(fates["received"], received, "{inspection:#}");
    assert_eq!(fates["accepted"], (FRAMES + 1) * 2, "{inspection:#}");
    assert_eq!(fates["held"], 1, "{inspection:#}");
    assert_eq!(fates["unaccounted"], 0, "{inspection:#}");
    assert_eq!(
        inspection["counters"]["observations_rejected"]["superseded"], 1,
        "{inspection:#}"
    );
    let text = radar(&db)
        .args(["snapshot", "inspect", &id])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains(&format!(
            "fates: {received} received = {} accepted + 3 rejected + 1 held",
            (FRAMES + 1) * 2
        )),
        "{text}"
    );
}
