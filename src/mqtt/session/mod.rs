//! The reconnect session of one monitor as a pure state machine: the owner
//! feeds it what the MQTT event loop reported (and the timer, and a stop),
//! and it answers with what to do. It does no IO, reads no clock and calls
//! no client: the owner task (`owner`) is the one place that carries the
//! actions out, as rumqttc's `MqttState` leaves the network to `EventLoop`.
//!
//! One value of this type per monitor, held by one task, is the single
//! reconnect owner of recovery rule 9: at most one attempt is in flight,
//! each failure schedules exactly one next attempt (5 s doubling to 5 min,
//! never giving up), and the monitor is reported connected only once every
//! required subscription has a success code on the current connection.

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use rumqttc::SubscribeReasonCode;

use super::{
    Backoff, ConnectionEvent, MqttError,
    subscriptions::{SubackOutcome, Subscriptions, TopicSubscription},
};

mod interface;
#[cfg(test)]
mod tests;

pub use interface::{Action, Input, Now, Tally};

/// What the session needs to know about its monitor.
#[derive(Debug, Clone)]
pub struct SessionConfig {
    /// The monitor id, for the messages an operator reads.
    pub monitor: String,
    /// Every reading's topic, in reading order.
    pub topics: Vec<TopicSubscription>,
    pub backoff: Backoff,
    /// How long an attempt may take to get its CONNACK and every SUBACK.
    pub handshake_timeout: Duration,
}

/// Where the session is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Attempt `attempt` is connecting; it fails at `deadline`.
    Connecting { attempt: u32, deadline: Instant },
    /// CONNACK seen; SUBACKs still missing (see `Session::unacknowledged`).
    /// Messages are admitted already: a topic's retained message follows
    /// its own SUBACK and may come before the last one.
    Subscribing { attempt: u32, deadline: Instant },
    /// Every required subscription is acknowledged: established.
    Live { attempt: u32 },
    /// Backing off; attempt `attempt` starts at `until`.
    Waiting { until: Instant, attempt: u32 },
    /// Ended for good.
    Stopped,
}

/// The reconnect session of one monitor.
#[derive(Debug)]
pub struct Session {
    config: SessionConfig,
    subscriptions: Subscriptions,
    state: State,
    /// Backoff waits in the current outage (the index into the schedule).
    waits: u32,
    /// When the broker last sent anything: an outage is dated from it.
    last_packet: DateTime<Utc>,
}

impl Session {
    /// A session that starts its first attempt now.
    pub fn new<M>(config: SessionConfig, now: Now) -> (Self, Vec<Action<M>>) {
        let subscriptions = Subscriptions::new(config.topics.clone());
        let mut session = Self {
            config,
            subscriptions,
            state: State::Stopped,
            waits: 0,
            last_packet: now.wall,
        };
        let actions = vec![session.attempt(1, now)];
        (session, actions)
    }

    pub fn state(&self) -> State {
        self.state
    }

    /// The instant at which the owner must feed [`Input::TimerFired`]: the
    /// end of the handshake or of the backoff wait.
    pub fn timer(&self) -> Option<Instant> {
        match self.state {
            State::Connecting { deadline, .. } | State::Subscribing { deadline, .. } => {
                Some(deadline)
            }
            State::Waiting { until, .. } => Some(until),
            State::Live { .. } | State::Stopped => None,
        }
    }

    /// Whether the event loop must be polled: an attempt is under way. While
    /// waiting nothing is polled, or rumqttc would reconnect at once.
    pub fn polls(&self) -> bool {
        matches!(
            self.state,
            State::Connecting { .. } | State::Subscribing { .. } | State::Live { .. }
        )
    }

    /// The broker answered the connect: a failure now is past the CONNACK.
    pub fn connack_seen(&self) -> bool {
        matches!(self.state, State::Subscribing { .. } | State::Live { .. })
    }

    pub fn is_stopped(&self) -> bool {
        self.state == State::Stopped
    }

    /// Required topics still without a success code, for logs and errors.
    pub fn unacknowledged(&self) -> Vec<&str> {
        self.subscriptions.unacknowledged()
    }

    /// Advances the session by one input and returns what to do.
    pub fn handle<M>(&mut self, input: Input<M>, now: Now) -> Vec<Action<M>> {
        if self.is_stopped() {
            return Vec::new();
        }
        let connection_up = self.connack_seen();
        let from_broker = matches!(
            input,
            Input::ConnAck | Input::SubAck { .. } | Input::Publish(_) | Input::OtherPacket
        );
        if from_broker && self.polls() {
            self.last_packet = now.wall;
        }
        match input {
            Input::StopRequested => self.stop(now),
            Input::ConnAck => self.on_connack(),
            Input::Subscribed => self.on_subscribed(now),
            Input::SubscribeSent { pkid } if self.polls() => {
                self.subscriptions.on_subscribe_sent(pkid);
                Vec::new()
            }
            Input::SubAck { pkid, codes } if connection_up => self.on_suback(pkid, &codes, now),
            Input::Publish(message) if connection_up => vec![Action::Admit(message)],
            Input::ConnectionFailed { reason } if self.polls() => self.lost(reason, false, now),
            Input::SubscribeNotQueued { reason }
                if matches!(self.state, State::Subscribing { .. }) =>
            {
                self.lost(format!("could not queue a SUBSCRIBE: {reason}"), true, now)
            }
            Input::TimerFired => self.on_timer(now),
            _ => Vec::new(),
        }
    }

