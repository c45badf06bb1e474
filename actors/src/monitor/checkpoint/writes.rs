//! The checkpoint actor's writes after the first and what their outcomes
//! do: a snapshot (with every pending result) or an evidence batch
//! committed, retried or refused, and the failure record a quarantined
//! run's writer ends with. A committed snapshot, the first one included,
//! settles in `committed`.

use std::time::Instant;

use actix::prelude::*;
use chrono::Utc;
use radar::{
    runtime::SnapshotHandoff,
    store::{CheckpointWriter, StoreError, WriteOutcome},
    telemetry::{CheckpointFailure, events},
};

use super::{CheckpointActor, RecordFailure, Slot};
use crate::monitor::{
    handlers::{FailureOutcome, FailureSettled, LastSnapshotSettled, LostOwnership},
    model::BatchSettled,
    view::Ownership,
};

impl CheckpointActor {
    /// Gives up the writer for the failure record: its token fences the
    /// record, and nothing else is ever written with it.
    pub(super) fn record_failure(
        &mut self,
        writer: CheckpointWriter,
        failure: RecordFailure,
        ctx: &mut Context<Self>,
    ) {
        // A checkpoint whose commit reply was lost may be the row's
        // signature now: the record accepts it as this writer's too.
        let tokens = writer.accepted_tokens();
        drop(writer);
        self.slot = Slot::Quarantined;
        let RecordFailure {
            run_id,
            diagnostics,
            graphs,
            stop,
        } = failure;
        let (service_id, timeout) = (self.service_id, self.timeout);
        tracing::info!(monitor_id = %service_id, %run_id, "Recording the graph run's failure under the snapshot row lock.");
        async move {
            graphs
                .record_failure_retrying(
                    run_id,
                    service_id,
                    &tokens.iter().map(Vec::as_slice).collect::<Vec<_>>(),
                    &diagnostics,
                    timeout,
                    async move {
                        // An explicit stop, or the monitor is gone.
                        let _ = stop.await;
                    },
                )
                .await
        }
        .into_actor(self)
        .map(|outcome, act, _| {
            act.monitor.do_send(FailureSettled {
                outcome: FailureOutcome::Retried(outcome),
            });
        })
        .spawn(ctx);
    }

    pub(super) fn commit_snapshot(
        &mut self,
        writer: CheckpointWriter,
        next: SnapshotHandoff,
        ctx: &mut Context<Self>,
    ) {
        let included = (self.pending.alarms.len(), self.pending.evidence.len());
        let batch = self.pending.clone();
        let started = Instant::now();
        let sealed = next.sealed.clone();
        async move { writer.checkpoint(&sealed, &batch).await }
            .into_actor(self)
            .map(move |outcome, act, ctx| {
                let _span = act.span.clone().entered();
                let last = next.last;
                match outcome {
                    WriteOutcome::Committed(writer) => {
                        act.committed(writer, &next, started, included);
                    }
                    WriteOutcome::Failed { writer, error } => {
                        act.slot = Slot::Idle(writer);
                        act.retry.failed(Instant::now());
                        let message = error.to_string();
                        act.metrics.emit(events::CheckpointFailed {
                            reason: failure_kind(&error),
                            error: &message,
                        });
                        act.view.send_modify(|v| {
                            v.failures += 1;
                            v.last_error = Some(message);
                        });
                        act.report(false, &next);
                        if last {
                            let since = *act.last_since.get_or_insert(started);
                            if since.elapsed() >= act.timeout {
                                tracing::error!(monitor_id = %act.service_id, "The last snapshot could not be committed in time; stopping without it. The next worker restores the previous snapshot and reports the gap.");
                                act.monitor.do_send(LastSnapshotSettled { committed: false });
                                return;
                            }
                        }
                        // Retry unless a newer snapshot already replaced it,
                        // or the run was quarantined meanwhile.
                        if act.next.is_none() && act.failure.is_none() {
                            act.next = Some(next);
                        }
                    }
                    WriteOutcome::OwnershipLost(lost) => act.lose(lost),
                }
                if act.failure.is_some() {
                    act.drive(ctx);
                }
                act.arm(ctx);
            })
            .wait(ctx);
    }

