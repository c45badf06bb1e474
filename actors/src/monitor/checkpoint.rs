//! The checkpoint actor: the only writer of a monitor's snapshot, alarms and
//! evidence. It commits one thing at a time: the newest sealed snapshot
//! (with every pending result, in one transaction), otherwise a background
//! evidence batch. A refused write means another worker committed a
//! successor: ownership is lost for good, pending results stay queued and
//! new ones are rejected. A quarantined graph run's writer writes one last
//! thing, the run's failure record, and gives up its writer to do so.

use std::time::{Duration, Instant};

use actix::prelude::*;
use chrono::Utc;
use radar::{
    runtime::RetryBackoff,
    store::{CheckpointWriter, PendingResults, StoreError, WriteOutcome},
    telemetry::{CheckpointFailure, MonitorTelemetry, events},
};
use tokio::sync::watch;
use uuid::Uuid;

use super::{
    MonitorActor,
    messages::{
        BatchSettled, CommitReport, FailureOutcome, FailureSettled, Halt, LastSnapshotSettled,
        LostOwnership, NewResults, RecordFailure, SnapshotReady,
    },
    model::ModelActor,
    view::{CheckpointView, Ownership},
};

/// How often pending evidence is flushed between checkpoints, and failed
/// checkpoints are retried (once their pause has passed), while anything
/// waits to be written; an idle monitor's writer has no timer.
const FLUSH_EVERY: Duration = Duration::from_secs(1);

/// The longest pause between writes while they fail.
const MAX_RETRY_PAUSE: Duration = Duration::from_secs(30);

/// Who holds the writer right now.
enum Slot {
    /// Database writes are disabled.
    Disabled,
    Idle(CheckpointWriter),
    /// A transaction is running with the writer.
    Busy,
    /// Another worker committed a successor; nothing more is written.
    Lost,
    /// The graph run is quarantined: the writer was given up for the
    /// failure record; no snapshot, alarm or evidence is written again.
    Quarantined,
}

pub struct CheckpointActor {
    service_id: Uuid,
    slot: Slot,
    pending: PendingResults,
    /// The newest sealed snapshot not yet committing.
    next: Option<SnapshotReady>,
    /// When the current last snapshot was first tried (graceful stop).
    last_since: Option<Instant>,
    /// How long the last snapshot is retried before the stop gives up.
    timeout: Duration,
    model: Option<Addr<ModelActor>>,
    monitor: Addr<MonitorActor>,
    view: watch::Sender<CheckpointView>,
    rejected_results: u64,
    /// After a failed write nothing but the last snapshot is written until
    /// the pause ends, so an outage is not met with one attempt per batch.
    retry: RetryBackoff,
    /// A quarantine's failure record, waiting for the writer to be free.
    failure: Option<RecordFailure>,
    /// The flush timer, running only while something waits (see `waiting`).
    flush: Option<SpawnHandle>,
    metrics: MonitorTelemetry,
    span: tracing::Span,
}

impl CheckpointActor {
    /// A checkpoint actor without a writer yet: it writes nothing until the
    /// monitor hands it the writer that committed the first snapshot.
    pub fn new(
        service_id: Uuid,
        timeout: Duration,
        monitor: Addr<MonitorActor>,
        view: watch::Sender<CheckpointView>,
        metrics: MonitorTelemetry,
        span: tracing::Span,
    ) -> Self {
        Self {
            span,
            metrics,
            service_id,
            slot: Slot::Busy,
            pending: PendingResults::default(),
            next: None,
            last_since: None,
            timeout,
            model: None,
            monitor,
            view,
            rejected_results: 0,
            retry: RetryBackoff::new(timeout.min(MAX_RETRY_PAUSE)),
            failure: None,
            flush: None,
        }
    }

    /// Whether a later `drive` could write something: a failure record,
    /// or a snapshot or results while the writer is still this monitor's.
    fn waiting(&self) -> bool {
        self.failure.is_some()
            || (!matches!(self.slot, Slot::Lost | Slot::Quarantined)
                && (self.next.is_some() || !self.pending.is_empty()))
    }

    /// Starts the flush timer if something waits and it is not running;
    /// the timer stops itself once nothing does.
    fn arm(&mut self, ctx: &mut Context<Self>) {
        if self.flush.is_some() || !self.waiting() {
            return;
        }
        self.flush = Some(ctx.run_interval(FLUSH_EVERY, |act, ctx| {
            act.drive(ctx);
            if !act.waiting()
                && let Some(flush) = act.flush.take()
            {
                ctx.cancel_future(flush);
            }
        }));
    }

    /// Writes nothing else any more: quarantined, or ownership lost.
    fn closed(&self) -> bool {
        matches!(self.slot, Slot::Lost | Slot::Quarantined) || self.failure.is_some()
    }

