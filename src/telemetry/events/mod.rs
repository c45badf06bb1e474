//! Internal events: each occurrence worth telling an operator about is a
//! struct whose `emit` writes its log line and records its metrics, so a call
//! site is one line (`monitor.emit(AlarmOpened)`) and names stay consistent.
//! Logs carry `monitor_id` as a field; per-observation events log at `trace`
//! so a busy stream cannot flood the log. No payload value is ever logged.
//!
//! The events are grouped by what they report on:
//! - `observations`: the intake (received, accepted, rejected, frames);
//! - `detection`: scores, alarms, model operations, detector phases;
//! - `checkpoints`: commits, failures, restores and ownership;
//! - `connection`: the broker connection;
//! - `health`: coverage gaps, silent readings, stalls;
//! - `lifecycle`: a monitor's start slot, its exit and a graph run's quarantine.

mod checkpoints;
mod connection;
mod detection;
mod health;
mod lifecycle;
mod observations;

use opentelemetry::KeyValue;

use super::{handle::MonitorTelemetry, labels::key};

pub use checkpoints::{
    CheckpointCommitted, CheckpointFailed, OwnershipAcquired, PossibleGapMeasured, SnapshotRestored,
};
pub use connection::ConnectionChanged;
pub use detection::{
    AlarmClosed, AlarmOpened, DetectorPhaseChanged, FrameScored, ModelOperationFinished,
};
pub use health::{CoverageGapClosed, MonitorStallCleared, MonitorStalled, NoDataChanged};
pub use lifecycle::{GraphQuarantined, MonitorExited, StartBegun, StartQueued, quarantine_detail};
pub use observations::{
    FramesEmitted, ObservationsAccepted, ObservationsReceived, ObservationsRejected,
    TimestampUnitMismatch,
};

/// The `reason` attribute of the per-worker breakdowns.
fn reason(value: &'static str) -> KeyValue {
    KeyValue::new(key::REASON, value)
}

/// Something that happened to a monitor.
pub trait InternalEvent {
    fn emit(self, monitor: &MonitorTelemetry);
}
