//! The CONNACK and SUBACK handshake: subscribing, checking every SUBACK,
//! and announcing the established connection.

use std::ops::ControlFlow;

use chrono::Utc;
use rumqttc::{ConnAck, QoS, SubAck};
use tracing::{debug, info, warn};

use super::{Handshake, Owner, SessionEnd};
use crate::mqtt::{ConnectionEvent, MqttError, diagnose, subscriptions::SubackOutcome};

impl Owner {
    /// The broker accepted the connection: subscribe to every topic not
    /// yet acknowledged (none left when the session was kept).
    pub(super) async fn on_connack(
        &mut self,
        ack: &ConnAck,
        attempt: u32,
        handshake: &mut Handshake,
    ) -> ControlFlow<SessionEnd> {
        handshake.connack_seen = true;
        debug!(monitor_id = %self.options.monitor, session_present = ack.session_present, "MQTT CONNACK received; subscribing.");
        for topic in self.subscriptions.on_connected() {
            if let Err(e) = self.client.try_subscribe(topic, QoS::AtLeastOnce) {
                self.eventloop.clean();
                return ControlFlow::Break(SessionEnd::Lost {
                    reason: format!("could not queue a SUBSCRIBE: {e}"),
                    established: handshake.established,
                });
            }
        }
        if self.subscriptions.announce_if_complete() {
            handshake.established = true;
            self.on_established(attempt).await;
        }
        ControlFlow::Continue(())
    }

    /// A SUBACK: the connection is established once every subscription is
    /// acknowledged; a refused required reading drops the connection.
    pub(super) async fn on_suback(
        &mut self,
        ack: &SubAck,
        attempt: u32,
        handshake: &mut Handshake,
    ) -> ControlFlow<SessionEnd> {
        match self.subscriptions.on_suback(ack.pkid, &ack.return_codes) {
            SubackOutcome::Progress => {}
            SubackOutcome::AllAcknowledged => {
                handshake.established = true;
                self.on_established(attempt).await;
            }
            SubackOutcome::Refused { topic } => {
                let error = MqttError::SubscriptionRefused {
                    monitor: self.options.monitor.clone(),
                    topic: topic.clone(),
                };
                warn!(monitor_id = %self.options.monitor, topic = %topic, "MQTT broker refused a subscription; the monitor stays disconnected.");
                self.counters.subscription_refused();
                self.emit(ConnectionEvent::SubscriptionRefused {
                    at: Utc::now(),
                    topic,
                    required: true,
                })
                .await;
                // Drop the connection: the retry starts a new one.
                self.eventloop.clean();
                return ControlFlow::Break(SessionEnd::Lost {
                    reason: error.to_string(),
                    established: handshake.established,
                });
            }
            SubackOutcome::OptionalRefused { topic } => {
                warn!(monitor_id = %self.options.monitor, topic = %topic, "MQTT broker refused an optional reading's subscription; frames do not need it.");
                self.counters.subscription_refused();
                self.emit(ConnectionEvent::SubscriptionRefused {
                    at: Utc::now(),
                    topic,
                    required: false,
                })
                .await;
            }
            SubackOutcome::Unexpected { pkid } => {
                warn!(monitor_id = %self.options.monitor, pkid, "MQTT SUBACK for no pending SUBSCRIBE ignored.");
            }
        }
        ControlFlow::Continue(())
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

    async fn on_established(&mut self, attempt: u32) {
        info!(monitor_id = %self.options.monitor, topics = self.topics.len(), attempt, "MQTT subscriptions acknowledged; monitor connected.");
        self.counters.connected();
        self.set_status(true, 0, None);
        self.emit(ConnectionEvent::Connected {
            at: Utc::now(),
            attempt,
        })
        .await;
    }
}
