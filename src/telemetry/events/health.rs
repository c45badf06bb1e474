//! Events of a monitor's health: coverage gaps closed, readings gone
//! silent, and the model stalling and advancing again.

use std::time::Duration;

use opentelemetry::KeyValue;
use tracing::{info, warn};

use super::InternalEvent;
use crate::coverage::GapCause;
use crate::telemetry::{Stall, handle::MonitorTelemetry, labels::key};

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

/// The model stopped advancing (checkpoint stall or a stuck operation).
#[derive(Debug, Clone, Copy)]
pub struct MonitorStalled {
    pub stall: Stall,
}

impl InternalEvent for MonitorStalled {
    fn emit(self, m: &MonitorTelemetry) {
        warn!(monitor_id = %m.id(), detail = self.stall.detail(), "Monitor stalled.");
        m.stall(self.stall);
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
