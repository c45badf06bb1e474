//! The messages the checkpoint actor takes: sealed snapshots with their
//! results, results alone, a quarantine's failure record, and the halt.

use actix::prelude::*;
use radar::{
    graph::FailureDiagnostics,
    runtime::SnapshotHandoff,
    store::{GraphStore, PendingResults},
};
use tokio::sync::oneshot;
use uuid::Uuid;

use super::{CheckpointActor, Slot};
use crate::monitor::messages::Halt;

/// Model -> checkpoint: a sealed snapshot to commit, with the alarms and
/// evidence produced since the model last sent any: they join the pending
/// results, which commit in the snapshot's transaction. A newer snapshot
/// replaces an older one that has not started committing.
#[derive(Message)]
#[rtype(result = "()")]
pub struct SnapshotReady(pub SnapshotHandoff);

/// Model -> checkpoint: alarms and evidence that no snapshot took along
/// (none was sealed in the batch that produced them). Between checkpoints
/// they commit as a background evidence batch.
#[derive(Message)]
#[rtype(result = "()")]
pub struct NewResults {
    pub results: PendingResults,
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

impl Handler<SnapshotReady> for CheckpointActor {
    type Result = ();

    fn handle(&mut self, SnapshotReady(mut next): SnapshotReady, ctx: &mut Self::Context) {
        let _span = self.span.clone().entered();
        let results = std::mem::take(&mut next.results);
        if !self.queue(results) {
            return;
        }
        self.next = Some(next);
        self.drive(ctx);
        self.arm(ctx);
    }
}

impl Handler<NewResults> for CheckpointActor {
    type Result = ();

    fn handle(&mut self, msg: NewResults, ctx: &mut Self::Context) {
        let _span = self.span.clone().entered();
        if self.queue(msg.results) {
            self.arm(ctx);
        }
    }
}

impl CheckpointActor {
    /// Queues results behind the pending ones, in the order the model made
    /// them; rejects them once this monitor writes nothing more. Whether
    /// the actor still takes input.
    fn queue(&mut self, results: PendingResults) -> bool {
        if self.closed() {
            // One line for the first, the total when the writer halts: a
            // superseded model with a backlog rejects hundreds at once.
            if self.rejected_results == 0 && !results.is_empty() {
                tracing::warn!(monitor_id = %self.service_id, "Rejecting new results: this monitor writes no results any more (ownership lost or quarantined); the total is logged when its writer halts.");
            }
            self.rejected_results += results.len() as u64;
            return false;
        }
        if !results.is_empty() {
            self.pending.alarms.extend(results.alarms);
            self.pending.evidence.extend(results.evidence);
            self.publish_pending();
        }
        true
    }
}

impl Handler<RecordFailure> for CheckpointActor {
    type Result = ();

    fn handle(&mut self, msg: RecordFailure, ctx: &mut Self::Context) {
        let _span = self.span.clone().entered();
        // No snapshot after the failure: what was sealed before it and has
        // not started committing is dropped, and so are the results that
        // would have committed with it.
        self.next = None;
        if !self.pending.is_empty() {
            tracing::warn!(monitor_id = %self.service_id, results = self.pending.len(), "Quarantined: pending alarms and evidence are not written.");
            self.pending = PendingResults::default();
            self.publish_pending();
        }
        self.failure = Some(msg);
        self.drive(ctx);
        self.arm(ctx);
    }
}

impl Handler<Halt> for CheckpointActor {
    type Result = ();

    fn handle(&mut self, msg: Halt, ctx: &mut Self::Context) {
        let _span = self.span.clone().entered();
        tracing::info!(monitor_id = %self.service_id, reason = %msg.reason, pending = self.pending.len(), rejected = self.rejected_results, "Checkpoint writer halted; pending results stay unwritten and rejected ones were dropped.");
        if !matches!(self.slot, Slot::Lost) {
            self.slot = Slot::Lost;
        }
        self.next = None;
        ctx.stop();
    }
}
