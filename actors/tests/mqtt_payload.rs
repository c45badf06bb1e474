//! A monitor's `[payload]` table through a real Mosquitto and the worker
//! binary: nested fields with epoch seconds form frames; the same seconds
//! sent to a monitor that expects milliseconds are `timestamp_unit`
//! rejections, counted in `/metrics` and named in one log line that says
//! what to change; a bad table is refused by `radar monitor create` and
//! `radar monitor validate`.

use std::{fs, path::Path, time::Duration};

use radar_testkit::{
    broker::Mosquitto, db, exposition::sample, monitor::MonitorFile, telemetry::create_monitor,
    telemetry::create_monitor_from, telemetry::now_ms, telemetry::radar, telemetry::wait_for,
    worker::Worker,
};

const FRAMES: usize = 25;
const WRONG_UNIT: usize = 5;

fn seconds_monitor(name: &str, topic: &str) -> String {
    MonitorFile::new(name)
        .reading("a", topic)
        .table("[payload]\nvalue = \"/data/v\"\nts = \"/t\"\nts_unit = \"s\"")
        .to_toml()
}

/// Epoch seconds with a millisecond fraction, as many sensors send them.
fn seconds(ms: i64) -> String {
    format!("{}.{:03}", ms.div_euclid(1000), ms.rem_euclid(1000))
}

#[tokio::test]
async fn epoch_seconds_form_frames_under_a_seconds_table_and_are_a_named_unit_mistake_elsewhere() {
    let db = db::migrated_database("mqtt_payload").await;
    let dir = tempfile::tempdir().unwrap();
    let base = db::unique_name("payload");
    let (seconds_topic, millis_topic) = (format!("{base}/s"), format!("{base}/ms"));

    let seconds_id = create_monitor_from(
        &db,
        dir.path(),
        "seconds",
        &seconds_monitor("seconds", &seconds_topic),
    );
    let millis_id = create_monitor(&db, dir.path(), "millis", &millis_topic);

    let broker = Mosquitto::start_anonymous();
    let worker = Worker::spawn(&db, &broker, dir.path(), &[], &[]);
    wait_for(Duration::from_secs(60), "both monitors connected", || {
        let text = worker.metrics();
        [&seconds_id, &millis_id]
            .iter()
            .all(|id| sample_of(&text, "radar_mqtt_connected", id, &[]) == Some(1.0))
            .then_some(())
    });

    publish_seconds_everywhere(&broker, &seconds_topic, &millis_topic);
    let text = wait_for(
        Duration::from_secs(60),
        "the seconds monitor formed its frames and the millis monitor counted the unit mistakes",
        || {
            let text = worker.metrics();
            let frames = sample_of(&text, "radar_frames_emitted_total", &seconds_id, &[]);
            // Rejections per monitor are one total; by reason, per worker.
            let wrong = sample_of(&text, "radar_observations_rejected_total", &millis_id, &[]);
            (frames == Some(FRAMES as f64) && wrong == Some(WRONG_UNIT as f64)).then_some(text)
        },
    );
    only_the_millis_monitor_rejects_and_only_for_the_unit(&text, &seconds_id, &millis_id);
    one_aggregated_line_says_what_to_change(&worker, &millis_id);
    drop(worker);

    bad_tables_are_refused_and_the_good_one_is_valid(&db, dir.path(), &base);
}

/// Monitor `id`'s sample `name`, with `extra` labels besides its id.
fn sample_of(text: &str, name: &str, id: &str, extra: &[(&str, &str)]) -> Option<f64> {
    let mut labels: Vec<(&str, &str)> = vec![("monitor_id", id)];
    labels.extend_from_slice(extra);
    sample(text, name, &labels)
}

/// `FRAMES` nested observations in epoch seconds to the seconds monitor,
/// and `WRONG_UNIT` whole epoch seconds to the monitor that expects
/// milliseconds (no table).
fn publish_seconds_everywhere(broker: &Mosquitto, seconds_topic: &str, millis_topic: &str) {
    let start = now_ms() - 5_000;
    for i in 0..FRAMES as i64 {
        let ms = start + i * 10;
        broker.publish(
            seconds_topic,
            &format!(
                r#"{{"device": "p7", "data": {{"v": {}.5, "unit": "bar"}}, "t": {}}}"#,
                i % 5,
                seconds(ms)
            ),
        );
    }
    for i in 0..WRONG_UNIT as i64 {
        let secs = (start + i * 1_000) / 1_000;
        broker.publish(millis_topic, &format!(r#"{{"ts": {secs}, "value": 1}}"#));
    }
}

fn only_the_millis_monitor_rejects_and_only_for_the_unit(
    text: &str,
    seconds_id: &str,
    millis_id: &str,
) {
    assert_eq!(
        sample_of(text, "radar_frames_emitted_total", millis_id, &[]),
        Some(0.0),
        "{text}"
    );
    assert_eq!(
        sample(
            text,
            "radar_observations_rejected_by_reason_total",
            &[("reason", "timestamp_unit")]
        ),
        Some(WRONG_UNIT as f64),
        "every rejection of the worker is the millis monitor's unit mistake:\n{text}"
    );
    for reason in ["stale", "too_old", "bad_ts"] {
        assert_eq!(
            sample(
                text,
                "radar_observations_rejected_by_reason_total",
                &[("reason", reason)]
            ),
            Some(0.0),
            "seconds are not mistaken for {reason}:\n{text}"
        );
    }
    assert_eq!(
        sample_of(text, "radar_observations_rejected_total", seconds_id, &[]),
        Some(0.0),
        "{text}"
    );
}

/// One aggregated line names the monitor, the reading, the configured unit
/// and what to change.
fn one_aggregated_line_says_what_to_change(worker: &Worker, millis_id: &str) {
    let log = wait_for(
        Duration::from_secs(30),
        "the unit warning is logged",
        || {
            let log = worker.stderr();
            log.contains("timestamp_unit").then_some(log)
        },
    );
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("timestamp_unit"))
        .collect();
    assert_eq!(
        lines.len(),
        1,
        "aggregated, not one line per message:\n{log}"
    );
    let line = lines[0];
    for part in [
        millis_id,
        "reading \"a\"",
        "configured unit \"ms\"",
        "ts_unit = \"s\"",
        "[payload]",
    ] {
        assert!(line.contains(part), "{part} in: {line}");
    }
}

/// A bad table is refused before any database work, naming each field; the
/// seconds monitor's file (written by `create_monitor_from`) is valid.
fn bad_tables_are_refused_and_the_good_one_is_valid(db: &db::TestDb, dir: &Path, base: &str) {
    let bad = dir.join("bad.toml");
    fs::write(
        &bad,
        seconds_monitor("bad", &format!("{base}/bad")).replace("\"/data/v\"", "\"data.v\""),
    )
    .unwrap();
    let out = radar(db)
        .args(["monitor", "create", "--config"])
        .arg(&bad)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("payload.value") && stderr.contains("does not start with `/`"),
        "{stderr}"
    );
    let unit = dir.join("unit.toml");
    fs::write(
        &unit,
        seconds_monitor("unit", &format!("{base}/unit"))
            .replace("ts_unit = \"s\"", "ts_unit = \"sec\""),
    )
    .unwrap();
    let out = radar(db)
        .args(["monitor", "validate", "--config"])
        .arg(&unit)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("sec") && stderr.contains("rfc3339"),
        "{stderr}"
    );
    let out = radar(db)
        .args(["monitor", "validate", "--config"])
        .arg(dir.join("seconds.toml"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "valid");
}
