//! The messages the checkpoint actor takes: the writer handed over after
//! the first commit, sealed snapshots, new results, a quarantine's failure
//! record, and the halt.

use actix::prelude::*;
use chrono::Utc;
use radar::store::{CheckpointWriter, PendingResults};

use super::{CheckpointActor, Slot};
use crate::monitor::{
    messages::{Halt, NewResults, RecordFailure, SnapshotReady},
    model::ModelActor,
    view::Ownership,
};

/// Monitor -> checkpoint: the writer that committed the first snapshot
/// (`None`: database writes are disabled), and the model to report to.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Claimed {
    pub writer: Option<CheckpointWriter>,
    pub model: Addr<ModelActor>,
}

impl Handler<Claimed> for CheckpointActor {
    type Result = ();

    fn handle(&mut self, msg: Claimed, ctx: &mut Self::Context) {
        let _span = self.span.clone().entered();
        self.model = Some(msg.model);
        let (slot, ownership, token) = match msg.writer {
            Some(writer) => {
                let token = writer.token().short();
                (Slot::Idle(writer), Ownership::Owner, Some(token))
            }
            None => (Slot::Disabled, Ownership::Disabled, None),
        };
        self.slot = slot;
        self.view.send_modify(|v| {
            v.ownership = ownership;
            v.token = token;
            v.last_commit_at = Some(Utc::now());
            v.commits += 1;
        });
        self.drive(ctx);
        self.arm(ctx);
    }
}

impl Handler<SnapshotReady> for CheckpointActor {
    type Result = ();

    fn handle(&mut self, msg: SnapshotReady, ctx: &mut Self::Context) {
        let _span = self.span.clone().entered();
        if self.closed() {
            return;
        }
        self.next = Some(msg);
        self.drive(ctx);
        self.arm(ctx);
    }
}

impl Handler<NewResults> for CheckpointActor {
    type Result = ();

    fn handle(&mut self, msg: NewResults, ctx: &mut Self::Context) {
        let _span = self.span.clone().entered();
        if self.closed() {
            // One line for the first, the total when the writer halts: a
            // superseded model with a backlog rejects hundreds at once.
            if self.rejected_results == 0 {
                tracing::warn!(monitor_id = %self.service_id, "Rejecting new results: this monitor writes no results any more (ownership lost or quarantined); the total is logged when its writer halts.");
            }
            self.rejected_results += msg.results.len() as u64;
            return;
        }
        self.pending.alarms.extend(msg.results.alarms);
        self.pending.evidence.extend(msg.results.evidence);
        self.publish_pending();
        self.arm(ctx);
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
