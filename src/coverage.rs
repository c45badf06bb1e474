//! Coverage history: which stretches of time the monitor saw, and why it
//! did not see the others.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Why the monitor may have missed observations in a stretch of time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GapCause {
    /// Before the first frame of a fresh monitor.
    Startup,
    /// The MQTT connection was down or subscriptions were not acknowledged.
    MqttOutage,
    /// The worker restarted: input since the last committed snapshot is lost.
    RestartRollback,
    /// Checkpoints could not commit in time, so the model stopped advancing.
    CheckpointStall,
}

/// One stretch of time without coverage.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gap {
    pub cause: GapCause,
    pub from: DateTime<Utc>,
    /// `None` while the gap is still open.
    pub to: Option<DateTime<Utc>>,
}

/// The versioned list of gaps, plus the first and last covered instants.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CoverageHistory {
    /// Bumped on every known change; a change triggers a checkpoint.
    pub version: u64,
    /// Source time of the first frame ever emitted.
    pub covered_from: Option<DateTime<Utc>>,
    /// Source time of the newest frame emitted.
    pub covered_to: Option<DateTime<Utc>>,
    pub gaps: Vec<Gap>,
}
