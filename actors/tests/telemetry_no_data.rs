//! Nothing seen is never healthy: a required reading that the broker never
//! delivers (subscription acknowledged, no message) puts the connected
//! monitor in `no_data` within `alignment.silence_ms`: `/readyz` 503 naming
//! the reading, the status row says so, and the coverage history records a
//! `no_data` gap from the last frame that closes when frames form again.

use std::time::Duration;

use radar_testkit::{
    broker::Mosquitto, db, monitor::MonitorFile, poll, telemetry::create_monitor_from,
    telemetry::now_ms, telemetry::snapshot_gaps, telemetry::snapshot_inspection,
    telemetry::status_row, telemetry::wait_for, worker::Worker,
};

/// Readings `flow` and `pressure` under `prefix`, silent after 2 s.
fn monitor_toml(name: &str, prefix: &str) -> String {
    MonitorFile::new(name)
        .readings_under(prefix, &["flow", "pressure"])
        .silence_ms(2000)
        .to_toml()
}

/// Both readings at one source time: one frame.
fn publish_frame(broker: &Mosquitto, prefix: &str, ts: i64, flow: f64, pressure: f64) {
    broker.publish(
        &format!("{prefix}/flow"),
        &format!(r#"{{"ts": {ts}, "value": {flow}}}"#),
    );
    broker.publish(
        &format!("{prefix}/pressure"),
        &format!(r#"{{"ts": {ts}, "value": {pressure}}}"#),
    );
}

/// One `no_data` gap of a snapshot: when it began (ms since the epoch) and
/// whether it is closed.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Gap {
    from_ms: i64,
    closed: bool,
}

/// The `no_data` gaps of the monitor's snapshot.
fn no_data_gaps(db: &db::TestDb, id: &str) -> Vec<Gap> {
    snapshot_gaps(db, id, "no_data")
        .iter()
        .map(|g| Gap {
            from_ms: g["from"]
                .as_str()
                .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                .map_or(i64::MIN, |t| t.timestamp_millis()),
            closed: !g["to"].is_null(),
        })
        .collect()
}

fn status_state(db: &db::TestDb, id: &str) -> Option<String> {
    status_row(db, id).and_then(|r| r["state"].as_str().map(str::to_string))
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

    // Messages published before the subscriptions are acknowledged are not
    // delivered (nothing is retained), and the first frame would never form.
    wait_for(
        Duration::from_secs(20),
        "the monitor's subscriptions acknowledged (status connected)",
        || status_row(&db, &id).filter(|r| r["connected"] == true),
    );
    // One frame first. If the worker was connected for longer than the
    // silence limit before it, that wait is a `no_data` gap of its own, closed
    // by this frame: the gap checked below is the last one.
    let ts = now_ms();
    let first_frame_ms = ts;
    publish_frame(&broker, &prefix, ts, 0.5, 6.5);
    wait_for(Duration::from_secs(20), "the first frame processed", || {
        status_row(&db, &id).filter(|r| radar_testkit::harness::processed(r) >= 1)
    });
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
    // The open gap began at the first frame or later: a wait before that frame
    // is a gap of its own, closed by it.
    let silence = poll::within(Duration::from_secs(20)).blocking(
        "an open no_data gap in the snapshot, since the first frame",
        || match no_data_gaps(&db, &id).as_slice() {
            [.., last] if !last.closed && last.from_ms >= first_frame_ms => Ok(*last),
            gaps => Err(format!("no_data gaps {gaps:?}")),
        },
    );

    // Both readings at one source time: a frame forms, the monitor runs again.
    let ts = now_ms();
    publish_frame(&broker, &prefix, ts, 2.5, 7.5);
    wait_for(
        Duration::from_secs(20),
        "/readyz 200 once frames form",
        || worker.get("/readyz").filter(|(c, _)| *c == 200),
    );
    poll::within(Duration::from_secs(20)).blocking("the no_data gap is closed", || {
        let gaps = no_data_gaps(&db, &id);
        match gaps.iter().find(|g| g.from_ms == silence.from_ms) {
            Some(g) if g.closed && gaps.iter().all(|g| g.closed) => Ok(()),
            _ => Err(format!("no_data gaps {gaps:?}")),
        }
    });
}

/// Waits until the monitor's status row carries a heartbeat written at
/// least `ms` after now: by then a tick that had nothing left to do has
/// stopped (it checks every second).
fn heartbeats_for(db: &db::TestDb, id: &str, ms: i64) {
    let after = now_ms() + ms;
    poll::within(Duration::from_secs(20)).blocking("a later heartbeat", || {
        let beat = status_row(db, id)
            .and_then(|r| r["heartbeat_at"].as_str().map(str::to_string))
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(&t).ok())
            .map(|t| t.timestamp_millis());
        match beat {
            Some(beat) if beat >= after => Ok(()),
            beat => Err(format!("heartbeat at {beat:?}, waiting for {after}")),
        }
    });
}

