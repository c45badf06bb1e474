//! Events of the intake: observations received, admitted or rejected by
//! alignment, and the frames alignment hands to the detector.

use tracing::{debug, trace, warn};

use super::{InternalEvent, reason};
use crate::telemetry::{counts::Count, handle::MonitorTelemetry, labels::RejectReason};

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
