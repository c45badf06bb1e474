//! Internal events: each occurrence worth telling an operator about is a
//! struct whose `emit` writes its log line and records its metrics, so a call
//! site is one line (`monitor.emit(AlarmOpened)`) and names stay consistent.
//! Logs carry `monitor_id` as a field; per-observation events log at `trace`
//! so a busy stream cannot flood the log. No payload value is ever logged.

use std::time::Duration;

use chrono::{DateTime, Utc};
use opentelemetry::KeyValue;
use tracing::{debug, error, info, trace, warn};

use super::{
    counts::Count,
    handle::MonitorTelemetry,
    labels::{CheckpointFailure, DetectorPhase, ModelOperation, RejectReason, key},
    readiness::Recovery,
};
use crate::{
    coverage::GapCause,
    mqtt::ConnectionEvent,
    runtime::{ExitReason, Trigger},
};

/// The `reason` attribute of the per-worker breakdowns.
fn reason(value: &'static str) -> KeyValue {
    KeyValue::new(key::REASON, value)
}

/// Something that happened to a monitor.
pub trait InternalEvent {
    fn emit(self, monitor: &MonitorTelemetry);
}

/// MQTT messages arrived for the monitor's readings.
#[derive(Debug, Clone, Copy)]
pub struct ObservationsReceived {
    pub count: u64,
}

impl InternalEvent for ObservationsReceived {
    fn emit(self, m: &MonitorTelemetry) {
        trace!(monitor_id = %m.id(), count = self.count, "Observations received.");
        m.count(Count::Received, self.count);
    }
}

/// Alignment admitted observations.
#[derive(Debug, Clone, Copy)]
pub struct ObservationsAccepted {
    pub count: u64,
}

impl InternalEvent for ObservationsAccepted {
    fn emit(self, m: &MonitorTelemetry) {
        trace!(monitor_id = %m.id(), count = self.count, "Observations accepted.");
        m.count(Count::Accepted, self.count);
    }
}

/// Messages or observations discarded for one reason.
#[derive(Debug, Clone, Copy)]
pub struct ObservationsRejected {
    pub reason: RejectReason,
    pub count: u64,
}

impl InternalEvent for ObservationsRejected {
    fn emit(self, m: &MonitorTelemetry) {
        debug!(
            monitor_id = %m.id(),
            reason = self.reason.as_str(),
            count = self.count,
            "Observations rejected."
        );
        // The total per monitor, the breakdown per worker: 22 reasons per
        // monitor would be most of a fleet's exposition.
        m.count(Count::Rejected, self.count);
        m.instruments
            .observations_rejected_by_reason
            .add(self.count, &[reason(self.reason.as_str())]);
        if self.reason == RejectReason::Stale {
            m.count_stale(self.count);
        }
    }
}

/// Source times of one reading did not fit the monitor's `[payload]` unit
/// (`timestamp_unit` rejections), aggregated: one line for many messages.
/// The rejections themselves are counted by [`ObservationsRejected`].
#[derive(Debug, Clone, Copy)]
pub struct TimestampUnitMismatch<'a> {
    pub reading: &'a str,
    /// The unit the monitor's `[payload]` table configures.
    pub configured: &'static str,
    /// The unit the rejected numbers look like, when one fits.
    pub looks_like: Option<&'static str>,
    /// Messages rejected since the last such line.
    pub count: u64,
}

impl InternalEvent for TimestampUnitMismatch<'_> {
    fn emit(self, m: &MonitorTelemetry) {
        let advice = match self.looks_like {
            Some("ns") => "the sensor sends epoch nanoseconds, which radar does not read: have it send s, ms or us, or RFC 3339 text".to_string(),
            Some(unit) => format!(
                "they look like epoch {unit}: set ts_unit = \"{unit}\" in the monitor's [payload] table (create a new monitor from the edited file and retire this one)"
            ),
            None => "they are numbers but the monitor expects RFC 3339 text: set ts_unit to the numbers' unit (s, ms or us) in the monitor's [payload] table, or have the sensor send text".to_string(),
        };
        warn!(
            monitor_id = %m.id(),
            monitor_name = m.name(),
            reading = self.reading,
            configured_unit = self.configured,
            looks_like = self.looks_like.unwrap_or("unknown"),
            count = self.count,
            "Source times of reading {:?} cannot be in the configured unit {:?} and were rejected as timestamp_unit; {advice}.",
            self.reading,
            self.configured,
        );
    }
}

