//! The instruments behind [`Metric`], built from any `Meter`: tests pass one
//! from their own meter provider, the worker the global one (a no-op until a
//! provider is installed, so recording costs next to nothing then).
//!
//! Gauges are observable and read the [`Board`] when a reader collects.
//! The board already holds each monitor's state for `/readyz`, so the
//! exposition and readiness can never disagree; the snapshot age is computed
//! at collection time instead of going stale between updates; and a monitor
//! taken off the board stops reporting gauge series at once (the SDK keeps
//! only what the last callback observed), where a synchronous gauge would
//! repeat its last value forever.

use std::{
    sync::{Arc, Mutex, PoisonError},
    time::Instant,
};

use chrono::Utc;
use opentelemetry::{
    KeyValue,
    metrics::{AsyncInstrument, Counter, Histogram, Meter, ObservableCounter, ObservableGauge},
};

use super::{
    condition::MonitorState,
    labels::key,
    names::Metric,
    readiness::{Board, MonitorView},
};

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

/// How long one copy of every monitor's view serves the gauge callbacks:
/// one collection runs all of them within milliseconds, so each builds
/// the views once instead of once per gauge.
const VIEWS_FRESH_FOR: std::time::Duration = std::time::Duration::from_millis(50);

/// Every monitor's view, shared by the gauge callbacks of one collection;
/// rebuilt when older than [`VIEWS_FRESH_FOR`] or when a monitor was
/// admitted or removed since (so a removed monitor's series end at once).
#[derive(Clone)]
struct SharedViews {
    board: Board,
    memo: Arc<Mutex<Option<Memo>>>,
}

/// When the views were built, the board's membership then, and the views.
type Memo = (Instant, u64, Arc<Vec<MonitorView>>);

impl SharedViews {
    fn new(board: &Board) -> Self {
        Self {
            board: board.clone(),
            memo: Arc::new(Mutex::new(None)),
        }
    }

    fn get(&self) -> Arc<Vec<MonitorView>> {
        let membership = self.board.membership();
        let mut memo = self.memo.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((at, seen, views)) = memo.as_ref()
            && *seen == membership
            && at.elapsed() < VIEWS_FRESH_FOR
        {
            return views.clone();
        }
        let views = Arc::new(self.board.views(Utc::now()));
        *memo = Some((Instant::now(), membership, views.clone()));
        views
    }
}

