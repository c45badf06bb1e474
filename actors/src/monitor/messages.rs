//! Messages between one monitor's actors. Each is a named-field struct with
//! an explicit result type.

use actix::prelude::*;
use chrono::{DateTime, Utc};
use radar::{
    graph::FailureDiagnostics,
    mqtt::{ConnectionEvent, RawMessage},
    runtime::{Attempt, ExitReason, Trigger},
    snapshot::SealedSnapshot,
    store::{GraphStore, OwnershipLost, PendingResults, RetriedFailure},
};
use tokio::sync::{mpsc, oneshot};
use uuid::Uuid;

/// Model -> checkpoint: a sealed snapshot to commit. A newer one replaces an
/// older one that has not started committing.
#[derive(Message)]
#[rtype(result = "()")]
pub struct SnapshotReady {
    pub sealed: SealedSnapshot,
    pub trigger: Trigger,
    /// The checkpoint attempt the outcome is reported for.
    pub attempt: Attempt,
    /// The last snapshot of a graceful stop: its outcome ends the monitor.
    pub last: bool,
}

/// Model -> checkpoint: alarms and evidence produced since the last message.
#[derive(Message)]
#[rtype(result = "()")]
pub struct NewResults {
    pub results: PendingResults,
}

/// Monitor -> model, before any input: the alarm table already holds
/// alarms numbered up to `after`; the next one must be numbered after it.
#[derive(Message)]
#[rtype(result = "()")]
pub struct ContinueAlarms {
    pub after: u64,
}

/// Checkpoint -> model: a snapshot committed (or could not be).
#[derive(Message)]
#[rtype(result = "()")]
pub struct CommitReport {
    pub committed: bool,
    /// The attempt that committed or failed.
    pub attempt: Attempt,
    /// The trigger of the snapshot, to retry it when the commit failed.
    pub trigger: Option<Trigger>,
    pub wall: DateTime<Utc>,
}

/// Checkpoint -> model: a background evidence batch, started at `started`,
/// committed or failed. Failed batches count toward the stall timeout.
#[derive(Message)]
#[rtype(result = "()")]
pub struct BatchSettled {
    pub committed: bool,
    pub started: std::time::Instant,
}

/// Monitor -> model: seal a snapshot now and return it (the checkpoint before
/// subscribing is committed by the monitor itself).
#[derive(Message)]
#[rtype(result = "Result<SealedNow, String>")]
pub struct SealNow {
    pub trigger: Trigger,
}

/// A snapshot sealed on request, and the attempt its commit report names.
pub struct SealedNow {
    pub sealed: SealedSnapshot,
    pub attempt: Attempt,
}

/// Monitor -> model: start consuming the ingress queue.
#[derive(Message)]
#[rtype(result = "()")]
pub struct AttachInput {
    pub messages: mpsc::Receiver<RawMessage>,
}

/// Ingestion -> model: the connection changed (coverage records outages).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Connection {
    pub event: ConnectionEvent,
}

/// Monitor -> model and checkpoint: a terminal state; do nothing more.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Halt {
    pub reason: ExitReason,
}

/// Checkpoint/health -> monitor: a write was refused because another worker
/// committed a successor.
#[derive(Message)]
#[rtype(result = "()")]
pub struct LostOwnership {
    pub lost: OwnershipLost,
}

/// Checkpoint -> monitor: the last snapshot of a graceful stop is settled.
#[derive(Message)]
#[rtype(result = "()")]
pub struct LastSnapshotSettled {
    pub committed: bool,
}

/// Model -> monitor: the ingress queue ended after ingestion stopped.
#[derive(Message)]
#[rtype(result = "()")]
pub struct InputDrained;

/// Supervisor -> monitor: stop gracefully (shutdown or retired).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Stop;

/// Model -> monitor: a graph node failed uncertainly. The model ran its
/// last graph call and will seal nothing more.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Quarantined {
    pub diagnostics: FailureDiagnostics,
}

/// Monitor -> checkpoint: write nothing but the run's failure record, with
/// the token of the last snapshot this writer loaded or committed.
#[derive(Message)]
#[rtype(result = "()")]
pub struct RecordFailure {
    pub run_id: Uuid,
    pub diagnostics: FailureDiagnostics,
    pub graphs: GraphStore,
    /// Fires on an explicit stop: the retries end.
    pub stop: oneshot::Receiver<()>,
}

/// Checkpoint -> monitor: how the failure record ended.
#[derive(Message)]
#[rtype(result = "()")]
pub struct FailureSettled {
    pub outcome: FailureOutcome,
}

/// The end of a quarantined monitor's failure record.
#[derive(Debug)]
pub enum FailureOutcome {
    Retried(RetriedFailure),
    /// There was no writer to record it with (ownership was lost first).
    NoWriter {
        detail: String,
    },
}
