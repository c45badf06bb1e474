//! Coverage history: which stretches of time the monitor saw, and why it
//! did not see the others.
//!
//! The history is a list of gaps, oldest first, that never overlap; only the
//! newest may still be open. Several causes can be in effect at once (an
//! MQTT outage during a checkpoint stall); the open gap carries the cause
//! that opened it, and when that cause ends while another is still in
//! effect, the gap closes and a new one continues under the remaining cause.
//! Instants that would make a gap overlap its predecessor or end before it
//! starts are clamped, so callers may pass slightly disordered clocks.
//!
//! Every mutation reports whether the persisted history changed and bumps
//! `version` when it did, so the caller knows when to checkpoint. The newest
//! covered instant (`covered_to`) advances with every frame and is progress,
//! not a change: it is not versioned, or every frame would checkpoint.

mod history;
mod totals;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

pub use history::MAX_GAPS;
pub use totals::{GapTotal, GapTotals};

/// Why the monitor may have missed observations in a stretch of time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
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
    /// Connected, but a required reading delivered nothing for longer than
    /// the monitor's `alignment.silence_ms`: from the last frame to the next.
    NoData,
}

impl GapCause {
    /// Every cause, for registering metric series up front.
    pub const ALL: [GapCause; 5] = [
        Self::Startup,
        Self::MqttOutage,
        Self::RestartRollback,
        Self::CheckpointStall,
        Self::NoData,
    ];

    /// The stable metric label (same as the serde name).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Startup => "startup",
            Self::MqttOutage => "mqtt_outage",
            Self::RestartRollback => "restart_rollback",
            Self::CheckpointStall => "checkpoint_stall",
            Self::NoData => "no_data",
        }
    }
}

impl std::fmt::Display for GapCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One stretch of time without coverage.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gap {
    pub cause: GapCause,
    pub from: DateTime<Utc>,
    /// `None` while the gap is still open.
    pub to: Option<DateTime<Utc>>,
}

/// The last restore from a snapshot, for recovery metadata.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestoreMark {
    /// When the restored snapshot was saved.
    pub saved_at: DateTime<Utc>,
    /// When this worker restored it.
    pub restored_at: DateTime<Utc>,
    /// Restores over the monitor's life, this one included.
    pub restores: u64,
}

/// The versioned list of gaps, plus the first and last covered instants.
///
/// The public fields are for reading; change the history only through its
/// methods, which keep the gaps ordered, disjoint and bounded.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CoverageHistory {
    /// Bumped on every known change; a change triggers a checkpoint.
    pub version: u64,
    /// Source time of the first frame ever emitted.
    pub covered_from: Option<DateTime<Utc>>,
    /// Source time of the newest frame emitted.
    pub covered_to: Option<DateTime<Utc>>,
    /// Oldest first, disjoint; only the last may be open. At most
    /// [`MAX_GAPS`]; older ones are folded into `dropped`.
    pub gaps: Vec<Gap>,
    /// Causes in effect, in the order they began; non-empty exactly when the
    /// last gap is open, whose cause is the first entry.
    #[serde(default)]
    active: Vec<GapCause>,
    /// Totals of the gaps removed to keep the list bounded.
    #[serde(default)]
    dropped: GapTotals,
    /// End of the newest removed gap: the list is complete only after it.
    #[serde(default)]
    dropped_before: Option<DateTime<Utc>>,
    #[serde(default)]
    last_restore: Option<RestoreMark>,
}

#[cfg(test)]
mod tests;