/// The synchronous instruments; the gauges live as callbacks in the meter.
#[derive(Debug)]
pub struct Instruments {
    pub(crate) observations_received: Counter<u64>,
    pub(crate) observations_accepted: Counter<u64>,
    pub(crate) observations_rejected: Counter<u64>,
    pub(crate) observations_rejected_by_reason: Counter<u64>,
    pub(crate) frames_emitted: Counter<u64>,
    pub(crate) frames_flagged: Counter<u64>,
    pub(crate) frame_score: Histogram<f64>,
    pub(crate) alarms_opened: Counter<u64>,
    pub(crate) alarms_closed: Counter<u64>,
    pub(crate) model_operation_duration: Histogram<f64>,
    pub(crate) checkpoint_commits: Counter<u64>,
    pub(crate) checkpoint_failures: Counter<u64>,
    pub(crate) checkpoint_failures_by_reason: Counter<u64>,
    pub(crate) checkpoint_duration: Histogram<f64>,
    pub(crate) checkpoint_size: Histogram<u64>,
    pub(crate) mqtt_reconnect_attempts: Counter<u64>,
    pub(crate) coverage_gap_duration: Counter<f64>,
    // Held so the registrations visibly belong to this value.
    _u64_gauges: Vec<ObservableGauge<u64>>,
    _f64_gauges: Vec<ObservableGauge<f64>>,
    _observable_counters: Vec<ObservableCounter<u64>>,
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

/// A gauge whose callback observes every monitor view on the board.
fn u64_gauge(
    meter: &Meter,
    views: &SharedViews,
    m: Metric,
    observe: impl Fn(&MonitorView, &dyn AsyncInstrument<u64>) + Send + Sync + 'static,
) -> ObservableGauge<u64> {
    let views = views.clone();
    meter
        .u64_observable_gauge(m.name())
        .with_unit(m.unit())
        .with_description(m.description())
        .with_callback(move |o| {
            for view in views.get().iter() {
                observe(view, o);
            }
        })
        .build()
}

fn f64_gauge(
    meter: &Meter,
    views: &SharedViews,
    m: Metric,
    observe: impl Fn(&MonitorView, &dyn AsyncInstrument<f64>) + Send + Sync + 'static,
) -> ObservableGauge<f64> {
    let views = views.clone();
    meter
        .f64_observable_gauge(m.name())
        .with_unit(m.unit())
        .with_description(m.description())
        .with_callback(move |o| {
            for view in views.get().iter() {
                observe(view, o);
            }
        })
        .build()
}

/// `monitor.id` and one more attribute.
fn with(view: &MonitorView, k: &'static str, v: &'static str) -> [KeyValue; 2] {
    [view.attrs[0].clone(), KeyValue::new(k, v)]
}

impl Instruments {
    /// Builds every instrument of [`Metric::ALL`] on `meter`; the gauges read
    /// `board`.
    pub fn new(meter: &Meter, board: &Board) -> Self {
        let board = &SharedViews::new(board);
        let u64_gauges = vec![
            u64_gauge(meter, board, Metric::IngressQueueDepth, |v, o| {
                o.observe(v.queue_depth, &v.attrs)
            }),
            u64_gauge(meter, board, Metric::IngressQueueCapacity, |v, o| {
                if let Some(capacity) = v.queue_capacity {
                    o.observe(capacity, &v.attrs)
                }
            }),
            u64_gauge(meter, board, Metric::PartialFrameValues, |v, o| {
                o.observe(v.held_values, &v.attrs)
            }),
            u64_gauge(meter, board, Metric::OwnershipHeld, |v, o| {
                o.observe(u64::from(v.ownership_held), &v.attrs)
            }),
            u64_gauge(meter, board, Metric::Quarantined, |v, o| {
                o.observe(u64::from(v.state == MonitorState::Quarantined), &v.attrs)
            }),
            u64_gauge(meter, board, Metric::MqttConnected, |v, o| {
                o.observe(u64::from(v.connected), &v.attrs)
            }),
            // One series per monitor for its current state (and phase), not
            // one per possible value: `== 1` queries read the same, and a
            // thousand monitors do not expose ten thousand zeros.
            // The name once per monitor, not on every line: queries join it
            // by `monitor_id` (`* on (monitor_id) group_left (monitor_name)`).
            u64_gauge(meter, board, Metric::MonitorInfo, |v, o| {
                let info = [
                    v.attrs[0].clone(),
                    KeyValue::new(key::MONITOR_NAME, v.name.clone()),
                ];
                o.observe(1, &info);
            }),
            u64_gauge(meter, board, Metric::MonitorState, |v, o| {
                o.observe(1, &with(v, key::STATE, v.state.as_str()));
            }),
            u64_gauge(meter, board, Metric::DetectorPhase, |v, o| {
                if let Some(current) = v.phase {
                    o.observe(1, &with(v, key::PHASE, current.as_str()));
                }
            }),
            u64_gauge(meter, board, Metric::RecoveryRestoredProcessed, |v, o| {
                if let Some(r) = &v.recovery {
                    o.observe(r.restored_processed, &v.attrs)
                }
            }),
            u64_gauge(
                meter,
                board,
                Metric::RecoveryPartialFramesCleared,
                |v, o| {
                    if let Some(r) = &v.recovery {
                        o.observe(r.partial_frames_cleared, &v.attrs)
                    }
                },
            ),
        ];
        let f64_gauges = vec![
            f64_gauge(meter, board, Metric::SnapshotAge, |v, o| {
                if let Some(age) = v.snapshot_age {
                    o.observe(age.as_secs_f64(), &v.attrs)
                }
            }),
            f64_gauge(meter, board, Metric::ReadingAge, |v, o| {
                for (reading, age) in &v.reading_ages {
                    if let Some(age) = age {
                        let attrs = [
                            v.attrs[0].clone(),
                            KeyValue::new(key::READING, reading.clone()),
                        ];
                        o.observe(age.as_secs_f64(), &attrs);
                    }
                }
            }),
            f64_gauge(meter, board, Metric::RecoveryPossibleGap, |v, o| {
                if let Some(gap) = v.recovery.as_ref().and_then(|r| r.possible_gap) {
                    o.observe(gap.as_secs_f64(), &v.attrs)
                }
            }),
        ];
        let stale_views = board.clone();
        let stale = Metric::RecoveryStaleRejected;
        let observable_counters = vec![
            meter
                .u64_observable_counter(stale.name())
                .with_unit(stale.unit())
                .with_description(stale.description())
                .with_callback(move |o| {
                    for v in stale_views.get().iter() {
                        o.observe(v.stale_rejected, &v.attrs)
                    }
                })
                .build(),
        ];
        let gap = Metric::CoverageGapDuration;
        Self {
            observations_received: counter(meter, Metric::ObservationsReceived),
            observations_accepted: counter(meter, Metric::ObservationsAccepted),
            observations_rejected: counter(meter, Metric::ObservationsRejected),
            observations_rejected_by_reason: counter(meter, Metric::ObservationsRejectedByReason),
            frames_emitted: counter(meter, Metric::FramesEmitted),
            frames_flagged: counter(meter, Metric::FramesFlagged),
            frame_score: histogram(meter, Metric::FrameScore, SCORE_BOUNDS),
            alarms_opened: counter(meter, Metric::AlarmsOpened),
            alarms_closed: counter(meter, Metric::AlarmsClosed),
            model_operation_duration: histogram(
                meter,
                Metric::ModelOperationDuration,
                OPERATION_BOUNDS,
            ),
            checkpoint_commits: counter(meter, Metric::CheckpointCommits),
            checkpoint_failures: counter(meter, Metric::CheckpointFailures),
            checkpoint_failures_by_reason: counter(meter, Metric::CheckpointFailuresByReason),
            checkpoint_duration: histogram(meter, Metric::CheckpointDuration, CHECKPOINT_BOUNDS),
            checkpoint_size: meter
                .u64_histogram(Metric::CheckpointSize.name())
                .with_unit(Metric::CheckpointSize.unit())
                .with_description(Metric::CheckpointSize.description())
                .with_boundaries(SIZE_BOUNDS.to_vec())
                .build(),
            mqtt_reconnect_attempts: counter(meter, Metric::MqttReconnectAttempts),
            coverage_gap_duration: meter
                .f64_counter(gap.name())
                .with_unit(gap.unit())
                .with_description(gap.description())
                .build(),
            _u64_gauges: u64_gauges,
            _f64_gauges: f64_gauges,
            _observable_counters: observable_counters,
        }
    }
}