    /// A snapshot committed with the results pending when its write
    /// started (`included`): the writer is free again, and the view, the
    /// metrics and the model are told.
    pub(super) fn committed(
        &mut self,
        writer: CheckpointWriter,
        next: &SnapshotHandoff,
        started: Instant,
        included: (usize, usize),
    ) {
        self.retry.succeeded();
        self.drop_committed(included);
        let token = writer.token().short();
        self.slot = Slot::Idle(writer);
        self.view.send_modify(|v| {
            v.ownership = v.ownership.after_commit();
            v.token = Some(token);
            v.last_commit_at = Some(Utc::now());
            v.commits += 1;
            v.last_error = None;
        });
        self.metrics.emit(events::CheckpointCommitted {
            trigger: next.trigger,
            duration: started.elapsed(),
            bytes: next.sealed.bytes.payload.len() as u64,
            saved_at: next.sealed.envelope.saved_at,
        });
        self.report(true, next);
        if next.last {
            self.monitor
                .do_send(LastSnapshotSettled { committed: true });
        }
    }

    pub(super) fn commit_batch(&mut self, writer: CheckpointWriter, ctx: &mut Context<Self>) {
        let included = (self.pending.alarms.len(), self.pending.evidence.len());
        let batch = self.pending.clone();
        let started = Instant::now();
        async move { writer.commit_evidence(&batch).await }
            .into_actor(self)
            .map(move |outcome, act, ctx| {
                let _span = act.span.clone().entered();
                act.settle_batch(outcome, included, started);
                act.arm(ctx);
            })
            .wait(ctx);
    }

    fn settle_batch(&mut self, outcome: WriteOutcome, included: (usize, usize), started: Instant) {
        let settled = |committed| BatchSettled { committed, started };
        match outcome {
            WriteOutcome::Committed(writer) => {
                self.retry.succeeded();
                self.drop_committed(included);
                self.slot = Slot::Idle(writer);
                self.model.do_send(settled(true));
            }
            WriteOutcome::Failed { writer, error } => {
                self.model.do_send(settled(false));
                self.retry.failed(Instant::now());
                tracing::warn!(monitor_id = %self.service_id, error = %error, "An evidence batch failed; it stays queued.");
                self.metrics.emit(events::CheckpointFailed {
                    reason: failure_kind(&error),
                    error: &error.to_string(),
                });
                self.view.send_modify(|v| {
                    v.failures += 1;
                    v.last_error = Some(error.to_string());
                });
                self.slot = Slot::Idle(writer);
            }
            WriteOutcome::OwnershipLost(lost) => self.lose(lost),
        }
    }

    /// Removes what a transaction committed: the results that were pending
    /// when it started (newer ones were appended after them).
    fn drop_committed(&mut self, (alarms, evidence): (usize, usize)) {
        self.pending
            .alarms
            .drain(..alarms.min(self.pending.alarms.len()));
        self.pending
            .evidence
            .drain(..evidence.min(self.pending.evidence.len()));
        self.publish_pending();
    }

    fn lose(&mut self, lost: radar::store::OwnershipLost) {
        self.metrics.emit(events::CheckpointFailed {
            reason: CheckpointFailure::OwnershipLost,
            error: &lost.to_string(),
        });
        self.slot = Slot::Lost;
        self.next = None;
        self.view.send_modify(|v| v.ownership = Ownership::Lost);
        self.monitor.do_send(LostOwnership { lost });
    }
}

/// The metric label of a failed write.
fn failure_kind(error: &StoreError) -> CheckpointFailure {
    match error {
        StoreError::Timeout { .. } => CheckpointFailure::Timeout,
        _ => CheckpointFailure::Database,
    }
}
