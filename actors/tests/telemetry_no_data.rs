//! Nothing seen is never healthy: a required reading that the broker never
//! delivers (subscription acknowledged, no message) puts the connected
//! monitor in `no_data` within `alignment.silence_ms`: `/readyz` 503 naming
//! the reading, the status row says so, and the coverage history records a
//! `no_data` gap from the last frame that closes when frames form again.

use std::time::Duration;

use radar_testkit::{
    broker::Mosquitto, db, monitor::MonitorFile, poll, telemetry::create_monitor_from,
    telemetry::now_ms, telemetry::radar, telemetry::wait_for, worker::Worker,
};

/// Readings `flow` and `pressure` under `prefix`, silent after 2 s.
fn monitor_toml(name: &str, prefix: &str) -> String {
    MonitorFile::new(name)
        .readings_under(prefix, &["flow", "pressure"])
        .silence_ms(2000)
        .to_toml()
}

/// The `no_data` gaps of the monitor's snapshot: whether each is closed.
fn no_data_gaps(db: &db::TestDb, id: &str) -> Vec<bool> {
    let out = radar(db)
        .args(["snapshot", "inspect", id, "--json"])
        .output()
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    json["coverage"]["gaps"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|g| g["cause"] == "no_data")
        .map(|g| !g["to"].is_null())
        .collect()
}

fn status_state(db: &db::TestDb, id: &str) -> Option<String> {
    let out = radar(db).args(["status", "--json"]).output().ok()?;
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    rows.as_array()?
        .iter()
        .find(|r| r["service_id"] == id || r["id"] == id || r["monitor_id"] == id)
        .and_then(|r| r["state"].as_str().map(str::to_string))
}

#[tokio::test]
async fn a_required_reading_that_goes_silent_is_no_data_until_frames_form_again() {
    let db = db::migrated_database("telemetry_no_data").await;
    let dir = tempfile::tempdir().unwrap();
    let prefix = db::unique_name("nodata");
    let id = create_monitor_from(
        &db,
        dir.path(),
        "m",
        &monitor_toml("silent-pressure", &prefix),
    );
    let broker = Mosquitto::start_anonymous();
    let worker = Worker::spawn(&db, &broker, dir.path(), &[&id], &[]);

    // One frame first: before any frame the startup gap already covers the
    // time, so a silence then is recorded under that gap's cause.
    let ts = now_ms();
    broker.publish(
        &format!("{prefix}/flow"),
        &format!(r#"{{"ts": {ts}, "value": 0.5}}"#),
    );
    broker.publish(
        &format!("{prefix}/pressure"),
        &format!(r#"{{"ts": {ts}, "value": 6.5}}"#),
    );
    wait_for(
        Duration::from_secs(20),
        "/readyz 200 after the first frame",
        || worker.get("/readyz").filter(|(c, _)| *c == 200),
    );
    // Then the flow reading keeps delivering; pressure goes quiet.
    broker.publish(
        &format!("{prefix}/flow"),
        &format!(r#"{{"ts": {}, "value": 1.5}}"#, now_ms()),
    );
    let body = wait_for(
        Duration::from_secs(20),
        "/readyz 503 naming the silent reading",
        || {
            let (code, body) = worker.get("/readyz")?;
            (code == 503 && body.contains("pressure") && body.contains("no_data")).then_some(body)
        },
    );
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(json["not_ready"][0]["state"], "no_data", "{body}");
    assert_eq!(json["not_ready"][0]["connected"], true, "{body}");
    // The age of each reading's newest accepted observation is a metric.
    let age = |reading: &str| {
        let labels = [("monitor_id", id.as_str()), ("reading", reading)];
        radar_testkit::exposition::sample(&worker.metrics(), "radar_reading_age_seconds", &labels)
    };
    // Both readings have an age; the silent one is past the silence limit.
    poll::within(Duration::from_secs(20)).blocking(
        "the pressure reading's age passes the silence limit",
        || match (age("pressure"), age("flow")) {
            (Some(pressure), Some(_)) if pressure >= 2.0 => Ok(()),
            ages => Err(format!("ages (pressure, flow) {ages:?}")),
        },
    );
    wait_for(
        Duration::from_secs(20),
        "the status row says no_data",
        || (status_state(&db, &id).as_deref() == Some("no_data")).then_some(()),
    );
    wait_for(
        Duration::from_secs(20),
        "an open no_data gap in the snapshot",
        || (no_data_gaps(&db, &id) == [false]).then_some(()),
    );

    // Both readings at one source time: a frame forms, the monitor runs again.
    let ts = now_ms();
    broker.publish(
        &format!("{prefix}/flow"),
        &format!(r#"{{"ts": {ts}, "value": 2.5}}"#),
    );
    broker.publish(
        &format!("{prefix}/pressure"),
        &format!(r#"{{"ts": {ts}, "value": 7.5}}"#),
    );
    wait_for(
        Duration::from_secs(20),
        "/readyz 200 once frames form",
        || worker.get("/readyz").filter(|(c, _)| *c == 200),
    );
    wait_for(Duration::from_secs(20), "the no_data gap is closed", || {
        (no_data_gaps(&db, &id) == [true]).then_some(())
    });
}
