//! One monitor's beat, without its actor: the state assessed from the
//! published views, the metrics and logs of its changes, and the status
//! record to hand in. The worker's beat driver calls it for every monitor
//! on the shared grid, so a beat costs no timer, task or mailbox message
//! of its own.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use actix::prelude::*;
use chrono::{DateTime, Utc};
use radar::store::{HealthOutcome, HealthRecord, HealthReporter};
use radar::telemetry::{HealthFacts, MonitorState, MonitorTelemetry, RejectReason, Stall, events};
use tokio::sync::{Mutex, OwnedMutexGuard};
use uuid::Uuid;

use super::{
    HEARTBEAT, HealthInputs, REFRESH_EVERY, STALL_AFTER,
    record::{Documents, Views},
};
use crate::monitor::handlers::LostOwnership;

/// The reporter of one monitor, held by a heartbeat while it writes.
pub(super) type ReporterSlot = Arc<Mutex<Option<HealthReporter>>>;

/// A heartbeat taken by a beat, to hand in and then settle.
pub(super) struct Due {
    /// The reporter's slot, held until the outcome is settled.
    pub slot: OwnedMutexGuard<Option<HealthReporter>>,
    pub reporter: HealthReporter,
    pub record: Arc<HealthRecord>,
    /// `record` is the one last written (see [`Health::written`]).
    pub unchanged: bool,
    pub taken_at: DateTime<Utc>,
    /// When the beat was taken, on the monotonic clock.
    pub taken: Instant,
}

/// Whether an unchanged record last written `since` ago is due for a
/// refresh. Beats fall on a grid one [`HEARTBEAT`] apart, so the beat
/// [`REFRESH_EVERY`] after the write may come a little early: half a beat
/// of slack keeps it from slipping to the next one.
pub(super) fn refresh_due(since: Duration) -> bool {
    since + HEARTBEAT / 2 >= REFRESH_EVERY
}

/// What a monitor's beat reads and remembers between beats.
pub(super) struct Health {
    pub service_id: Uuid,
    pub inputs: HealthInputs,
    /// Held by a heartbeat while it writes, so the final report waits for
    /// one in flight instead of finding no reporter and writing nothing.
    /// `None` inside: writes disabled, or ownership lost.
    pub reporter: ReporterSlot,
    /// Heartbeats go to the worker's batch, which can refresh an unchanged
    /// row; without it every record is written in full.
    batched: bool,
    monitor: Recipient<LostOwnership>,
    /// Messages consumed at the last check, and when that number last moved.
    progress: (u64, Instant),
    /// The facts last assessed, to log and emit transitions once; they
    /// also remember whether the monitor was ever connected.
    facts: HealthFacts,
    /// Network-side rejections (unknown topic, too large) already counted
    /// in metrics; the model never sees those messages.
    network_rejected: (u64, u64),
    pub halted: bool,
    /// The recovery and coverage documents as last serialized: a record
    /// shares them (no copy, no serialization) until the model publishes
    /// new ones.
    documents: Documents,
    /// The record of the last heartbeat written: while the monitor's
    /// state is still that record, a heartbeat hands it in again as
    /// unchanged (no record built, its row's heartbeat time refreshed).
    written: Option<Arc<HealthRecord>>,
    /// When the beat that last wrote (or refreshed) the row was taken.
    written_at: Instant,
    pub metrics: MonitorTelemetry,
    pub span: tracing::Span,
}

impl Health {
    pub(super) fn new(
        service_id: Uuid,
        inputs: HealthInputs,
        reporter: Option<HealthReporter>,
        batched: bool,
        monitor: Recipient<LostOwnership>,
        metrics: MonitorTelemetry,
        span: tracing::Span,
    ) -> Self {
        Self {
            service_id,
            inputs,
            reporter: Arc::new(Mutex::new(reporter)),
            batched,
            monitor,
            progress: (0, Instant::now()),
            facts: HealthFacts::default(),
            network_rejected: (0, 0),
            halted: false,
            documents: Documents::default(),
            written: None,
            written_at: Instant::now(),
            metrics,
            span,
        }
    }

