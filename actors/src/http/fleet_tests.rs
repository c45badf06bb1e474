//! The exposition at fleet scale: every monitor keeps its series past the
//! SDK's default series limit, and the reason breakdowns are per worker.

use opentelemetry::metrics::MeterProvider;
use radar::telemetry::{CheckpointFailure, METER_NAME, RejectReason, Telemetry};
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
    let text = exposition::render(&registry).unwrap();
    assert!(
        !text.contains("otel_metric_overflow"),
        "series folded into the overflow series"
    );
    // One state series per monitor, and five gap causes per monitor (10,500).
    assert_eq!(
        lines_of(&text, "radar_monitor_state").len(),
        MONITORS as usize
    );
    assert_eq!(
        lines_of(&text, "radar_coverage_gap_duration_seconds_total").len(),
        MONITORS as usize * radar::coverage::GapCause::ALL.len()
    );
    drop(handles);
}

#[test]
fn every_reason_series_exists_at_zero_per_worker_before_any_rejection() {
    let (_provider, registry, telemetry) = worker();
    let _pump = telemetry.monitor(Uuid::from_u128(7), "pump");
    let text = exposition::render(&registry).unwrap();
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
    // The monitor's totals exist at 0 too, and no monitor line has a reason.
    let id = "monitor_id=\"00000000-0000-0000-0000-000000000007\"";
    for name in [
        "radar_observations_rejected_total",
        "radar_checkpoint_failures_total",
    ] {
        let lines = lines_of(&text, name);
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(
            lines[0].contains(id) && lines[0].ends_with(" 0"),
            "{lines:?}"
        );
    }
    assert!(
        text.lines()
            .filter(|l| l.contains("monitor_id="))
            .all(|l| !l.contains("reason=")),
        "a per-monitor series carries a reason:\n{text}"
    );
}
