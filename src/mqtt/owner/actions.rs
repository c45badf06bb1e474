//! Carrying out one action of the session: the client calls, the queue, the
//! counters, the status, the logs and the events.

use chrono::Utc;
use rumqttc::{Publish, QoS};
use tracing::{info, warn};

use super::{Admission, Owner};
use crate::mqtt::{
    ConnectionEvent, diagnose,
    session::{Action, Input, Tally},
};

impl Owner {
    /// Does what the action says; returns the input it produced, if any
    /// (the outcome of subscribing, or a stop noticed while waiting).
    pub(super) async fn carry_out(&mut self, action: Action<Publish>) -> Option<Input<Publish>> {
        match action {
            Action::Connect { .. } => self.counters.connect_attempt(),
            Action::Subscribe { topics } => return Some(self.subscribe(&topics)),
            Action::Admit(publish) => self.admit(publish),
            Action::DropConnection => self.eventloop.clean(),
            Action::QueueAdmitted => match self.queue_burst().await {
                Admission::Done => {}
                Admission::StopRequested | Admission::ConsumerGone => {
                    return Some(Input::StopRequested);
                }
            },
            Action::Count(Tally::Connected) => self.counters.connected(),
            Action::Count(Tally::SubscriptionRefused) => self.counters.subscription_refused(),
            Action::SetStatus {
                connected,
                failed_attempts,
                last_error,
            } => self.set_status(connected, failed_attempts, last_error),
            Action::Report(event) => self.report(event).await,
            Action::IgnoreSuback { pkid } => {
                warn!(monitor_id = %self.options.monitor, pkid, "MQTT SUBACK for no pending SUBSCRIBE ignored.");
            }
            Action::Disconnect => self.disconnect().await,
        }
        None
    }

    fn subscribe(&mut self, topics: &[String]) -> Input<Publish> {
        for topic in topics {
            if let Err(e) = self.client.try_subscribe(topic, QoS::AtLeastOnce) {
                return Input::SubscribeNotQueued {
                    reason: e.to_string(),
                };
            }
        }
        Input::Subscribed
    }

    /// Logs the event and sends it to the monitor.
    async fn report(&mut self, event: ConnectionEvent) {
        let monitor = &self.options.monitor;
        match &event {
            ConnectionEvent::Connected { attempt, .. } => {
                info!(monitor_id = %monitor, topics = self.topics.len(), attempt, "MQTT subscriptions acknowledged; monitor connected.");
            }
            ConnectionEvent::Disconnected { at, reason } => {
                // A link that died silently is noticed only by the
                // keep-alive: the outage began at the last sign of life.
                let silent_ms = (Utc::now() - *at).num_milliseconds().max(0);
                warn!(
                    monitor_id = %monitor, reason = %reason, silent_before_ms = silent_ms,
                    "MQTT connection lost; the outage is dated from the last packet received; reconnecting on the backoff schedule."
                );
            }
            ConnectionEvent::SubscriptionRefused {
                topic,
                required: true,
                ..
            } => {
                warn!(monitor_id = %monitor, topic = %topic, "MQTT broker refused a subscription; the monitor stays disconnected.");
            }
            ConnectionEvent::SubscriptionRefused { topic, .. } => {
                warn!(monitor_id = %monitor, topic = %topic, "MQTT broker refused an optional reading's subscription; frames do not need it.");
            }
            ConnectionEvent::Retrying {
                next_attempt,
                retry_in,
                reason,
                ..
            } => {
                warn!(
                    monitor_id = %monitor, reason = %reason, failed_attempts = next_attempt.saturating_sub(1),
                    retry_in_ms = u64::try_from(retry_in.as_millis()).unwrap_or(u64::MAX),
                    "MQTT ingestion not connected; retrying after the backoff."
                );
            }
            ConnectionEvent::Stopped { .. } => {
                info!(monitor_id = %monitor, "MQTT ingestion stopped.");
                // Never wait here: the monitor may have stopped reading events.
                let _ = self.events.try_send(event);
                return;
            }
        }
        self.emit(event).await;
    }

    pub(super) fn describe(&self, error: &rumqttc::ConnectionError, connack_seen: bool) -> String {
        let login = self.options.credentials.as_ref();
        diagnose::describe(
            error,
            diagnose::Attempt {
                username: login.map(|l| l.username.as_str()),
                password_sent: login.is_some_and(|l| l.password.is_some()),
                tls: self.options.tls.is_some(),
                connack_seen,
            },
        )
    }
}
