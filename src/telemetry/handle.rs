//! The handles the runtime holds: [`Telemetry`] for the worker and
//! [`MonitorTelemetry`] for one monitor. Both are cheap to clone and safe to
//! share across threads; events are emitted through a monitor handle.

use std::{
    sync::{Arc, atomic::Ordering},
    time::Duration,
};

use chrono::{DateTime, Utc};
use opentelemetry::{KeyValue, metrics::Meter};
use uuid::Uuid;

use crate::{
    coverage::GapCause,
    runtime::{ExitReason, Trigger},
};

use super::{
    Stall,
    counts::Count,
    events::InternalEvent,
    instruments::Instruments,
    labels::{CheckpointFailure, DetectorPhase, RejectReason, key},
    readiness::{Board, Recovery, Slot},
};

/// The worker's telemetry: its instruments and its monitor board.
#[derive(Debug, Clone)]
pub struct Telemetry {
    instruments: Arc<Instruments>,
    board: Board,
}

/// The instrumentation scope name of every radar metric.
pub const METER_NAME: &str = "radar";

impl Telemetry {
    /// Builds the instruments on `meter`, with a fresh board.
    pub fn new(meter: &Meter) -> Self {
        let board = Board::new();
        let instruments = Arc::new(Instruments::new(meter));
        register_every_reason(&instruments);
        Self { instruments, board }
    }

    /// Uses the globally installed meter provider (a no-op if none is): call
    /// after installing the provider, since instruments bind at creation.
    pub fn global() -> Self {
        Self::new(&opentelemetry::global::meter(METER_NAME))
    }

    pub fn board(&self) -> &Board {
        &self.board
    }

    /// Admits a monitor: it appears on the board as `starting` (replacing any
    /// earlier entry with the same id) and the returned handle records its
    /// metrics, labelled with `monitor_id` (its name is on `radar_monitor_info`).
    pub fn monitor(&self, id: Uuid, name: &str) -> MonitorTelemetry {
        MonitorTelemetry {
            instruments: self.instruments.clone(),
            slot: self.board.admit(id, name),
        }
    }

    /// Takes a monitor off the board once it is no longer admitted here.
    pub fn remove_monitor(&self, id: Uuid) -> bool {
        self.board.remove(id)
    }
}

/// Adds 0 to every per-worker breakdown series, so each exists from the
/// start and an alert on `increase(...[5m]) > 0` sees the first rejection,
/// failure, commit or gap of any monitor.
fn register_every_reason(i: &Instruments) {
    for reason in RejectReason::ALL {
        i.observations_rejected_by_reason
            .add(0, &[KeyValue::new(key::REASON, reason.as_str())]);
    }
    for reason in CheckpointFailure::ALL {
        i.checkpoint_failures_by_reason
            .add(0, &[KeyValue::new(key::REASON, reason.as_str())]);
    }
    for trigger in Trigger::ALL {
        i.checkpoint_commits_by_trigger
            .add(0, &[KeyValue::new(key::TRIGGER, trigger.as_str())]);
    }
    for cause in GapCause::ALL {
        i.coverage_gap_duration_by_cause
            .add(0.0, &[KeyValue::new(key::CAUSE, cause.as_str())]);
    }
}

/// One monitor's telemetry handle.
#[derive(Debug, Clone)]
pub struct MonitorTelemetry {
    pub(crate) instruments: Arc<Instruments>,
    pub(crate) slot: Arc<Slot>,
}

impl MonitorTelemetry {
    pub fn id(&self) -> Uuid {
        self.slot.id
    }

    pub fn name(&self) -> &str {
        &self.slot.name
    }

    /// Records `event`: its log line and its metrics.
    pub fn emit(&self, event: impl InternalEvent) {
        event.emit(self);
    }

    /// The current depth of the ingress queue. Lock-free: the network side
    /// may call it per message.
    pub fn set_queue_depth(&self, depth: usize) {
        self.slot.queue_depth.store(depth as u64, Ordering::Relaxed);
    }

    /// Values waiting in the partial frame, so that received equals
    /// accepted plus rejected (by reason) plus these.
    pub fn set_held_values(&self, held: usize) {
        self.slot.held_values.store(held as u64, Ordering::Relaxed);
    }

    pub fn set_queue_capacity(&self, capacity: usize) {
        self.slot
            .queue_capacity
            .store(capacity as u64, Ordering::Relaxed);
    }

    /// Adds `n` to one of the monitor's counters.
    pub(crate) fn count(&self, count: Count, n: u64) {
        self.slot.counts.add(count, n);
    }

    pub(crate) fn add_gap_seconds(&self, seconds: f64) {
        self.slot.counts.add_gap_seconds(seconds);
    }

    pub(crate) fn connect(&self) {
        self.slot.condition().connect();
    }

    pub(crate) fn starting(&self, detail: &str) {
        self.slot.condition().starting(detail);
    }

    pub(crate) fn disconnect(&self, detail: &str) {
        self.slot.condition().disconnect(detail);
    }

    pub(crate) fn stall(&self, stall: Stall) {
        self.slot.condition().stall(stall);
    }

    pub(crate) fn clear_stall(&self) {
        self.slot.condition().clear_stall();
    }

    pub(crate) fn set_no_data(&self, detail: Option<String>) {
        self.slot.condition().set_no_data(detail);
    }

    pub(crate) fn exit(&self, exit: &ExitReason) {
        self.slot.condition().exit(exit);
    }

    pub(crate) fn hold_ownership(&self) {
        self.slot.condition().hold_ownership();
    }

    pub(crate) fn set_phase(&self, phase: DetectorPhase) {
        self.slot.figures().phase = Some(phase);
    }

    pub(crate) fn set_snapshot_saved_at(&self, saved_at: DateTime<Utc>) {
        self.slot.figures().snapshot_saved_at = Some(saved_at);
    }

    /// Each required reading and when its newest accepted observation was
    /// received; the `radar.reading.age` gauge counts from these.
    pub fn set_last_accepted(&self, last_accepted: Vec<(String, Option<DateTime<Utc>>)>) {
        self.slot.figures().last_accepted = last_accepted;
    }

    pub(crate) fn set_recovery(&self, recovery: Recovery) {
        self.slot.figures().recovery = Some(recovery);
    }

    pub(crate) fn set_possible_gap(&self, gap: Duration) {
        let mut figures = self.slot.figures();
        figures
            .recovery
            .get_or_insert_with(Recovery::default)
            .possible_gap = Some(gap);
    }

    pub(crate) fn count_stale(&self, n: u64) {
        self.count(Count::StaleRejected, n);
    }
}
