//! What a monitor's actors publish for readers that must never wait: the
//! health actor, readiness and metrics. Cheap to clone; replaced whole.
//! The model's view is the runtime's (`radar::runtime::ModelView`).

use chrono::{DateTime, Utc};

/// The model's last published state, built by the model runtime.
pub use radar::runtime::ModelView;

/// Who may write this monitor's rows: the library's one ownership type,
/// which the health board reports too.
pub use radar::runtime::Ownership;

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
