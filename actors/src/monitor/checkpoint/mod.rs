//! The checkpoint actor: the only writer of a monitor's snapshot, alarms and
//! evidence. It commits one thing at a time: the newest sealed snapshot
//! (with every pending result, in one transaction), otherwise a background
//! evidence batch. A refused write means another worker committed a
//! successor: ownership is lost for good, pending results stay queued and
//! new ones are rejected. A quarantined graph run's writer writes one last
//! thing, the run's failure record, and gives up its writer to do so.
//!
//! Its first write is the checkpoint before subscribing, taken like every
//! other snapshot: it claims a fresh monitor's row (or replaces the snapshot
//! the start loaded) and, in that transaction, reconciles the alarms; it
//! reports the commit to the model the way every commit is reported. The
//! start waits for its outcome.
//!
//! - this file: the actor, who holds the writer, and what it writes next.
//! - `first`: the first write, which makes this worker the owner.
//! - `writes`: the other writes and what their outcomes do.
//! - `handlers`: the messages it takes.

mod first;
mod handlers;
mod writes;

use std::time::{Duration, Instant};

use actix::prelude::*;
use chrono::Utc;
use radar::{
    runtime::{CommitOutcome, RetryBackoff, SnapshotHandoff},
    store::{CheckpointWriter, PendingResults},
    telemetry::MonitorTelemetry,
};
use tokio::sync::watch;
use uuid::Uuid;

pub use self::first::{FirstCommitError, FirstOutcome, FirstWrite};
pub use self::handlers::{NewResults, RecordFailure, SnapshotReady};
use super::{
    MonitorActor,
    handlers::{FailureOutcome, FailureSettled, LastSnapshotSettled},
    model::{CommitReport, ModelActor},
    view::CheckpointView,
};

/// How often pending evidence is flushed between checkpoints, and failed
/// checkpoints are retried (once their pause has passed), while anything
/// waits to be written; an idle monitor's writer has no timer.
const FLUSH_EVERY: Duration = Duration::from_secs(1);

/// The longest pause between writes while they fail.
const MAX_RETRY_PAUSE: Duration = Duration::from_secs(30);

/// Who holds the writer right now.
enum Slot {
    /// Nothing committed yet: the first snapshot makes the writer.
    Unclaimed(FirstWrite),
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
    next: Option<SnapshotHandoff>,
    /// When the current last snapshot was first tried (graceful stop).
    last_since: Option<Instant>,
    /// How long the last snapshot is retried before the stop gives up.
    timeout: Duration,
    model: Addr<ModelActor>,
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

/// Everything a checkpoint actor starts with.
pub struct CheckpointSetup {
    pub service_id: Uuid,
    /// How long a write may take, and the last snapshot be retried.
    pub timeout: Duration,
    pub first: FirstWrite,
    /// Where commits are reported.
    pub model: Addr<ModelActor>,
    pub monitor: Addr<MonitorActor>,
    pub view: watch::Sender<CheckpointView>,
    pub metrics: MonitorTelemetry,
    pub span: tracing::Span,
}

impl CheckpointActor {
    /// A checkpoint actor without a writer yet: its first snapshot claims
    /// or resumes the monitor's row (see [`FirstWrite`]).
    pub fn new(setup: CheckpointSetup) -> Self {
        let timeout = setup.timeout;
        Self {
            span: setup.span,
            metrics: setup.metrics,
            service_id: setup.service_id,
            slot: Slot::Unclaimed(setup.first),
            pending: PendingResults::default(),
            next: None,
            last_since: None,
            timeout,
            model: setup.model,
            monitor: setup.monitor,
            view: setup.view,
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

    /// Tells the model how a snapshot's commit ended: the one place a
    /// commit report comes from, the first checkpoint's included.
    fn report(&self, committed: bool, next: &SnapshotHandoff) {
        self.model.do_send(CommitReport(CommitOutcome {
            committed,
            attempt: next.attempt,
            trigger: Some(next.trigger),
            wall: Utc::now(),
        }));
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
                        Slot::Unclaimed(_) => "the first checkpoint has not committed",
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
            Slot::Unclaimed(first) => match self.next.take() {
                Some(next) => self.commit_first(first, next, ctx),
                None => self.slot = Slot::Unclaimed(first),
            },
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
}

impl Actor for CheckpointActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        let _span = self.span.clone().entered();
        self.arm(ctx);
    }
}
