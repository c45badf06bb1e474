//! The model side of one monitor, free of any actor framework: payload
//! parsing, alignment, the detector, coverage and the cumulative counters, in
//! the one order that both the worker and the offline replay use.
//!
//! Every method takes the clock as an argument and returns what changed, so
//! the runtime decides what to checkpoint or publish.

mod build;
mod graph;
mod ingest;
mod row;
#[cfg(test)]
pub(super) mod tests;

use chrono::{DateTime, Utc};
use uuid::Uuid;

pub use self::row::no_snapshot;
use super::graph_run::GraphRun;
use crate::{
    align::{AlignError, Aligner, Frame},
    config::MonitorConfig,
    coverage::CoverageHistory,
    detector::{AlarmEvent, Detector, DetectorError, Phase, Scored},
    graph::FailureDiagnostics,
    snapshot::{ProcessingCounters, RecoveryMetadata},
    store::PendingResults,
    telemetry::RejectReason,
};

/// Why a monitor's model could not be built or restored.
#[derive(Debug, thiserror::Error)]
pub enum CoreError {
    #[error("monitor {service_id}: {source}")]
    Align {
        service_id: Uuid,
        #[source]
        source: AlignError,
    },
    #[error("monitor {service_id}: {source}")]
    Detector {
        service_id: Uuid,
        #[source]
        source: DetectorError,
    },
    #[error("monitor {service_id} cannot run its graph: {reason}")]
    Graph { service_id: Uuid, reason: String },
}

/// Why a monitor's state could not be exported into a snapshot.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("monitor {service_id}: encoding the snapshot failed: {source}")]
    Encode {
        service_id: Uuid,
        #[source]
        source: rmp_serde::encode::Error,
    },
    #[error(
        "monitor {service_id} is quarantined: its graph state may be damaged and is never exported"
    )]
    Quarantined { service_id: Uuid },
}

/// What scores the frames. One per monitor, moved only when the monitor is
/// built, so the size difference of the variants costs nothing.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
enum Engine {
    /// The built-in detector of a plain monitor.
    Detector(Detector),
    /// A graph run's executor (its own detector nodes included).
    Graph(GraphRun),
}

/// The verdict on one frame, whichever engine scored it.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub score: f64,
    pub flagged: bool,
    pub alarm_event: Option<AlarmEvent>,
}

/// What one step of the model changed.
#[derive(Debug, Default)]
pub struct Step {
    /// Why the observation was not used, if it was not.
    pub rejected: Option<RejectReason>,
    /// The frame offered to the detector, if one was complete.
    pub frame: Option<Frame>,
    /// The detector's verdict on that frame, once it is monitoring (plain
    /// monitors only).
    pub scored: Option<Scored>,
    /// The verdict of the detector or of a graph's alarm sink.
    pub verdict: Option<Verdict>,
    /// A graph node failed uncertainly on this frame: the monitor is
    /// quarantined from now on.
    pub quarantined: Option<FailureDiagnostics>,
    /// The detector is in a new phase after this step.
    pub phase_changed: Option<Phase>,
    /// The fit is due: checkpoint, then call [`MonitorCore::fit`].
    pub fit_due: bool,
    /// The coverage history changed: a checkpoint trigger.
    pub coverage_changed: bool,
    /// Alarms and evidence to commit.
    pub results: PendingResults,
}

impl Step {
    /// Empties the step for the next row, keeping the storage of its
    /// results (the frame is the caller's to hand back first). Field by
    /// field: a whole `Step::default()` written over it copied the step's
    /// ~500 bytes on every row of a replay. Destructured, so a new field
    /// cannot be forgotten here.
    fn clear(&mut self) {
        let Step {
            rejected,
            frame,
            scored,
            verdict,
            quarantined,
            phase_changed,
            fit_due,
            coverage_changed,
            results: PendingResults { alarms, evidence },
        } = self;
        *rejected = None;
        *frame = None;
        *scored = None;
        *verdict = None;
        *quarantined = None;
        *phase_changed = None;
        *fit_due = false;
        *coverage_changed = false;
        alarms.clear();
        evidence.clear();
    }
}

/// One monitor's complete model-side state.
#[derive(Debug)]
pub struct MonitorCore {
    service_id: Uuid,
    config: MonitorConfig,
    readings: Vec<String>,
    aligner: Aligner,
    engine: Engine,
    coverage: CoverageHistory,
    counters: ProcessingCounters,
    recovery: RecoveryMetadata,
    /// When the open alarm opened, so its close can be written as a whole row.
    open_alarm: Option<(u64, DateTime<Utc>)>,
    /// Input is drained and counted without advancing the model, because
    /// checkpoints stopped committing.
    suspended: bool,
}

impl MonitorCore {
    pub fn service_id(&self) -> Uuid {
        self.service_id
    }

    /// The open alarm the detector knows (restored from the snapshot).
    pub fn open_alarm_opened_at(&self) -> Option<DateTime<Utc>> {
        self.open_alarm.map(|(_, at)| at)
    }

    /// After a restore: the alarm table already holds alarms up to `seq`
    /// (some committed after the snapshot), so new ones are numbered after it.
    pub fn continue_alarms_after(&mut self, seq: u64) {
        match &mut self.engine {
            Engine::Detector(detector) => detector.continue_alarms_after(seq),
            Engine::Graph(run) => run.continue_alarms_after(seq),
        }
    }

    pub fn config(&self) -> &MonitorConfig {
        &self.config
    }

    /// The detector's phase; for a graph run, its least advanced detector node's.
    pub fn phase(&self) -> Phase {
        match &self.engine {
            Engine::Detector(detector) => detector.phase(),
            Engine::Graph(run) => run.phase(),
        }
    }

    /// The built-in detector; `None` for a graph run.
    pub fn detector(&self) -> Option<&Detector> {
        match &self.engine {
            Engine::Detector(detector) => Some(detector),
            Engine::Graph(_) => None,
        }
    }

    pub fn is_graph(&self) -> bool {
        matches!(self.engine, Engine::Graph(_))
    }

    /// Why the graph run is quarantined; `None` while it is not.
    pub fn quarantine(&self) -> Option<&FailureDiagnostics> {
        match &self.engine {
            Engine::Graph(run) => run.failure(),
            Engine::Detector(_) => None,
        }
    }

    /// Frames the graph's executor applied; `None` for plain monitors and
    /// once quarantined.
    pub fn graph_frames_applied(&self) -> Option<u64> {
        match &self.engine {
            Engine::Graph(run) => run.frames_applied(),
            Engine::Detector(_) => None,
        }
    }

    pub fn coverage(&self) -> &CoverageHistory {
        &self.coverage
    }

    pub fn counters(&self) -> &ProcessingCounters {
        &self.counters
    }

    pub fn recovery(&self) -> &RecoveryMetadata {
        &self.recovery
    }

    pub fn aligner(&self) -> &Aligner {
        &self.aligner
    }

    /// Frames the detector processed: the snapshot's processed count.
    pub fn processed(&self) -> u64 {
        self.counters.frames
    }

    pub fn is_suspended(&self) -> bool {
        self.suspended
    }
}