    /// The state the last beat assessed.
    #[cfg(test)]
    pub(super) fn state(&self) -> MonitorState {
        self.facts.state()
    }

    /// The facts the published views show now (the state follows from
    /// them: [`HealthFacts::state`]).
    fn assess(&mut self) -> HealthFacts {
        // Borrowed, not cloned: the view holds strings and a list of
        // readings, and nothing here outlives the borrow.
        let model = self.inputs.model.borrow();
        let connected = self.inputs.link.borrow().connected;
        let admitted = self.inputs.ingress.snapshot().admitted;
        let queued = admitted.saturating_sub(model.consumed);
        if model.consumed != self.progress.0 {
            self.progress = (model.consumed, Instant::now());
        }
        let stall = if queued > 0 && self.progress.1.elapsed() >= STALL_AFTER {
            Some(Stall::Input)
        } else if model.suspended {
            Some(Stall::Checkpoint)
        } else {
            None
        };
        HealthFacts {
            ended: model
                .quarantine
                .is_some()
                .then_some(MonitorState::Quarantined),
            stall,
            connected,
            was_connected: self.facts.was_connected || connected,
            no_data: model.no_data.is_some(),
        }
    }

    /// Logs and emits a change of state.
    fn changed(&self, previous: HealthFacts, now: HealthFacts) {
        let _span = self.span.enter();
        tracing::info!(monitor_id = %self.service_id, state = now.status_label(), "Monitor state changed.");
        match (previous.stalled(), now.stalled()) {
            (_, Some(stall)) => self.metrics.emit(events::MonitorStalled { stall }),
            (Some(_), None) => self.metrics.emit(events::MonitorStallCleared),
            (None, None) => {}
        }
        if now.state() == MonitorState::NoData {
            let detail = self.inputs.model.borrow().no_data.clone();
            self.metrics.emit(events::NoDataChanged {
                detail: detail.as_deref(),
            });
        } else if previous.state() == MonitorState::NoData {
            self.metrics.emit(events::NoDataChanged { detail: None });
        }
    }

    /// Emits the network side's rejections since the last heartbeat, so
    /// they are counted by reason like every other rejection.
    fn count_network_rejections(&mut self, unknown_topic: u64, too_large: u64) {
        let (seen_unknown, seen_large) = self.network_rejected;
        for (reason, count) in [
            (
                RejectReason::UnknownTopic,
                unknown_topic.saturating_sub(seen_unknown),
            ),
            (RejectReason::TooLarge, too_large.saturating_sub(seen_large)),
        ] {
            if count > 0 {
                let _span = self.span.enter();
                self.metrics.emit(events::ObservationsReceived { count });
                self.metrics
                    .emit(events::ObservationsRejected { reason, count });
            }
        }
        self.network_rejected = (unknown_topic, too_large);
    }

    /// The record of `facts` as the views show it, taken `now`.
    pub(super) fn record(&mut self, facts: HealthFacts, now: DateTime<Utc>) -> HealthRecord {
        let documents = &mut self.documents;
        self.inputs
            .with_views(|views| documents.record(facts, views, now))
    }

