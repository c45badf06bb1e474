//! Events of the snapshot row: checkpoints committed or failed, a snapshot
//! restored at start and the gap it left, ownership taken without one.

use std::time::Duration;

use chrono::{DateTime, Utc};
use opentelemetry::KeyValue;
use tracing::{debug, info, warn};

use super::{InternalEvent, reason};
use crate::runtime::Trigger;
use crate::telemetry::{
    counts::Count,
    handle::MonitorTelemetry,
    labels::{CheckpointFailure, key},
    readiness::Recovery,
};

/// A snapshot committed. A commit proves this worker holds the fencing token
/// and restarts the snapshot age.
#[derive(Debug, Clone, Copy)]
pub struct CheckpointCommitted {
    pub trigger: Trigger,
    pub duration: Duration,
    pub bytes: u64,
    pub saved_at: DateTime<Utc>,
}

impl InternalEvent for CheckpointCommitted {
    fn emit(self, m: &MonitorTelemetry) {
        debug!(
            monitor_id = %m.id(),
            trigger = self.trigger.as_str(),
            seconds = self.duration.as_secs_f64(),
            bytes = self.bytes,
            "Checkpoint committed."
        );
        // The total per monitor, the breakdown by trigger per worker.
        m.count(Count::CheckpointCommits, 1);
        m.instruments
            .checkpoint_commits_by_trigger
            .add(1, &[KeyValue::new(key::TRIGGER, self.trigger.as_str())]);
        m.instruments
            .checkpoint_duration
            .record(self.duration.as_secs_f64(), &[]);
        m.instruments.checkpoint_size.record(self.bytes, &[]);
        m.hold_ownership();
        m.set_snapshot_saved_at(self.saved_at);
    }
}

/// A checkpoint attempt did not commit; pending results stay queued.
#[derive(Debug, Clone, Copy)]
pub struct CheckpointFailed<'a> {
    pub reason: CheckpointFailure,
    /// The error as the operator should read it (no payload values).
    pub error: &'a str,
}

impl InternalEvent for CheckpointFailed<'_> {
    fn emit(self, m: &MonitorTelemetry) {
        warn!(
            monitor_id = %m.id(),
            reason = self.reason.as_str(),
            error = self.error,
            "Checkpoint failed; pending results stay queued."
        );
        m.count(Count::CheckpointFailures, 1);
        m.instruments
            .checkpoint_failures_by_reason
            .add(1, &[reason(self.reason.as_str())]);
    }
}

/// A verified snapshot was restored at start. Restoring proves ownership
/// until a successor commits; the figures become recovery metadata.
#[derive(Debug, Clone, Copy)]
pub struct SnapshotRestored {
    pub restored_processed: u64,
    pub saved_at: DateTime<Utc>,
    pub partial_frames_cleared: u64,
}

impl InternalEvent for SnapshotRestored {
    fn emit(self, m: &MonitorTelemetry) {
        info!(
            monitor_id = %m.id(),
            restored_processed = self.restored_processed,
            saved_at = %self.saved_at,
            partial_frames_cleared = self.partial_frames_cleared,
            "Snapshot restored; input since its save time is not replayed."
        );
        m.hold_ownership();
        m.set_snapshot_saved_at(self.saved_at);
        m.set_recovery(Recovery {
            restored_processed: self.restored_processed,
            partial_frames_cleared: self.partial_frames_cleared,
            possible_gap: None,
        });
    }
}

/// The first new frame after a restore measured the possible coverage gap.
#[derive(Debug, Clone, Copy)]
pub struct PossibleGapMeasured {
    pub gap: Duration,
}

impl InternalEvent for PossibleGapMeasured {
    fn emit(self, m: &MonitorTelemetry) {
        info!(
            monitor_id = %m.id(),
            seconds = self.gap.as_secs_f64(),
            "Recovery left a possible coverage gap."
        );
        m.set_possible_gap(self.gap);
    }
}

/// The monitor won the initial snapshot insert (or otherwise took the
/// fencing token without a restore or a later commit to show for it).
#[derive(Debug, Clone, Copy)]
pub struct OwnershipAcquired;

impl InternalEvent for OwnershipAcquired {
    fn emit(self, m: &MonitorTelemetry) {
        info!(monitor_id = %m.id(), "Ownership acquired.");
        m.hold_ownership();
    }
}
