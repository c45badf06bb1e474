//! Events of a monitor's end: its actors stopped, or its graph run was
//! quarantined, and the operator-facing summary of a quarantine.

use tracing::{debug, error, info, warn};

use super::InternalEvent;
use crate::runtime::ExitReason;
use crate::telemetry::handle::MonitorTelemetry;

/// A start attempt waits for one of the worker's start slots (the worker
/// starts a bounded number of monitors at once).
#[derive(Debug, Clone, Copy)]
pub struct StartQueued {
    /// How many monitors the worker starts at once.
    pub slots: usize,
}

impl InternalEvent for StartQueued {
    fn emit(self, m: &MonitorTelemetry) {
        debug!(monitor_id = %m.id(), slots = self.slots, "Start waits for a start slot.");
        m.starting(&format!(
            "waiting for a start slot (this worker starts {} monitors at once)",
            self.slots
        ));
    }
}

/// A start attempt holds a start slot: reading and restoring the snapshot,
/// the first checkpoint, subscribing.
#[derive(Debug, Clone, Copy)]
pub struct StartBegun;

impl InternalEvent for StartBegun {
    fn emit(self, m: &MonitorTelemetry) {
        debug!(monitor_id = %m.id(), "Start begun.");
        m.starting("starting: restoring the snapshot, first checkpoint, subscribing");
    }
}

/// The monitor's actors stopped. Terminal reasons keep the monitor on the
/// board (and the worker not ready) until it is removed; a transient
/// failure shows as `failed` until the supervisor re-admits it.
#[derive(Debug, Clone, Copy)]
pub struct MonitorExited<'a> {
    pub reason: &'a ExitReason,
}

impl InternalEvent for MonitorExited<'_> {
    fn emit(self, m: &MonitorTelemetry) {
        let id = m.id();
        match self.reason {
            ExitReason::Stopped => info!(monitor_id = %id, "Monitor stopped."),
            ExitReason::OwnershipLost { detail } => error!(
                monitor_id = %id,
                detail = %detail,
                "Ownership lost to another worker; the monitor stops here and its pending results are not written."
            ),
            ExitReason::Quarantined { detail } => error!(
                monitor_id = %id,
                detail = %detail,
                "Monitor quarantined; no checkpoint will be exported."
            ),
            ExitReason::StartupFailed { reason } => error!(
                monitor_id = %id,
                reason = %reason,
                "Monitor failed to start; an operator must act (see the reason)."
            ),
            ExitReason::Failed { error } => warn!(
                monitor_id = %id,
                error = %error,
                "Monitor failed; the supervisor restarts it after a backoff."
            ),
        }
        m.exit(self.reason);
    }
}

/// A graph node failed uncertainly: the monitor is quarantined from this
/// moment, before its failure record reaches the database, so readiness
/// and the state gauge show it while the record is still being retried.
#[derive(Debug, Clone, Copy)]
pub struct GraphQuarantined<'a> {
    pub run_id: uuid::Uuid,
    pub diagnostics: &'a crate::graph::FailureDiagnostics,
}

impl InternalEvent for GraphQuarantined<'_> {
    fn emit(self, m: &MonitorTelemetry) {
        let d = self.diagnostics;
        error!(
            monitor_id = %m.id(),
            run_id = %self.run_id,
            failed_node = %d.failed_node,
            node_type = %d.node_type,
            reason = %d.reason,
            frames_applied = d.frames_applied,
            "Graph run quarantined: no more graph calls and no checkpoint; recording the failure."
        );
        m.exit(&ExitReason::Quarantined {
            detail: quarantine_detail(self.run_id, d),
        });
    }
}

/// The operator-facing summary of a quarantine.
pub fn quarantine_detail(run_id: uuid::Uuid, d: &crate::graph::FailureDiagnostics) -> String {
    format!(
        "graph run {run_id}: node {:?} ({}) failed uncertainly after {} frames: {}",
        d.failed_node, d.node_type, d.frames_applied, d.reason
    )
}
