//! Events of the detector: frames scored, alarms opened and closed, model
//! operations timed and phase changes.

use std::time::Duration;

use opentelemetry::KeyValue;
use tracing::{info, trace, warn};

use super::InternalEvent;
use crate::telemetry::{
    counts::Count,
    handle::MonitorTelemetry,
    labels::{DetectorPhase, ModelOperation, key},
};

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
