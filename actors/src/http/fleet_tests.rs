//! The exposition at fleet scale: every monitor keeps its series (they are
//! written from the board, with no SDK series limit), an idle monitor costs
//! eleven lines, and the breakdowns by reason, trigger and cause are per
//! worker.

use opentelemetry::metrics::MeterProvider;
use radar::{
    coverage::GapCause,
    mqtt::ConnectionEvent,
    runtime::Trigger,
    telemetry::{CheckpointFailure, DetectorPhase, METER_NAME, RejectReason, Telemetry, events::*},
};
use uuid::Uuid;

use super::exposition;

/// Builds a worker's provider and telemetry as the binary does.
fn worker() -> (
    opentelemetry_sdk::metrics::SdkMeterProvider,
    prometheus::Registry,
    Telemetry,
) {
    let (provider, registry) =
        exposition::build_meter_provider("fleet-worker", exposition::OtlpPush::Off).unwrap();
    let telemetry = Telemetry::new(&provider.meter(METER_NAME));
    (provider, registry, telemetry)
}

fn lines_of<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
    let prefix = format!("{name}{{");
    text.lines().filter(|l| l.starts_with(&prefix)).collect()
}

#[test]
fn every_monitor_keeps_its_series_past_the_sdk_default_of_2000_per_metric() {
    let (_provider, registry, telemetry) = worker();
    const MONITORS: u128 = 2_100;
    let handles: Vec<_> = (0..MONITORS)
        .map(|i| telemetry.monitor(Uuid::from_u128(i + 1), &format!("pump-{i}")))
        .collect();
    let text = exposition::render(&registry, telemetry.board()).unwrap();
    assert!(
        !text.contains("otel_metric_overflow"),
        "series folded into the overflow series"
    );
    assert_eq!(
        lines_of(&text, "radar_monitor_state").len(),
        MONITORS as usize
    );
    assert_eq!(
        lines_of(&text, "radar_coverage_gap_duration_seconds_total").len(),
        MONITORS as usize
    );
    drop(handles);
}

/// The guarantee behind #16's 1 MB at 1000 monitors: what an idle monitor
/// adds to a real worker's exposition.
#[test]
fn an_idle_connected_monitor_adds_eleven_lines_to_the_exposition() {
    let (_provider, registry, telemetry) = worker();
    let idle = |i: u128| {
        let m = telemetry.monitor(Uuid::from_u128(i), &format!("pump-{i}"));
        m.emit(OwnershipAcquired);
        m.emit(DetectorPhaseChanged {
            phase: DetectorPhase::Training,
        });
        m.emit(CheckpointCommitted {
            trigger: Trigger::BeforeSubscribing,
            duration: std::time::Duration::from_millis(3),
            bytes: 4096,
            saved_at: chrono::Utc::now(),
        });
        m.set_queue_capacity(1024);
        m.set_last_accepted(vec![("flow".into(), None), ("rpm".into(), None)]);
        m.emit(ConnectionChanged(&ConnectionEvent::Connected {
            at: chrono::Utc::now(),
            attempt: 1,
        }));
        m
    };
    let count = |text: &str| text.lines().filter(|l| !l.starts_with('#')).count();
    let _one = idle(1);
    let with_one = exposition::render(&registry, telemetry.board()).unwrap();
    let _more: Vec<_> = (2..=11).map(idle).collect();
    let with_eleven = exposition::render(&registry, telemetry.board()).unwrap();
    assert_eq!(
        (count(&with_eleven) - count(&with_one)) / 10,
        11,
        "lines per idle monitor:\n{with_eleven}"
    );
    let per_monitor = (with_eleven.len() - with_one.len()) / 10;
    assert!(
        per_monitor <= 1_000,
        "{per_monitor} bytes per idle monitor: 1000 monitors pass 1 MB"
    );
}

#[test]
fn every_reason_series_exists_at_zero_per_worker_before_any_rejection() {
    let (_provider, registry, telemetry) = worker();
    let _pump = telemetry.monitor(Uuid::from_u128(7), "pump");
    let text = exposition::render(&registry, telemetry.board()).unwrap();
    let rejected = lines_of(&text, "radar_observations_rejected_by_reason_total");
    for reason in RejectReason::ALL {
        let line = format!("{{reason=\"{reason}\"}} 0");
        assert!(
            rejected.iter().any(|l| l.ends_with(&line)),
            "no zero series for {reason}: {rejected:?}"
        );
    }
    assert_eq!(rejected.len(), RejectReason::ALL.len());
    let failures = lines_of(&text, "radar_checkpoint_failures_by_reason_total");
    for reason in CheckpointFailure::ALL {
        let line = format!("{{reason=\"{reason}\"}} 0");
        assert!(
            failures.iter().any(|l| l.ends_with(&line)),
            "no zero series for {reason}: {failures:?}"
        );
    }
    let commits = lines_of(&text, "radar_checkpoint_commits_by_trigger_total");
    assert_eq!(commits.len(), Trigger::ALL.len(), "{commits:?}");
    let gaps = lines_of(&text, "radar_coverage_gap_duration_by_cause_seconds_total");
    assert_eq!(gaps.len(), GapCause::ALL.len(), "{gaps:?}");
    // The monitor's totals exist at 0 too (failures once there is one),
    // and no monitor line has a reason, trigger or cause.
    let id = "monitor_id=\"00000000-0000-0000-0000-000000000007\"";
    for name in [
        "radar_observations_rejected_total",
        "radar_checkpoint_commits_total",
        "radar_coverage_gap_duration_seconds_total",
    ] {
        let lines = lines_of(&text, name);
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(
            lines[0].contains(id) && lines[0].ends_with(" 0"),
            "{lines:?}"
        );
    }
    assert!(lines_of(&text, "radar_checkpoint_failures_total").is_empty());
    assert!(
        text.lines()
            .filter(|l| l.contains("monitor_id="))
            .all(|l| !l.contains("reason=") && !l.contains("trigger=") && !l.contains("cause=")),
        "a per-monitor series carries a breakdown:\n{text}"
    );
}
