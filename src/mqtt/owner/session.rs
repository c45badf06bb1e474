//! The session loop: connect, stream events until the connection ends,
//! back off, and disconnect gracefully at a stop.

use std::ops::ControlFlow;

use chrono::Utc;
use rumqttc::{Event, Outgoing, Packet};
use tokio::time::{sleep, sleep_until};
use tracing::{debug, info, warn};

use super::{Admission, BURST, Handshake, Owner, SessionEnd, stop_requested};
use crate::mqtt::ConnectionEvent;

impl Owner {
    pub(super) async fn run(mut self) {
        let monitor = self.options.monitor.clone();
        // Attempts and backoff waits in the current outage; both restart
        // when an established connection drops.
        let mut attempts: u32 = 0;
        let mut waits: u32 = 0;
        loop {
            attempts = attempts.saturating_add(1);
            self.counters.connect_attempt();
            let (reason, established) = match self.session(attempts).await {
                SessionEnd::StopRequested | SessionEnd::ConsumerGone => break,
                SessionEnd::Lost {
                    reason,
                    established,
                } => (reason, established),
            };
            if established {
                // A link that died silently is noticed only by the
                // keep-alive: the outage began at the last sign of life.
                let silent_ms = (Utc::now() - self.last_packet).num_milliseconds().max(0);
                warn!(
                    monitor_id = %monitor, reason = %reason, silent_before_ms = silent_ms,
                    "MQTT connection lost; the outage is dated from the last packet received; reconnecting on the backoff schedule."
                );
                attempts = 0;
                waits = 0;
                self.set_status(false, 0, Some(reason.clone()));
                self.emit(ConnectionEvent::Disconnected {
                    at: self.last_packet,
                    reason: reason.clone(),
                })
                .await;
            } else {
                self.set_status(false, attempts, Some(reason.clone()));
            }
            let retry_in = self.options.backoff.delay(waits);
            waits = waits.saturating_add(1);
            warn!(
                monitor_id = %monitor, reason = %reason, failed_attempts = attempts,
                retry_in_ms = u64::try_from(retry_in.as_millis()).unwrap_or(u64::MAX),
                "MQTT ingestion not connected; retrying after the backoff."
            );
            self.emit(ConnectionEvent::Retrying {
                at: Utc::now(),
                next_attempt: attempts.saturating_add(1),
                retry_in,
                reason,
            })
            .await;
            tokio::select! {
                biased;
                () = stop_requested(&mut self.stop) => break,
                () = sleep(retry_in) => {}
            }
        }
        self.stop_gracefully().await;
    }

    /// One connection: connect, subscribe, then stream until it fails or
    /// ingestion ends. `attempt` is this attempt's number in the outage.
    /// Messages the broker delivered (and rumqttc acknowledged) are queued
    /// whatever ends the session; at a stop only as far as the queue has
    /// room, as before a stop nothing waits for the model any more.
    async fn session(&mut self, attempt: u32) -> SessionEnd {
        let end = self.stream(attempt).await;
        match end {
            SessionEnd::Lost { .. } => match self.queue_burst().await {
                Admission::Done => end,
                Admission::StopRequested => SessionEnd::StopRequested,
                Admission::ConsumerGone => SessionEnd::ConsumerGone,
            },
            SessionEnd::StopRequested => {
                self.queue_burst_if_room();
                end
            }
            SessionEnd::ConsumerGone => end,
        }
    }

    async fn stream(&mut self, attempt: u32) -> SessionEnd {
        let mut handshake = Handshake::default();
        let deadline = tokio::time::Instant::now() + self.options.handshake_timeout;
        loop {
            let polled = tokio::select! {
                biased;
                () = stop_requested(&mut self.stop) => return SessionEnd::StopRequested,
                () = sleep_until(deadline), if !handshake.established => {
                    let waiting = self.subscriptions.unacknowledged().join(", ");
                    self.eventloop.clean();
                    return SessionEnd::Lost {
                        reason: format!(
                            "no CONNACK or SUBACK within {:?} (waiting for: {waiting})",
                            self.options.handshake_timeout
                        ),
                        established: handshake.established,
                    };
                }
                polled = self.eventloop.poll() => polled,
            };
            let event = match polled {
                Ok(event) => {
                    if matches!(event, Event::Incoming(_)) {
                        self.last_packet = Utc::now();
                    }
                    event
                }
                Err(e) => {
                    return SessionEnd::Lost {
                        reason: self.describe(&e, handshake.connack_seen),
                        established: handshake.established,
                    };
                }
            };
            if let ControlFlow::Break(end) = self.on_event(event, attempt, &mut handshake).await {
                return end;
            }
            // The read is used up (the next poll waits on the socket), or
            // the burst is full: queue what it delivered.
            if !self.burst.is_empty()
                && (self.eventloop.state.events.is_empty() || self.burst.len() >= BURST)
            {
                match self.queue_burst().await {
                    Admission::Done => {}
                    Admission::StopRequested => return SessionEnd::StopRequested,
                    Admission::ConsumerGone => return SessionEnd::ConsumerGone,
                }
            }
        }
    }

    /// One event of the connection; `Break` ends the session.
    async fn on_event(
        &mut self,
        event: Event,
        attempt: u32,
        handshake: &mut Handshake,
    ) -> ControlFlow<SessionEnd> {
        match event {
            Event::Incoming(Packet::ConnAck(ack)) => {
                return self.on_connack(&ack, attempt, handshake).await;
            }
            Event::Outgoing(Outgoing::Subscribe(pkid)) => {
                self.subscriptions.on_subscribe_sent(pkid);
            }
            Event::Incoming(Packet::SubAck(ack)) => {
                return self.on_suback(&ack, attempt, handshake).await;
            }
            Event::Incoming(Packet::Publish(publish)) => self.admit(publish),
            _ => {}
        }
        ControlFlow::Continue(())
    }

    /// Unsubscribes and disconnects if a connection is up, bounded by the
    /// handshake timeout; then the owner ends and drops the queue sender.
    async fn stop_gracefully(mut self) {
        let monitor = self.options.monitor.clone();
        if self.eventloop.network.is_some() {
            for topic in &self.topics {
                if let Err(e) = self.client.try_unsubscribe(topic.as_str()) {
                    debug!(monitor_id = %monitor, error = %e, "MQTT UNSUBSCRIBE not queued.");
                }
            }
            if let Err(e) = self.client.try_disconnect() {
                debug!(monitor_id = %monitor, error = %e, "MQTT DISCONNECT not queued.");
            }
            let deadline = tokio::time::Instant::now() + self.options.handshake_timeout;
            loop {
                tokio::select! {
                    () = sleep_until(deadline) => {
                        warn!(monitor_id = %monitor, "MQTT DISCONNECT not sent in time; closing the socket.");
                        break;
                    }
                    polled = self.eventloop.poll() => match polled {
                        Ok(Event::Outgoing(Outgoing::Disconnect)) | Err(_) => break,
                        // Ingestion has ended: late messages are not admitted.
                        Ok(_) => {}
                    },
                }
            }
        }
        self.set_status(false, 0, None);
        info!(monitor_id = %monitor, "MQTT ingestion stopped.");
        // Never wait here: the monitor may have stopped reading events.
        let _ = self
            .events
            .try_send(ConnectionEvent::Stopped { at: Utc::now() });
    }
}
