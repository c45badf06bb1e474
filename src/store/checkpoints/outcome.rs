//! What a snapshot write can end in, and the writer that can no longer write.

use std::fmt;

use thiserror::Error;
use uuid::Uuid;

use super::CheckpointWriter;
use crate::store::StoreError;

/// How an attempt to write the first snapshot ended.
#[derive(Debug)]
pub enum Claim {
    /// This worker's snapshot is the row: it owns the monitor.
    Won(CheckpointWriter),
    /// Another worker's snapshot was there first.
    Lost(OwnershipLost),
}

/// How a fenced write ended. Each arm hands the writer on or retires it.
#[derive(Debug)]
pub enum WriteOutcome {
    Committed(CheckpointWriter),
    /// Nothing known was committed; the writer may retry with the same
    /// pending results.
    Failed {
        writer: CheckpointWriter,
        error: StoreError,
    },
    OwnershipLost(OwnershipLost),
}

/// How a fenced write did not commit: every [`WriteOutcome`] but
/// `Committed`.
#[derive(Debug)]
pub enum NotCommitted {
    OwnershipLost(OwnershipLost),
    /// Nothing known was committed; the writer may retry.
    Failed {
        writer: CheckpointWriter,
        error: StoreError,
    },
}

impl From<NotCommitted> for WriteOutcome {
    fn from(not: NotCommitted) -> Self {
        match not {
            NotCommitted::OwnershipLost(lost) => Self::OwnershipLost(lost),
            NotCommitted::Failed { writer, error } => Self::Failed { writer, error },
        }
    }
}

/// Which write found out that another worker owns the snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteKind {
    InitialSnapshot,
    Checkpoint,
    EvidenceBatch,
    Health,
}

impl fmt::Display for WriteKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::InitialSnapshot => "initial snapshot",
            Self::Checkpoint => "checkpoint",
            Self::EvidenceBatch => "evidence batch",
            Self::Health => "health write",
        })
    }
}

/// Why a writer may write no more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LossReason {
    /// Another worker committed a successor snapshot.
    Successor,
    /// The monitor's graph run is recorded as failed: its generation is
    /// fenced for every writer, even one holding the row's signature.
    FailedRun,
}

impl fmt::Display for LossReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Successor => "another worker committed a successor",
            Self::FailedRun => "its graph run is recorded as failed (a fenced generation)",
        })
    }
}

/// A writer that found another worker's snapshot in its row, or a failed
/// run behind it. Terminal: it has no write methods, and its pending
/// results stay with the caller.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error(
    "Monitor {service_id} lost ownership of its snapshot: its {refused} was refused because \
     {reason} (this worker held token {token}). This worker stops the monitor and writes \
     nothing more for it; the new owner carries on."
)]
pub struct OwnershipLost {
    pub service_id: Uuid,
    /// Short form of the token this worker last held.
    pub token: String,
    pub refused: WriteKind,
    pub reason: LossReason,
}