/// An idle monitor has no clock-driven checks running (silent, nothing
/// held, every checkpoint committed); each later batch must start them
/// again: a frame lets it fall silent again after the limit, and a value
/// that completes no frame still expires after `freshness_ms`.
#[tokio::test]
async fn a_monitor_that_fell_idle_watches_the_clock_again_after_new_data() {
    let db = db::migrated_database("telemetry_no_data_rearm").await;
    let dir = tempfile::tempdir().unwrap();
    let prefix = db::unique_name("rearm");
    let toml = MonitorFile::new("rearm")
        .readings_under(&prefix, &["flow", "pressure"])
        .silence_ms(2000)
        .freshness_ms(2000)
        .to_toml();
    let id = create_monitor_from(&db, dir.path(), "m", &toml);
    let broker = Mosquitto::start_anonymous();
    let worker = Worker::spawn(&db, &broker, dir.path(), &[&id], &[]);

    // Never any data: silent after the limit, and that checkpointed (before
    // the first frame the startup gap covers the time, so no_data is only
    // active). Nothing can fall due any more: the monitor is idle.
    wait_for(
        Duration::from_secs(20),
        "the status row says no_data",
        || (status_state(&db, &id).as_deref() == Some("no_data")).then_some(()),
    );
    poll::within(Duration::from_secs(20)).blocking(
        "no_data active in the committed snapshot",
        || {
            let json = snapshot_inspection(&db, &id);
            let active = &json["coverage"]["active"];
            match active.as_array() {
                Some(causes) if causes.iter().any(|c| c == "no_data") => Ok(()),
                _ => Err(format!("active coverage causes {active}")),
            }
        },
    );

    heartbeats_for(&db, &id, 2500);

    // A frame ends the silence; with no more data the clock must make the
    // monitor silent again.
    let ts = now_ms();
    publish_frame(&broker, &prefix, ts, 0.5, 6.5);
    poll::within(Duration::from_secs(30)).blocking(
        "an open no_data gap from the frame on, after the limit",
        || {
            let gaps = no_data_gaps(&db, &id);
            match gaps.last() {
                Some(gap) if !gap.closed && gap.from_ms >= ts => Ok(()),
                _ => Err(format!("no_data gaps {gaps:?}")),
            }
        },
    );

    heartbeats_for(&db, &id, 2500);

    // Silent and idle again; one value that completes no frame is held, and
    // expires after freshness_ms only if the clock is watched again.
    let held = || {
        radar_testkit::exposition::sample(
            &worker.metrics(),
            "radar_partial_frame_values",
            &[("monitor_id", id.as_str())],
        )
    };
    broker.publish(
        &format!("{prefix}/flow"),
        &format!(r#"{{"ts": {}, "value": 1.5}}"#, now_ms()),
    );
    poll::within(Duration::from_secs(20)).blocking("the value held", || match held() {
        Some(v) if v >= 1.0 => Ok(()),
        v => Err(format!("held values {v:?}")),
    });
    // The gauge is written only while values are held: at 0 the series goes.
    poll::within(Duration::from_secs(20)).blocking(
        "the held value expired after freshness_ms",
        || match held() {
            None | Some(0.0) => Ok(()),
            v => Err(format!("held values {v:?}")),
        },
    );
}
