//! An idle monitor (connected, no data, database healthy) is not a stalled
//! one: the checkpoint timeout bounds how long a pending commit may take,
//! not how long a monitor may go without input.

use std::time::Duration;

use radar_testkit::{
    broker::Mosquitto, db, exposition::sample, telemetry::create_monitor, telemetry::wait_for,
    worker::Worker,
};

#[tokio::test]
async fn an_idle_monitor_is_not_suspended_by_the_checkpoint_timeout() {
    let db = db::migrated_database("telemetry_idle").await;
    let dir = tempfile::tempdir().unwrap();
    let topic = format!("{}/a", db::unique_name("idle"));
    let id = create_monitor(&db, dir.path(), "idle", &topic);
    let broker = Mosquitto::start_anonymous();
    let worker = Worker::spawn(
        &db,
        &broker,
        dir.path(),
        &[&id],
        &[("RADAR_CHECKPOINT_TIMEOUT_SECONDS", "2")],
    );
    let me = [("monitor_id", id.as_str())];
    // Nothing changes, so nothing needs committing before the 30 s maximum
    // interval: the startup snapshot simply ages past three timeouts.
    wait_for(
        Duration::from_secs(20),
        "the idle monitor's snapshot ages to 6 s without a forced commit",
        || sample(&worker.metrics(), "radar_snapshot_age_seconds", &me).filter(|age| *age >= 6.0),
    );
    let stderr = worker.stderr();
    assert!(
        !stderr.contains("the model stops advancing"),
        "an idle monitor was suspended:\n{stderr}"
    );
    assert_eq!(
        sample(
            &worker.metrics(),
            "radar_monitor_state",
            &[("monitor_id", &id), ("state", "stalled")]
        ),
        None,
        "only the current state has a series, and it is not stalled"
    );
}
