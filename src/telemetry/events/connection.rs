//! Events of the broker connection, as the MQTT reconnect owner reports
//! them: connected, disconnected, reconnecting.

use std::time::Duration;

use tracing::{debug, info, warn};

use super::InternalEvent;
use crate::mqtt::ConnectionEvent;
use crate::telemetry::{counts::Count, handle::MonitorTelemetry};

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
