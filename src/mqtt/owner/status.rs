//! What the owner reports: the link status and the connection events.

use chrono::Utc;

use super::{Owner, stop_requested};
use crate::mqtt::ConnectionEvent;

impl Owner {
    pub(super) fn set_status(
        &self,
        connected: bool,
        failed_attempts: u32,
        last_error: Option<String>,
    ) {
        self.status.send_modify(|s| {
            if s.connected != connected {
                s.since = Utc::now();
            }
            s.connected = connected;
            s.failed_attempts = failed_attempts;
            if last_error.is_some() || connected {
                s.last_error = last_error;
            }
        });
    }

    /// Sends an event, waiting while the channel is full (events are rare and
    /// must not be lost) unless a stop is requested. A monitor that dropped
    /// the receiver does not want them.
    pub(super) async fn emit(&mut self, event: ConnectionEvent) {
        tokio::select! {
            biased;
            _ = self.events.send(event) => {}
            () = stop_requested(&mut self.stop) => {}
        }
    }
}