/// Aligned frames handed to the detector.
#[derive(Debug, Clone, Copy)]
pub struct FramesEmitted {
    pub count: u64,
}

impl InternalEvent for FramesEmitted {
    fn emit(self, m: &MonitorTelemetry) {
        trace!(monitor_id = %m.id(), count = self.count, "Frames emitted.");
        m.count(Count::FramesEmitted, self.count);
    }
}

/// The detector scored one frame while monitoring.
#[derive(Debug, Clone, Copy)]
pub struct FrameScored {
    pub score: f64,
    pub flagged: bool,
}

impl InternalEvent for FrameScored {
    fn emit(self, m: &MonitorTelemetry) {
        trace!(monitor_id = %m.id(), score = self.score, flagged = self.flagged, "Frame scored.");
        if self.score.is_finite() {
            // Distributions are per worker: per monitor they would multiply
            // the exposition by their buckets for every monitor.
            m.instruments.frame_score.record(self.score, &[]);
        }
        if self.flagged {
            m.count(Count::FramesFlagged, 1);
        }
    }
}

/// The alarm rule opened an alarm.
#[derive(Debug, Clone, Copy)]
pub struct AlarmOpened;

impl InternalEvent for AlarmOpened {
    fn emit(self, m: &MonitorTelemetry) {
        warn!(monitor_id = %m.id(), monitor_name = m.name(), "Alarm opened.");
        m.count(Count::AlarmsOpened, 1);
    }
}

/// The detector returned to normal and closed the open alarm.
#[derive(Debug, Clone, Copy)]
pub struct AlarmClosed;

impl InternalEvent for AlarmClosed {
    fn emit(self, m: &MonitorTelemetry) {
        info!(monitor_id = %m.id(), monitor_name = m.name(), "Alarm closed.");
        m.count(Count::AlarmsClosed, 1);
    }
}

/// The model thread finished one operation.
#[derive(Debug, Clone, Copy)]
pub struct ModelOperationFinished {
    pub operation: ModelOperation,
    pub duration: Duration,
}

impl InternalEvent for ModelOperationFinished {
    fn emit(self, m: &MonitorTelemetry) {
        trace!(
            monitor_id = %m.id(),
            operation = self.operation.as_str(),
            seconds = self.duration.as_secs_f64(),
            "Model operation finished."
        );
        m.instruments.model_operation_duration.record(
            self.duration.as_secs_f64(),
            &[KeyValue::new(key::OPERATION, self.operation.as_str())],
        );
    }
}

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

/// A change reported by the MQTT reconnect owner. The owner logs these
/// itself, so this only updates the board and the counters (and logs at
/// `debug`).
#[derive(Debug, Clone, Copy)]
pub struct ConnectionChanged<'a>(pub &'a ConnectionEvent);

impl InternalEvent for ConnectionChanged<'_> {
    fn emit(self, m: &MonitorTelemetry) {
        debug!(monitor_id = %m.id(), event = ?self.0, "Connection changed.");
        match self.0 {
            ConnectionEvent::Connected { .. } => m.connect(),
            ConnectionEvent::Disconnected { reason, .. } => m.disconnect(reason),
            ConnectionEvent::SubscriptionRefused {
                topic,
                required: true,
                ..
            } => m.disconnect(&format!("the broker refused the subscription to {topic}")),
            ConnectionEvent::SubscriptionRefused {
                required: false, ..
            } => {}
            ConnectionEvent::Retrying { reason, .. } => {
                m.disconnect(reason);
                m.count(Count::ReconnectAttempts, 1);
            }
            ConnectionEvent::Stopped { .. } => m.disconnect("ingestion stopped"),
        }
    }
}

