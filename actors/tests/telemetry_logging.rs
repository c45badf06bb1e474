//! The worker's logs: with `RADAR_LOG_FORMAT=json` every stderr line is a
//! JSON object and the monitor's lines carry its id; neither the checkpoint
//! secret nor any payload value ever reaches the logs, even at debug level.

use std::time::Duration;

use radar_testkit::{
    broker::Mosquitto, db, exposition::sample, telemetry::create_monitor, telemetry::now_ms,
    telemetry::wait_for, worker::Worker,
};

const SECRET: &str = "telemetry-canary-secret-5f1c9e0b7d3a";
/// Payload fragments that must never be logged.
const CANARY_VALUE: &str = "271828.0625";
const CANARY_TEXT: &str = "canary-payload-9d41";

fn json_lines(stderr: &str) -> Vec<serde_json::Value> {
    stderr
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON log line ({e}): {l}"))
        })
        .collect()
}

/// Runs a worker at debug level through a start, good and bad input, and a
/// SIGTERM stop; returns the monitor id and the whole stderr.
async fn logged_run(tag: &str) -> (String, String) {
    let db = db::migrated_database(tag).await;
    let dir = tempfile::tempdir().unwrap();
    let topic = format!("{}/a", db::unique_name(tag));
    let id = create_monitor(&db, dir.path(), "logged", &topic);
    let broker = Mosquitto::start_anonymous();
    let worker = Worker::spawn(
        &db,
        &broker,
        dir.path(),
        &[&id],
        &[
            ("RADAR_LOG_FORMAT", "json"),
            ("RUST_LOG", "debug"),
            ("RADAR_CHECKPOINT_SECRET", SECRET),
            ("RADAR_CHECKPOINT_INTERVAL", "3"),
        ],
    );
    let me = [("monitor_id", id.as_str())];
    worker.wait_connected(&id);
    let base = now_ms();
    for i in 0..8 {
        broker.publish(
            &topic,
            &format!(r#"{{"ts": {}, "value": {CANARY_VALUE}}}"#, base + i),
        );
    }
    broker.publish(&topic, CANARY_TEXT);
    broker.publish(
        &topic,
        &format!(r#"{{"ts": {}, "value": "{CANARY_TEXT}"}}"#, base + 50),
    );
    broker.publish(
        &topic,
        &format!(r#"{{"ts": {}, "{CANARY_TEXT}": 1}}"#, base + 60),
    );
    wait_for(
        Duration::from_secs(30),
        "all eleven messages are counted",
        || {
            (sample(&worker.metrics(), "radar_observations_received_total", &me) == Some(11.0))
                .then_some(())
        },
    );
    let log = worker.log.clone();
    let exit = worker.terminate();
    assert!(exit.success(), "worker exit status {exit}");
    (id, std::fs::read_to_string(log).unwrap())
}

#[tokio::test]
async fn json_logs_carry_the_monitor_id_and_never_the_secret_or_a_payload_value() {
    let (id, stderr) = logged_run("telemetry_logs").await;
    let lines = json_lines(&stderr);
    assert!(lines.len() > 5, "the worker logged its run:\n{stderr}");
    for line in &lines {
        assert!(
            line["level"].is_string() && line["message"].is_string(),
            "{line}"
        );
    }
    let about_me = lines
        .iter()
        .filter(|l| l["monitor_id"].as_str() == Some(id.as_str()))
        .count();
    assert!(about_me >= 3, "the monitor's lines carry its id:\n{stderr}");

    assert!(
        !stderr.contains(SECRET),
        "the checkpoint secret was logged:\n{stderr}"
    );
    assert!(
        !stderr.contains(CANARY_VALUE),
        "a payload value was logged:\n{stderr}"
    );
    assert!(
        !stderr.contains("271828"),
        "a payload value was logged:\n{stderr}"
    );
    assert!(
        !stderr.contains(CANARY_TEXT),
        "payload text was logged:\n{stderr}"
    );
}

/// Every `monitor_id` field holds the monitor's id (a UUID), so one filter
/// finds all of a monitor's lines.
#[tokio::test]
async fn every_monitor_id_field_is_the_monitors_id() {
    let (id, stderr) = logged_run("telemetry_log_ids").await;
    for line in json_lines(&stderr) {
        if let Some(value) = line.get("monitor_id") {
            assert_eq!(value.as_str(), Some(id.as_str()), "{line}");
        }
    }
}
/// What a monitor's actors log runs inside one `monitor` span carrying the
/// monitor's id, so a log pipeline can group a monitor's lines by span.
#[tokio::test]
async fn a_monitors_lines_run_in_its_monitor_span() {
    let (id, stderr) = logged_run("telemetry_log_span").await;
    let lines: Vec<_> = json_lines(&stderr)
        .into_iter()
        .filter(|l| {
            l["target"]
                .as_str()
                .is_some_and(|t| t.starts_with("radar::monitor::"))
        })
        .collect();
    assert!(!lines.is_empty(), "{stderr}");
    for line in lines {
        assert_eq!(line["span"]["name"], "monitor", "{line}");
        assert_eq!(line["span"]["monitor_id"], id.as_str(), "{line}");
    }
}
