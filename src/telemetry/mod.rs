//! Telemetry: radar's metric names and labels, the per-worker instruments
//! built from an OpenTelemetry `Meter`, the internal events that log and
//! record in one call, and the monitor board behind `/readyz` and the
//! per-monitor series of `/metrics`.
//!
//! This module only uses the OpenTelemetry API; the worker binary installs
//! the SDK meter provider and serves the exposition.
//!
//! - [`names`]: the closed list of metrics ([`Metric`]) with units.
//! - [`labels`]: attribute keys and the closed enums used as values.
//! - [`events`]: one struct per occurrence; `monitor.emit(event)`.
//! - [`readiness`]: the [`Board`] of admitted monitors and [`Readiness`].
//! - [`condition`]: the pure derivation of a monitor's [`MonitorState`].
//! - [`counts`]: each monitor's counters, atomics in its board slot.
//! - [`text`]: the per-monitor series as Prometheus text, from the board
//!   (the per-worker breakdowns and distributions go through the SDK).
//!
//! ```
//! use radar::{mqtt::ConnectionEvent, telemetry::{Telemetry, RejectReason, events::*}};
//! # let id = uuid::Uuid::nil();
//! // After the SDK provider is installed (a no-op meter otherwise):
//! let telemetry = Telemetry::global();
//! let pump = telemetry.monitor(id, "pump"); // on the board as `starting`
//! pump.emit(ObservationsReceived { count: 1 });
//! pump.emit(ObservationsRejected { reason: RejectReason::Stale, count: 1 });
//! let up = ConnectionEvent::Connected { at: chrono::Utc::now(), attempt: 1 };
//! pump.emit(ConnectionChanged(&up));
//! assert!(telemetry.board().readiness().ready);
//! ```

pub mod condition;
pub mod counts;
pub mod events;
mod handle;
mod instruments;
pub mod labels;
pub mod names;
pub mod readiness;
pub mod text;

pub use condition::{HealthFacts, MonitorState, Stall};
pub use events::InternalEvent;
pub use handle::{METER_NAME, MonitorTelemetry, Telemetry};
pub use instruments::Instruments;
pub use labels::{CheckpointFailure, DetectorPhase, ModelOperation, RejectReason};
pub use names::Metric;
pub use readiness::{
    Board, MonitorView, NOT_READY_LISTED, NotReady, Readiness, Recovery, WorkerNotReady,
};

#[cfg(test)]
mod tests;
