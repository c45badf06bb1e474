//! A link that dies silently (a TCP relay between worker and broker that
//! stops forwarding, no RST): the keep-alive notices it seconds later, but
//! the recorded `mqtt_outage` gap starts at the last packet received, and the
//! worker reconnects once the link carries traffic again.

use std::{
    io::{Read, Write},
    net::{TcpListener, TcpStream},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread,
    time::Duration,
};

use chrono::{DateTime, Utc};
use radar_testkit::{
    broker::Mosquitto, db, telemetry::create_monitor, telemetry::now_ms, telemetry::snapshot_gaps,
    telemetry::wait_for, worker::Worker,
};

/// Forwards 127.0.0.1:`port` to the broker while `forwarding` is set; while
/// it is cleared, bytes in both directions are read and dropped, as a
/// blackholing firewall would, and connections stay open.
struct Relay {
    port: u16,
    forwarding: Arc<AtomicBool>,
}

impl Relay {
    fn start(upstream: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let forwarding = Arc::new(AtomicBool::new(true));
        let flag = Arc::clone(&forwarding);
        thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
                    continue;
                };
                for (from, to) in [
                    (client.try_clone().unwrap(), server.try_clone().unwrap()),
                    (server, client),
                ] {
                    let flag = Arc::clone(&flag);
                    thread::spawn(move || pipe(from, to, &flag));
                }
            }
        });
        Self { port, forwarding }
    }
}

fn pipe(mut from: TcpStream, mut to: TcpStream, forwarding: &AtomicBool) {
    let mut buf = [0u8; 16 * 1024];
    while let Ok(n) = from.read(&mut buf) {
        if n == 0 {
            break;
        }
        if forwarding.load(Ordering::SeqCst) && to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
}

/// The `mqtt_outage` gaps in the monitor's snapshot: (from, closed).
fn outages(db: &db::TestDb, id: &str) -> Vec<(DateTime<Utc>, bool)> {
    snapshot_gaps(db, id, "mqtt_outage")
        .iter()
        .filter_map(|g| {
            let from = g["from"].as_str()?.parse().ok()?;
            Some((from, !g["to"].is_null()))
        })
        .collect()
}

#[test]
fn a_silently_dead_link_is_dated_from_its_last_packet_and_reconnects_when_it_returns() {
    let db = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(db::migrated_database("mqtt_dead_link"));
    let dir = tempfile::tempdir().unwrap();
    let topic = format!("{}/a", db::unique_name("deadlink"));
    let id = create_monitor(&db, dir.path(), "dead-link", &topic);
    let broker = Mosquitto::start_anonymous();
    let relay = Relay::start(broker.port);
    let worker = Worker::spawn(
        &db,
        &broker,
        dir.path(),
        &[&id],
        &[
            (
                "RADAR_MQTT_URL",
                &format!("mqtt://127.0.0.1:{}", relay.port),
            ),
            ("RADAR_MQTT_KEEPALIVE_SECONDS", "5"),
            ("RADAR_CHECKPOINT_MAX_INTERVAL_SECONDS", "1"),
        ],
    );
    wait_for(Duration::from_secs(30), "/readyz answers 200", || {
        worker.get("/readyz").filter(|(c, _)| *c == 200)
    });

    // QoS 1 messages keep PUBACKs flowing, so no PINGREQ is due: after the
    // last one, nothing comes from the broker until the link is declared dead.
    let base = now_ms();
    for i in 0..20 {
        broker.publish(
            &topic,
            &format!(r#"{{"ts": {}, "value": {i}.5}}"#, base + i),
        );
    }
    let last_message = Utc::now();
    relay.forwarding.store(false, Ordering::SeqCst);

    wait_for(Duration::from_secs(30), "/readyz answers 503", || {
        worker.get("/readyz").filter(|(c, _)| *c == 503)
    });
    let noticed = Utc::now();
    relay.forwarding.store(true, Ordering::SeqCst);
    wait_for(Duration::from_secs(60), "/readyz answers 200 again", || {
        worker.get("/readyz").filter(|(c, _)| *c == 200)
    });
    let gaps = wait_for(
        Duration::from_secs(30),
        "a closed mqtt_outage gap in the snapshot",
        || {
            let gaps = outages(&db, &id);
            gaps.iter().any(|(_, closed)| *closed).then_some(gaps)
        },
    );
    let (from, _) = gaps[0];
    let after_last = (from - last_message).num_milliseconds();
    assert!(
        (-2000..=2000).contains(&after_last),
        "the gap starts {after_last} ms after the last message (noticed {} ms after it)",
        (noticed - last_message).num_milliseconds()
    );
    assert!(
        (noticed - from).num_milliseconds() >= 3000,
        "the keep-alive took seconds to notice, the gap does not start then"
    );
}
