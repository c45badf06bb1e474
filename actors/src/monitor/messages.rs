//! Messages between one monitor's actors. Each is a named-field struct with
//! an explicit result type.

use actix::prelude::*;
use chrono::{DateTime, Utc};
use radar::{
    mqtt::{ConnectionEvent, RawMessage},
    runtime::{ExitReason, Trigger},
    snapshot::SealedSnapshot,
    store::{OwnershipLost, PendingResults},
};
use tokio::sync::mpsc;

/// Model -> checkpoint: a sealed snapshot to commit. A newer one replaces an
/// older one that has not started committing.
#[derive(Message)]
#[rtype(result = "()")]
pub struct SnapshotReady {
    pub sealed: SealedSnapshot,
    pub trigger: Trigger,
    /// The last snapshot of a graceful stop: its outcome ends the monitor.
    pub last: bool,
}

/// Model -> checkpoint: alarms and evidence produced since the last message.
#[derive(Message)]
#[rtype(result = "()")]
pub struct NewResults {
    pub results: PendingResults,
}

/// Checkpoint -> model: a snapshot committed (or could not be).
#[derive(Message)]
#[rtype(result = "()")]
pub struct CommitReport {
    pub committed: bool,
    /// The trigger of the snapshot, to retry it when the commit failed.
    pub trigger: Option<Trigger>,
    pub wall: DateTime<Utc>,
}

/// Monitor -> model: seal a snapshot now and return it (the checkpoint before
/// subscribing is committed by the monitor itself).
#[derive(Message)]
#[rtype(result = "Result<SealedSnapshot, String>")]
pub struct SealNow {
    pub trigger: Trigger,
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