/// Every required subscription was acknowledged with a success code.
#[derive(Debug, Clone, Copy)]
pub struct MqttConnected;

impl InternalEvent for MqttConnected {
    fn emit(self, m: &MonitorTelemetry) {
        info!(monitor_id = %m.id(), "Connected; every subscription acknowledged.");
        m.connect();
    }
}

/// The connection dropped or a subscription was refused.
#[derive(Debug, Clone, Copy)]
pub struct MqttDisconnected<'a> {
    pub detail: &'a str,
}

impl InternalEvent for MqttDisconnected<'_> {
    fn emit(self, m: &MonitorTelemetry) {
        warn!(monitor_id = %m.id(), detail = self.detail, "Disconnected from the broker.");
        m.disconnect(self.detail);
    }
}

/// The reconnect owner is about to try again.
#[derive(Debug, Clone, Copy)]
pub struct ReconnectAttempted {
    /// 1 for the first attempt after the drop.
    pub attempt: u64,
    /// The wait before this attempt.
    pub delay: Duration,
}

impl InternalEvent for ReconnectAttempted {
    fn emit(self, m: &MonitorTelemetry) {
        info!(
            monitor_id = %m.id(),
            attempt = self.attempt,
            delay_seconds = self.delay.as_secs_f64(),
            "Reconnecting to the broker."
        );
        m.count(Count::ReconnectAttempts, 1);
    }
}

/// A coverage gap closed; its length is added under its cause.
#[derive(Debug, Clone, Copy)]
pub struct CoverageGapClosed {
    pub cause: GapCause,
    pub duration: Duration,
}

impl InternalEvent for CoverageGapClosed {
    fn emit(self, m: &MonitorTelemetry) {
        info!(
            monitor_id = %m.id(),
            cause = self.cause.as_str(),
            seconds = self.duration.as_secs_f64(),
            "Coverage gap closed."
        );
        // The total per monitor, the breakdown by cause per worker.
        let seconds = self.duration.as_secs_f64();
        m.add_gap_seconds(seconds);
        m.instruments
            .coverage_gap_duration_by_cause
            .add(seconds, &[KeyValue::new(key::CAUSE, self.cause.as_str())]);
    }
}

/// The detector entered a phase (also reported once at start).
#[derive(Debug, Clone, Copy)]
pub struct DetectorPhaseChanged {
    pub phase: DetectorPhase,
}

impl InternalEvent for DetectorPhaseChanged {
    fn emit(self, m: &MonitorTelemetry) {
        info!(monitor_id = %m.id(), phase = self.phase.as_str(), "Detector phase changed.");
        m.set_phase(self.phase);
    }
}

/// The model stopped advancing (checkpoint stall or a stuck operation).
#[derive(Debug, Clone, Copy)]
pub struct MonitorStalled<'a> {
    pub detail: &'a str,
}

impl InternalEvent for MonitorStalled<'_> {
    fn emit(self, m: &MonitorTelemetry) {
        warn!(monitor_id = %m.id(), detail = self.detail, "Monitor stalled.");
        m.stall(self.detail);
    }
}

/// Required readings went silent while connected (`readings` non-empty),
/// or data flows again (`readings` empty).
#[derive(Debug, Clone, Copy)]
pub struct NoDataChanged<'a> {
    /// The silent readings and how long each has been, as one sentence.
    pub detail: Option<&'a str>,
}

impl InternalEvent for NoDataChanged<'_> {
    fn emit(self, m: &MonitorTelemetry) {
        match self.detail {
            Some(detail) => {
                warn!(monitor_id = %m.id(), detail, "Monitor sees no data from required readings.")
            }
            None => info!(monitor_id = %m.id(), "Monitor sees data again."),
        }
        m.set_no_data(self.detail.map(str::to_string));
    }
}

/// The model advances again.
#[derive(Debug, Clone, Copy)]
pub struct MonitorStallCleared;

impl InternalEvent for MonitorStallCleared {
    fn emit(self, m: &MonitorTelemetry) {
        info!(monitor_id = %m.id(), "Monitor advancing again.");
        m.clear_stall();
    }
}
