//! Every counter of an admitted monitor exists from admission with value 0,
//! so an alert on `rate(radar_frames_emitted_total[5m]) == 0` can fire for
//! a monitor that never formed a frame, and its rejection and checkpoint
//! failure totals, every gap cause and every rejection reason (per worker)
//! read 0 instead of being absent.

use std::time::Duration;

use radar_testkit::{
    broker::Mosquitto, db, exposition::sample, telemetry::create_monitor, telemetry::wait_for,
    worker::Worker,
};

#[tokio::test]
async fn a_monitor_that_received_nothing_shows_its_alerting_counters_at_zero() {
    let db = db::migrated_database("telemetry_counters_exist").await;
    let dir = tempfile::tempdir().unwrap();
    let topic = format!("{}/a", db::unique_name("zeroes"));
    let id = create_monitor(&db, dir.path(), "zeroes", &topic);
    let broker = Mosquitto::start_anonymous();
    let worker = Worker::spawn(&db, &broker, dir.path(), &[&id], &[]);
    let me = [("monitor_id", id.as_str())];
    let text = wait_for(Duration::from_secs(30), "the monitor is connected", || {
        let text = worker.metrics();
        (sample(&text, "radar_mqtt_connected", &me) == Some(1.0)).then_some(text)
    });
    // The counts `rate(...) == 0` alerts read exist from admission.
    for name in [
        "radar_observations_received_total",
        "radar_observations_accepted_total",
        "radar_observations_rejected_total",
        "radar_frames_emitted_total",
        "radar_coverage_gap_duration_seconds_total",
    ] {
        assert_eq!(sample(&text, name, &me), Some(0.0), "{name}:\n{text}");
    }
    // Counts that stay 0 for an idle monitor appear at their first
    // increment: they would be most of an idle fleet's exposition.
    for name in [
        "radar_frames_flagged_total",
        "radar_alarms_opened_total",
        "radar_alarms_closed_total",
        "radar_checkpoint_failures_total",
        "radar_mqtt_reconnect_attempts_total",
    ] {
        assert_eq!(sample(&text, name, &me), None, "{name}:\n{text}");
    }
    // The breakdowns by reason are per worker, each from 0.
    for reason in ["not_json", "stale", "too_old", "too_large", "unknown_topic"] {
        assert_eq!(
            sample(
                &text,
                "radar_observations_rejected_by_reason_total",
                &[("reason", reason)]
            ),
            Some(0.0),
            "rejected {reason}:\n{text}"
        );
    }
    for reason in ["database", "timeout"] {
        assert_eq!(
            sample(
                &text,
                "radar_checkpoint_failures_by_reason_total",
                &[("reason", reason)]
            ),
            Some(0.0),
            "checkpoint failures {reason}:\n{text}"
        );
    }
}