    /// Gives up the writer for the failure record: its token fences the
    /// record, and nothing else is ever written with it.
    fn record_failure(
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

    fn report(&self, committed: bool, next: &SnapshotReady) {
        if let Some(model) = &self.model {
            model.do_send(CommitReport {
                committed,
                attempt: next.attempt,
                trigger: Some(next.trigger),
                wall: Utc::now(),
            });
        }
    }

    fn publish_pending(&self) {
        let pending = self.pending.len();
        self.view.send_modify(|v| v.pending = pending);
    }

    /// Starts the next write if the writer is free.
    fn drive(&mut self, ctx: &mut Context<Self>) {
        let _span = self.span.clone().entered();
        if let Some(failure) = self.failure.take() {
            match std::mem::replace(&mut self.slot, Slot::Busy) {
                Slot::Idle(writer) => self.record_failure(writer, failure, ctx),
                // A write in flight settles first: its outcome decides the token.
                Slot::Busy => self.failure = Some(failure),
                other => {
                    let detail = match other {
                        Slot::Disabled => "database writes are disabled",
                        _ => "this worker no longer owns the monitor's snapshot",
                    };
                    self.slot = Slot::Quarantined;
                    self.monitor.do_send(FailureSettled {
                        outcome: FailureOutcome::NoWriter {
                            detail: detail.to_string(),
                        },
                    });
                }
            }
            return;
        }
        match std::mem::replace(&mut self.slot, Slot::Busy) {
            Slot::Idle(writer) => {
                // The last snapshot has its own deadline (the stop's timeout).
                let last = self.next.as_ref().is_some_and(|n| n.last);
                if !last && !self.retry.ready(Instant::now()) {
                    self.slot = Slot::Idle(writer);
                } else if let Some(next) = self.next.take() {
                    self.commit_snapshot(writer, next, ctx);
                } else if !self.pending.is_empty() {
                    self.commit_batch(writer, ctx);
                } else {
                    self.slot = Slot::Idle(writer);
                }
            }
            Slot::Disabled => {
                self.slot = Slot::Disabled;
                if let Some(next) = self.next.take() {
                    // Nothing is written: the model never waits for a commit.
                    self.report(true, &next);
                    if next.last {
                        self.monitor
                            .do_send(LastSnapshotSettled { committed: true });
                    }
                }
                if !self.pending.is_empty() {
                    tracing::debug!(monitor_id = %self.service_id, results = self.pending.len(), "Database writes are disabled; results are not stored.");
                    self.pending = PendingResults::default();
                }
            }
            other => self.slot = other,
        }
    }

    fn commit_snapshot(
        &mut self,
        writer: CheckpointWriter,
        next: SnapshotReady,
        ctx: &mut Context<Self>,
    ) {
        let included = (self.pending.alarms.len(), self.pending.evidence.len());
        let batch = self.pending.clone();
        let bytes = next.sealed.bytes.payload.len();
        let started = Instant::now();
        let sealed = next.sealed.clone();
        async move { writer.checkpoint(&sealed, &batch).await }
            .into_actor(self)
            .map(move |outcome, act, ctx| {
                let _span = act.span.clone().entered();
                let last = next.last;
                match outcome {
                    WriteOutcome::Committed(writer) => {
                        act.retry.succeeded();
                        act.drop_committed(included);
                        let token = writer.token().short();
                        act.slot = Slot::Idle(writer);
                        act.view.send_modify(|v| {
                            v.token = Some(token);
                            v.last_commit_at = Some(Utc::now());
                            v.commits += 1;
                            v.last_error = None;
                        });
                        act.metrics.emit(events::CheckpointCommitted {
                            trigger: next.trigger,
                            duration: started.elapsed(),
                            bytes: bytes as u64,
                            saved_at: next.sealed.envelope.saved_at,
                        });
                        act.report(true, &next);
                        if last {
                            act.monitor.do_send(LastSnapshotSettled { committed: true });
                        }
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

    fn commit_batch(&mut self, writer: CheckpointWriter, ctx: &mut Context<Self>) {
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
                if let Some(model) = &self.model {
                    model.do_send(settled(true));
                }
            }
            WriteOutcome::Failed { writer, error } => {
                if let Some(model) = &self.model {
                    model.do_send(settled(false));
                }
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

impl Actor for CheckpointActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        let _span = self.span.clone().entered();
        self.arm(ctx);
    }
}

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

/// The metric label of a failed write.
fn failure_kind(error: &StoreError) -> CheckpointFailure {
    match error {
        StoreError::Timeout { .. } => CheckpointFailure::Timeout,
        _ => CheckpointFailure::Database,
    }
}
