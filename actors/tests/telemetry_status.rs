//! `radar status --json` over three monitors at once: one healthy and
//! receiving data, one whose checkpoints cannot commit (its snapshot row is
//! locked by another transaction: `checkpoint_stalled`), and one refused at
//! startup because its snapshot was tampered with (`startup_failed`).

use std::{path::Path, time::Duration};

use diesel_async::{RunQueryDsl, SimpleAsyncConnection};
use radar_testkit::{
    broker::Mosquitto, db, exposition::sample, telemetry::create_monitor, telemetry::now_ms,
    telemetry::radar, telemetry::status_rows, telemetry::wait_for, worker::Worker,
};

fn row<'a>(rows: &'a [serde_json::Value], id: &str) -> &'a serde_json::Value {
    rows.iter()
        .find(|r| r["monitor_id"].as_str() == Some(id))
        .unwrap_or_else(|| panic!("no status row for {id}: {rows:?}"))
}

#[tokio::test]
async fn status_json_shows_a_healthy_a_checkpoint_stalled_and_a_failed_startup_monitor() {
    let db = db::migrated_database("telemetry_status").await;
    let dir = tempfile::tempdir().unwrap();
    let prefix = db::unique_name("status");
    let (topic_a, topic_b, topic_c) = (
        format!("{prefix}/a"),
        format!("{prefix}/b"),
        format!("{prefix}/c"),
    );
    let healthy = create_monitor(&db, dir.path(), "healthy", &topic_a);
    let stalled = create_monitor(&db, dir.path(), "stalled", &topic_b);
    let broken = create_monitor(&db, dir.path(), "broken", &topic_c);
    let broker = Mosquitto::start_anonymous();

    tamper_after_a_first_run(&db, &broker, dir.path(), &broken).await;
    // One worker runs the whole shard (all three monitors); its checkpoint
    // statements time out after 2 s. It refuses the tampered one and keeps
    // running the others.
    let worker = Worker::spawn(
        &db,
        &broker,
        dir.path(),
        &[],
        &[
            ("RADAR_CHECKPOINT_TIMEOUT_SECONDS", "2"),
            ("RADAR_CHECKPOINT_INTERVAL", "5"),
        ],
    );
    wait_for(Duration::from_secs(30), "both monitors connect", || {
        let text = worker.metrics();
        [&healthy, &stalled]
            .iter()
            .all(|id| {
                sample(
                    &text,
                    "radar_mqtt_connected",
                    &[("monitor_id", id.as_str())],
                ) == Some(1.0)
            })
            .then_some(())
    });

    // Another connection holds the stalled monitor's snapshot row.
    let mut locker = db::connect(&db).await;
    locker
        .batch_execute(&format!(
            "BEGIN; SELECT 1 FROM radar_runtime_checkpoints \
             WHERE service_id = '{stalled}'::uuid FOR UPDATE"
        ))
        .await
        .unwrap();

    let mut ts = now_ms();
    let mut sent = 0;
    let rows = wait_for(
        Duration::from_secs(60),
        "status shows running / checkpoint_stalled / startup_failed",
        || {
            for topic in [&topic_a, &topic_b] {
                broker.publish(
                    topic,
                    &format!(r#"{{"ts": {ts}, "value": {}.5}}"#, sent % 5),
                );
            }
            ts += 1;
            sent += 1;
            let rows = status_rows(&db);
            let state = |id: &str| row(&rows, id)["state"].as_str().unwrap_or("").to_string();
            (state(&healthy) == "running"
                && row(&rows, &healthy)["processed_count"].as_u64() >= Some(3)
                && state(&stalled) == "checkpoint_stalled"
                && state(&broken) == "startup_failed")
                .then_some(rows)
        },
    );

    the_healthy_row_is_connected_and_fresh(&db, row(&rows, &healthy));
    the_stalled_row_names_the_timeout_and_an_open_gap(row(&rows, &stalled));
    the_broken_row_names_the_corruption(row(&rows, &broken));

    // The worker's readiness agrees: only the stalled monitor is not ready.
    let (code, body) = worker.get("/readyz").unwrap();
    assert_eq!(code, 503, "{body}");
    assert!(
        body.contains(&stalled) && !body.contains(&healthy),
        "{body}"
    );

    locker.batch_execute("ROLLBACK").await.unwrap();
}

/// A first run writes `broken`'s snapshot, then one payload bit is flipped,
/// so the next start must refuse it.
async fn tamper_after_a_first_run(db: &db::TestDb, broker: &Mosquitto, dir: &Path, broken: &str) {
    let first = Worker::spawn(db, broker, dir, &[broken], &[]);
    first.wait_connected(broken);
    let exit = first.terminate();
    assert!(exit.success(), "first run exit status {exit}");
    let tampered = diesel::sql_query(format!(
        "UPDATE radar_runtime_checkpoints \
         SET payload = set_byte(payload, 3, get_byte(payload, 3) # 1) \
         WHERE service_id = '{broken}'::uuid"
    ))
    .execute(&mut db::connect(db).await)
    .await
    .unwrap();
    assert_eq!(tampered, 1, "one snapshot row tampered");
}

fn the_healthy_row_is_connected_and_fresh(db: &db::TestDb, a: &serde_json::Value) {
    assert_eq!(a["connected"], true, "{a}");
    // The heartbeat carries when reading `a` last delivered, on the
    // database's clock: a fresh age, not a timestamp of the worker's clock.
    let age = a["reading_ages_seconds"]["a"].as_i64();
    assert!(age.is_some_and(|s| (0..60).contains(&s)), "{a}");
    assert!(a["reading_seen_at"]["a"].is_string(), "{a}");
    let table = radar(db).args(["status"]).output().unwrap();
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(table.contains("READING AGE"), "{table}");
    let healthy_line = table
        .lines()
        .find(|l| l.starts_with("healthy"))
        .unwrap_or_default();
    assert!(
        healthy_line.contains(&format!(" a {}s ", age.unwrap_or(0)))
            || healthy_line.contains(" a "),
        "{table}"
    );
    assert_eq!(a["heartbeat_stale"], false, "{a}");
    assert!(a["last_error"].is_null(), "{a}");
    assert!(
        a["worker_id"]
            .as_str()
            .is_some_and(|w| w.starts_with("telemetry-test-")),
        "{a}"
    );
}

fn the_stalled_row_names_the_timeout_and_an_open_gap(b: &serde_json::Value) {
    assert_eq!(
        b["heartbeat_stale"], false,
        "the heartbeat still lands: {b}"
    );
    assert!(
        b["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("did not answer within 2 s")),
        "the stalled monitor names the checkpoint timeout: {b}"
    );
    assert!(
        b["coverage"]["gaps"].as_array().is_some_and(|g| g
            .iter()
            .any(|g| g["cause"] == "checkpoint_stall" && g["to"].is_null())),
        "an open checkpoint_stall coverage gap: {b}"
    );
}

fn the_broken_row_names_the_corruption(c: &serde_json::Value) {
    assert_eq!(c["connected"], false, "{c}");
    assert!(
        c["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("corrupted")),
        "the failed startup names the corruption: {c}"
    );
}