    fn attempt<M>(&mut self, attempt: u32, now: Now) -> Action<M> {
        self.state = State::Connecting {
            attempt,
            deadline: now.mono + self.config.handshake_timeout,
        };
        Action::Connect { attempt }
    }

    /// Subscribe to every topic (the worker uses clean sessions, so the
    /// broker kept none; subscribing again is the only way to see fresh
    /// SUBACK codes anyway).
    fn on_connack<M>(&mut self) -> Vec<Action<M>> {
        let State::Connecting { attempt, deadline } = self.state else {
            // Only the connect itself yields a CONNACK.
            return Vec::new();
        };
        self.state = State::Subscribing { attempt, deadline };
        vec![Action::Subscribe {
            topics: self.subscriptions.on_connected(),
        }]
    }

    /// A monitor whose frames need no SUBACK (only optional readings) is
    /// established as soon as its SUBSCRIBEs are on their way.
    fn on_subscribed<M>(&mut self, now: Now) -> Vec<Action<M>> {
        match self.state {
            State::Subscribing { attempt, .. } if self.subscriptions.announce_if_complete() => {
                self.established(attempt, now)
            }
            _ => Vec::new(),
        }
    }

    fn on_suback<M>(
        &mut self,
        pkid: u16,
        codes: &[SubscribeReasonCode],
        now: Now,
    ) -> Vec<Action<M>> {
        match self.subscriptions.on_suback(pkid, codes) {
            SubackOutcome::Progress => Vec::new(),
            SubackOutcome::AllAcknowledged => match self.state {
                State::Subscribing { attempt, .. } => self.established(attempt, now),
                _ => Vec::new(),
            },
            SubackOutcome::Refused { topic } => {
                let reason = MqttError::SubscriptionRefused {
                    monitor: self.config.monitor.clone(),
                    topic: topic.clone(),
                }
                .to_string();
                let mut actions = Vec::from(refused(topic, true, now));
                actions.extend(self.lost(reason, true, now));
                actions
            }
            SubackOutcome::OptionalRefused { topic } => Vec::from(refused(topic, false, now)),
            SubackOutcome::Unexpected { pkid } => vec![Action::IgnoreSuback { pkid }],
        }
    }

    fn established<M>(&mut self, attempt: u32, now: Now) -> Vec<Action<M>> {
        self.state = State::Live { attempt };
        vec![
            Action::Count(Tally::Connected),
            Action::SetStatus {
                connected: true,
                failed_attempts: 0,
                last_error: None,
            },
            Action::Report(ConnectionEvent::Connected {
                at: now.wall,
                attempt,
            }),
        ]
    }

    fn on_timer<M>(&mut self, now: Now) -> Vec<Action<M>> {
        match self.state {
            State::Waiting { attempt, .. } => vec![self.attempt(attempt, now)],
            State::Connecting { .. } | State::Subscribing { .. } => {
                let waiting = self.unacknowledged().join(", ");
                let reason = format!(
                    "no CONNACK or SUBACK within {:?} (waiting for: {waiting})",
                    self.config.handshake_timeout
                );
                self.lost(reason, true, now)
            }
            State::Live { .. } | State::Stopped => Vec::new(),
        }
    }

    /// The attempt failed or the connection broke: report it and schedule
    /// the one next attempt. Losing an established connection starts a new
    /// outage (attempts and backoff from the beginning) dated from the
    /// last packet received.
    fn lost<M>(&mut self, reason: String, drop: bool, now: Now) -> Vec<Action<M>> {
        let (established, attempt) = match self.state {
            State::Connecting { attempt, .. } | State::Subscribing { attempt, .. } => {
                (false, attempt)
            }
            State::Live { attempt } => (true, attempt),
            State::Waiting { .. } | State::Stopped => return Vec::new(),
        };
        let mut actions = Vec::new();
        if drop {
            actions.push(Action::DropConnection);
        }
        actions.push(Action::QueueAdmitted);
        let failed_attempts = if established {
            self.waits = 0;
            actions.push(Action::SetStatus {
                connected: false,
                failed_attempts: 0,
                last_error: Some(reason.clone()),
            });
            actions.push(Action::Report(ConnectionEvent::Disconnected {
                at: self.last_packet,
                reason: reason.clone(),
            }));
            0
        } else {
            actions.push(Action::SetStatus {
                connected: false,
                failed_attempts: attempt,
                last_error: Some(reason.clone()),
            });
            attempt
        };
        let retry_in = self.config.backoff.delay(self.waits);
        self.waits = self.waits.saturating_add(1);
        let next_attempt = failed_attempts.saturating_add(1);
        self.state = State::Waiting {
            until: now.mono + retry_in,
            attempt: next_attempt,
        };
        actions.push(Action::Report(ConnectionEvent::Retrying {
            at: now.wall,
            next_attempt,
            retry_in,
            reason,
        }));
        actions
    }

    fn stop<M>(&mut self, now: Now) -> Vec<Action<M>> {
        self.state = State::Stopped;
        vec![
            Action::Disconnect,
            Action::SetStatus {
                connected: false,
                failed_attempts: 0,
                last_error: None,
            },
            Action::Report(ConnectionEvent::Stopped { at: now.wall }),
        ]
    }
}

fn refused<M>(topic: String, required: bool, now: Now) -> [Action<M>; 2] {
    [
        Action::Count(Tally::SubscriptionRefused),
        Action::Report(ConnectionEvent::SubscriptionRefused {
            at: now.wall,
            topic,
            required,
        }),
    ]
}