    /// The record `state` has now, and whether it is the one last written
    /// (then shared, not rebuilt). Without the worker's batch every record
    /// is written in full, so none is taken as unchanged.
    fn current(&mut self, facts: HealthFacts, now: DateTime<Utc>) -> (Arc<HealthRecord>, bool) {
        if self.batched
            && let Some(written) = &self.written
        {
            let documents = &self.documents;
            if self
                .inputs
                .with_views(|views: &Views<'_>| documents.unchanged(written, facts, views))
            {
                return (Arc::clone(written), true);
            }
        }
        (Arc::new(self.record(facts, now)), false)
    }

    /// One beat at `now` (`at` on the monotonic clock): assesses the state
    /// (logging and emitting a change), counts the network side's
    /// rejections and the queue depth, and takes the heartbeat to hand in;
    /// `None` if halted, if writes are disabled or ownership is lost, while
    /// the previous heartbeat is still writing (this one is then skipped),
    /// or when the record is unchanged and its row is not yet due for a
    /// refresh ([`REFRESH_EVERY`]).
    pub(super) fn beat(&mut self, now: DateTime<Utc>, at: Instant) -> Option<Due> {
        if self.halted {
            return None;
        }
        let facts = self.assess();
        let previous = self.facts;
        if previous.status_label() != facts.status_label() {
            self.changed(previous, facts);
        }
        let ingress = self.inputs.ingress.snapshot();
        self.count_network_rejections(ingress.unknown_topic, ingress.too_large);
        let queued = ingress
            .admitted
            .saturating_sub(self.inputs.model.borrow().consumed);
        self.metrics.set_queue_depth(queued as usize);
        self.facts = facts;
        let mut slot = Arc::clone(&self.reporter).try_lock_owned().ok()?;
        if slot.is_none() {
            return None;
        }
        let (record, unchanged) = self.current(facts, now);
        if unchanged && !refresh_due(at.saturating_duration_since(self.written_at)) {
            return None;
        }
        let reporter = slot.take()?;
        Some(Due {
            slot,
            reporter,
            record,
            unchanged,
            taken_at: now,
            taken: at,
        })
    }

    /// Settles a heartbeat handed in: the reporter goes back to its slot
    /// unless ownership was lost (the monitor is told), and a written
    /// record becomes the one later beats compare with, as written by the
    /// beat taken `taken`. `None`: the worker's runtime dropped the
    /// heartbeat unanswered (it is stopping).
    pub(super) fn settle(
        &mut self,
        mut slot: OwnedMutexGuard<Option<HealthReporter>>,
        record: Arc<HealthRecord>,
        taken: Instant,
        outcome: Option<HealthOutcome>,
    ) {
        match outcome {
            Some(HealthOutcome::Written(reporter)) => {
                *slot = Some(reporter);
                self.written = Some(record);
                self.written_at = taken;
            }
            Some(HealthOutcome::Failed { reporter, error }) => {
                let _span = self.span.enter();
                tracing::warn!(monitor_id = %self.service_id, %error, "Could not write the monitor's health status.");
                *slot = Some(reporter);
            }
            Some(HealthOutcome::OwnershipLost(lost)) => {
                self.monitor.do_send(LostOwnership { lost });
            }
            None => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On the beat grid (one beat per `HEARTBEAT`, each up to a tenth of a
    /// beat early or late), an unchanged row is refreshed on the first beat
    /// `REFRESH_EVERY` after its last write and on none before it: once per
    /// refresh period, never a beat later.
    #[test]
    fn an_unchanged_row_is_refreshed_once_per_refresh_period_on_the_beat_grid() {
        let jitter = HEARTBEAT / 10;
        let beats_per_refresh = (REFRESH_EVERY.as_millis() / HEARTBEAT.as_millis()) as u32;
        assert!(beats_per_refresh > 1, "a refresh must skip beats");
        // Every beat early, every beat late, and early and late in turn.
        for pattern in ["early", "late", "alternating"] {
            let mut written = Duration::ZERO;
            let mut refreshes = Vec::new();
            for k in 1..=4 * beats_per_refresh {
                let on_grid = HEARTBEAT * k;
                let early = pattern == "early" || (pattern == "alternating" && k % 2 == 0);
                let at = if early {
                    on_grid - jitter
                } else {
                    on_grid + jitter
                };
                if refresh_due(at - written) {
                    refreshes.push(k);
                    written = at;
                }
            }
            let expected: Vec<u32> = (1..=4).map(|n| n * beats_per_refresh).collect();
            assert_eq!(refreshes, expected, "beats {pattern}");
        }
        assert!(!refresh_due(Duration::ZERO));
        assert!(refresh_due(REFRESH_EVERY));
    }
}
