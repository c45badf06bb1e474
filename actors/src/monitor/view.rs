//! What a monitor's actors publish for readers that must never wait: the
//! health actor, readiness and metrics. Cheap to clone; replaced whole.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use radar::{coverage::CoverageHistory, detector::Phase, snapshot::RecoveryMetadata};

/// Who may write this monitor's rows: the library's one ownership type,
/// which the health board reports too.
pub use radar::runtime::Ownership;

/// The model's last published state.
#[derive(Debug, Clone)]
pub struct ModelView {
    pub phase: Phase,
    /// Frames processed by the detector (the snapshot's processed count).
    pub processed: u64,
    /// Frames kept for the fit so far: (training, calibration).
    pub buffered: (usize, usize),
    /// Messages taken from the ingress queue, whatever became of them.
    pub consumed: u64,
    /// Checkpoints stopped committing: input is drained without advancing.
    pub suspended: bool,
    /// A graph node failed uncertainly: what failed. Terminal.
    pub quarantine: Option<String>,
    /// Connected, but required readings are silent: which, for how long.
    pub no_data: Option<String>,
    pub coverage: Arc<CoverageHistory>,
    pub recovery: Arc<RecoveryMetadata>,
    /// Per required reading, when its newest accepted observation was
    /// received (`None` before the first), for the status row.
    pub readings_seen: Vec<(String, Option<DateTime<Utc>>)>,
}

/// The checkpoint side's last published state.
#[derive(Debug, Clone)]
pub struct CheckpointView {
    pub ownership: Ownership,
    /// Prefix of the signature this writer last loaded or committed.
    pub token: Option<String>,
    pub last_commit_at: Option<DateTime<Utc>>,
    pub commits: u64,
    pub failures: u64,
    pub last_error: Option<String>,
    /// Alarms and evidence waiting for a commit.
    pub pending: usize,
}

impl CheckpointView {
    pub fn new(ownership: Ownership) -> Self {
        Self {
            ownership,
            token: None,
            last_commit_at: None,
            commits: 0,
            failures: 0,
            last_error: None,
            pending: 0,
        }
    }
}
