//! The per-worker instruments, built from any `Meter`: tests pass one from
//! their own meter provider, the worker the global one (a no-op until a
//! provider is installed, so recording costs next to nothing then).
//!
//! Only breakdowns (by reason, trigger, cause) and distributions live in the
//! SDK: a few dozen series per worker. Per-monitor series are read from the
//! [`super::Board`] at scrape time and written as text ([`super::text`]), so
//! the exposition and readiness can never disagree, ages are computed when
//! read, and a monitor taken off the board stops reporting at once.

use opentelemetry::metrics::{Counter, Histogram, Meter};

use super::names::Metric;

/// Bucket bounds of the score histogram: scores are unitless and mostly
/// around the calibrated threshold, so fine steps near 1 and coarse above.
const SCORE_BOUNDS: &[f64] = &[
    0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 20.0, 50.0, 100.0,
];
/// Model operations run from microseconds (scoring) to seconds (a fit).
const OPERATION_BOUNDS: &[f64] = &[
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0,
];
/// A checkpoint is one PostgreSQL transaction; its timeout defaults to 30 s.
const CHECKPOINT_BOUNDS: &[f64] = &[
    0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];
/// Snapshot sizes from 1 KiB to 64 MiB in powers of four.
const SIZE_BOUNDS: &[f64] = &[
    1024.0,
    4096.0,
    16384.0,
    65536.0,
    262_144.0,
    1_048_576.0,
    4_194_304.0,
    16_777_216.0,
    67_108_864.0,
];

/// The per-worker instruments: breakdowns and distributions over all the
/// worker's monitors. Per-monitor series are not here: they are counted in
/// each monitor's board slot and written by [`super::text`].
#[derive(Debug)]
pub struct Instruments {
    pub(crate) observations_rejected_by_reason: Counter<u64>,
    pub(crate) frame_score: Histogram<f64>,
    pub(crate) model_operation_duration: Histogram<f64>,
    pub(crate) checkpoint_commits_by_trigger: Counter<u64>,
    pub(crate) checkpoint_failures_by_reason: Counter<u64>,
    pub(crate) checkpoint_duration: Histogram<f64>,
    pub(crate) checkpoint_size: Histogram<u64>,
    pub(crate) coverage_gap_duration_by_cause: Counter<f64>,
}

fn counter(meter: &Meter, m: Metric) -> Counter<u64> {
    meter
        .u64_counter(m.name())
        .with_unit(m.unit())
        .with_description(m.description())
        .build()
}

fn histogram(meter: &Meter, m: Metric, bounds: &[f64]) -> Histogram<f64> {
    meter
        .f64_histogram(m.name())
        .with_unit(m.unit())
        .with_description(m.description())
        .with_boundaries(bounds.to_vec())
        .build()
}

impl Instruments {
    /// Builds every per-worker instrument of [`Metric::ALL`] on `meter`.
    pub fn new(meter: &Meter) -> Self {
        let gap = Metric::CoverageGapDurationByCause;
        Self {
            observations_rejected_by_reason: counter(meter, Metric::ObservationsRejectedByReason),
            frame_score: histogram(meter, Metric::FrameScore, SCORE_BOUNDS),
            model_operation_duration: histogram(
                meter,
                Metric::ModelOperationDuration,
                OPERATION_BOUNDS,
            ),
            checkpoint_commits_by_trigger: counter(meter, Metric::CheckpointCommitsByTrigger),
            checkpoint_failures_by_reason: counter(meter, Metric::CheckpointFailuresByReason),
            checkpoint_duration: histogram(meter, Metric::CheckpointDuration, CHECKPOINT_BOUNDS),
            checkpoint_size: meter
                .u64_histogram(Metric::CheckpointSize.name())
                .with_unit(Metric::CheckpointSize.unit())
                .with_description(Metric::CheckpointSize.description())
                .with_boundaries(SIZE_BOUNDS.to_vec())
                .build(),
            coverage_gap_duration_by_cause: meter
                .f64_counter(gap.name())
                .with_unit(gap.unit())
                .with_description(gap.description())
                .build(),
        }
    }
}
