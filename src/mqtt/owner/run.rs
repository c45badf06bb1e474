//! The owner's loop: carry out the session's actions, then wait for the next
//! input (a stop, the session's timer, or an event of the connection), and
//! at the end disconnect gracefully.

use chrono::Utc;
use rumqttc::{Event, Outgoing, Packet, Publish};
use tokio::time::{Instant as TokioInstant, sleep_until};
use tracing::{debug, warn};

use super::{Admission, BURST, Owner, stop_requested};
use crate::mqtt::session::{Action, Input, Now};

/// The clocks of an input that happens now.
pub(super) fn now() -> Now {
    Now {
        wall: Utc::now(),
        mono: std::time::Instant::now(),
    }
}

impl Owner {
    pub(super) async fn run(mut self, first: Vec<Action<Publish>>) {
        let mut actions = first;
        loop {
            let follow_up = self.carry_out_all(actions).await;
            if self.session.is_stopped() {
                return;
            }
            let input = match follow_up {
                Some(input) => Some(input),
                None => self.next_input().await,
            };
            actions = match input {
                Some(input) => self.session.handle(input, now()),
                None => Vec::new(),
            };
        }
    }

    /// Carries out the actions in order. One that fails ends the list: its
    /// failure is the next input.
    async fn carry_out_all(&mut self, actions: Vec<Action<Publish>>) -> Option<Input<Publish>> {
        for action in actions {
            if let Some(input) = self.carry_out(action).await {
                return Some(input);
            }
        }
        if self.session.polls() {
            return self.queue_if_read_done().await;
        }
        None
    }

    /// The read is used up (the next poll waits on the socket), or the burst
    /// is full: queue what it delivered. Messages the broker delivered (and
    /// rumqttc acknowledged) are never dropped while the model reads.
    async fn queue_if_read_done(&mut self) -> Option<Input<Publish>> {
        if self.burst.is_empty()
            || !(self.eventloop.state.events.is_empty() || self.burst.len() >= BURST)
        {
            return None;
        }
        match self.queue_burst().await {
            Admission::Done => None,
            Admission::StopRequested | Admission::ConsumerGone => Some(Input::StopRequested),
        }
    }

    /// Waits for what happens next; `None` for an event the session does
    /// not need (an outgoing packet other than SUBSCRIBE).
    async fn next_input(&mut self) -> Option<Input<Publish>> {
        let timer = self.session.timer().map(TokioInstant::from_std);
        let polls = self.session.polls();
        let polled = tokio::select! {
            biased;
            () = stop_requested(&mut self.stop) => return Some(Input::StopRequested),
            () = sleep_until_some(timer), if timer.is_some() => return Some(Input::TimerFired),
            polled = self.eventloop.poll(), if polls => polled,
        };
        match polled {
            Ok(event) => self.input_of(event),
            Err(e) => Some(Input::ConnectionFailed {
                reason: self.describe(&e, self.session.connack_seen()),
            }),
        }
    }

    fn input_of(&self, event: Event) -> Option<Input<Publish>> {
        Some(match event {
            Event::Incoming(Packet::ConnAck(ack)) => {
                debug!(monitor_id = %self.options.monitor, session_present = ack.session_present, "MQTT CONNACK received; subscribing.");
                Input::ConnAck
            }
            Event::Outgoing(Outgoing::Subscribe(pkid)) => Input::SubscribeSent { pkid },
            Event::Incoming(Packet::SubAck(ack)) => Input::SubAck {
                pkid: ack.pkid,
                codes: ack.return_codes,
            },
            Event::Incoming(Packet::Publish(publish)) => Input::Publish(publish),
            Event::Incoming(_) => Input::OtherPacket,
            Event::Outgoing(_) => return None,
        })
    }

    /// Unsubscribes and disconnects if a connection is up, bounded by the
    /// handshake timeout; then the owner ends and drops the queue sender.
    pub(super) async fn disconnect(&mut self) {
        self.queue_burst_if_room();
        if self.eventloop.network.is_none() {
            return;
        }
        let monitor = self.options.monitor.clone();
        for topic in &self.topics {
            if let Err(e) = self.client.try_unsubscribe(topic.as_str()) {
                debug!(monitor_id = %monitor, error = %e, "MQTT UNSUBSCRIBE not queued.");
            }
        }
        if let Err(e) = self.client.try_disconnect() {
            debug!(monitor_id = %monitor, error = %e, "MQTT DISCONNECT not queued.");
        }
        let deadline = TokioInstant::now() + self.options.handshake_timeout;
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
}

async fn sleep_until_some(instant: Option<TokioInstant>) {
    match instant {
        Some(instant) => sleep_until(instant).await,
        None => std::future::pending().await,
    }
}
