//! Events of the broker connection, as the MQTT reconnect owner reports
//! them (connected, disconnected, a subscription refused, reconnecting,
//! stopped): one event carrying the owner's [`ConnectionEvent`], so the board
//! and the counters follow exactly what the owner saw.

use tracing::debug;

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
