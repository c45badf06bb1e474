//! `/readyz` follows the broker: not ready (503, naming the monitor) while
//! it is down, ready again once the worker has reconnected. A starting
//! worker is not ready before it has listed its monitors.

use std::time::Duration;

use diesel_async::SimpleAsyncConnection;
use radar_testkit::{
    broker::Mosquitto, db, poll, rows, telemetry::create_monitor, telemetry::wait_for,
    worker::Worker,
};

/// Waits until `/readyz` answers `code`; its body, parsed and as text.
fn readyz(worker: &Worker, code: u16, what: &str) -> (serde_json::Value, String) {
    let body = wait_for(Duration::from_secs(30), what, || {
        worker
            .get("/readyz")
            .filter(|(c, _)| *c == code)
            .map(|(_, b)| b)
    });
    let json = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
    (json, body)
}

#[tokio::test]
async fn readyz_turns_not_ready_when_the_broker_stops_and_ready_after_reconnect() {
    let db = db::migrated_database("telemetry_readyz").await;
    let dir = tempfile::tempdir().unwrap();
    let topic = format!("{}/a", db::unique_name("readyz"));
    let id = create_monitor(&db, dir.path(), "ready-probe", &topic);
    let mut broker = Mosquitto::start_anonymous();
    let worker = Worker::spawn(&db, &broker, dir.path(), &[&id], &[]);

    let (json, body) = readyz(&worker, 200, "/readyz answers 200");
    assert_eq!(json["ready"], true, "{body}");
    assert_eq!(json["monitors"], 1, "{body}");

    broker.kill().expect("kill mosquitto");
    let (json, body) = readyz(&worker, 503, "/readyz answers 503");
    assert_eq!(json["ready"], false, "{body}");
    let not_ready = json["not_ready"].as_array().expect("not_ready list");
    assert_eq!(not_ready.len(), 1, "{body}");
    assert_eq!(not_ready[0]["monitor_id"], id.as_str(), "{body}");
    assert_eq!(not_ready[0]["monitor_name"], "ready-probe", "{body}");
    assert_eq!(not_ready[0]["connected"], false, "{body}");
    // Liveness is not readiness: the process still answers.
    assert_eq!(worker.get("/healthz").map(|(c, _)| c), Some(200));

    broker.restart_blocking().expect("restart mosquitto");
    let (json, body) = readyz(&worker, 200, "/readyz answers 200 after reconnect");
    assert_eq!(json["ready"], true, "{body}");
    assert!(
        json["not_ready"].as_array().is_some_and(Vec::is_empty),
        "{body}"
    );
    let text = worker.metrics();
    let me = [("monitor_id", id.as_str())];
    assert!(
        radar_testkit::exposition::sample(&text, "radar_mqtt_reconnect_attempts_total", &me)
            .is_some_and(|n| n >= 1.0),
        "the reconnect is counted:\n{text}"
    );
}

/// The monitor table is locked by another transaction, so the worker's
/// first listing waits: it must answer 503 (`monitors_not_listed`) meanwhile,
/// not 200 with no monitor, and be ready with its monitor once the listing
/// went through.
#[tokio::test]
async fn a_worker_is_not_ready_before_it_has_listed_its_monitors() {
    let db = db::migrated_database("telemetry_readyz_listed").await;
    let dir = tempfile::tempdir().unwrap();
    let topic = format!("{}/a", db::unique_name("readyz"));
    let id = create_monitor(&db, dir.path(), "listed-probe", &topic);
    let mut locker = db::connect(&db).await;
    locker
        .batch_execute("BEGIN; LOCK TABLE services IN ACCESS EXCLUSIVE MODE")
        .await
        .expect("lock the monitor table");
    let broker = Mosquitto::start_anonymous();
    let worker = Worker::spawn(&db, &broker, dir.path(), &[&id], &[]);

    let (json, body) = readyz(&worker, 503, "/readyz answers 503");
    assert_eq!(json["monitors"], 0, "{body}");
    let reasons: Vec<&str> = json["worker"]
        .as_array()
        .expect("worker reasons")
        .iter()
        .filter_map(|r| r["reason"].as_str())
        .collect();
    assert_eq!(reasons, ["monitors_not_listed"], "{body}");
    assert_eq!(worker.get("/healthz").map(|(c, _)| c), Some(200));

    locker.batch_execute("ROLLBACK").await.expect("unlock");
    let (json, body) = readyz(&worker, 200, "/readyz answers 200");
    assert_eq!(json["monitors"], 1, "{body}");
}

/// With one start slot and the snapshot table locked by another
/// transaction, the first monitor's start waits in PostgreSQL while the
/// others wait for the slot (not for the database) and `/readyz` says so;
/// every monitor starts once the lock is released.
#[tokio::test]
async fn monitors_beyond_the_start_slots_wait_for_one_and_say_so() {
    let db = db::migrated_database("telemetry_readyz_slots").await;
    let dir = tempfile::tempdir().unwrap();
    for n in 0..3 {
        let topic = format!("{}/a", db::unique_name("slots"));
        create_monitor(&db, dir.path(), &format!("slot-{n}"), &topic);
    }
    let mut locker = db::connect(&db).await;
    locker
        .batch_execute("BEGIN; LOCK TABLE radar_runtime_checkpoints IN ACCESS EXCLUSIVE MODE")
        .await
        .expect("lock the snapshot table");
    let broker = Mosquitto::start_anonymous();
    let slots = [("RADAR_TEST_START_CONCURRENCY", "1")];
    let worker = Worker::spawn(&db, &broker, dir.path(), &[], &slots);

    let details = poll::within(Duration::from_secs(30)).blocking(
        "one start holds the slot and two wait for it",
        || {
            let body = worker
                .get("/readyz")
                .map(|(_, body)| body)
                .unwrap_or_default();
            let json: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
            let details: Vec<String> = json["not_ready"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|m| m["detail"].as_str().unwrap_or("").to_string())
                .collect();
            let count = |prefix: &str| details.iter().filter(|d| d.starts_with(prefix)).count();
            let queued = count("waiting for a start slot") == 2 && count("starting:") == 1;
            poll::check(queued, || body.clone()).map(|()| details)
        },
    );
    assert_eq!(
        rows::lock_waiters(&mut locker).await,
        1,
        "only the start that holds the slot reads the database: {details:?}"
    );

    locker
        .batch_execute("COMMIT")
        .await
        .expect("release the lock");
    let (json, body) = readyz(
        &worker,
        200,
        "/readyz answers 200 once the starts went through",
    );
    assert_eq!(json["monitors"], 3, "{body}");
}
