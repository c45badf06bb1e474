//! What passes between the session and its owner: the inputs the owner
//! feeds in and the actions it carries out.

use std::time::Instant;

use chrono::{DateTime, Utc};
use rumqttc::SubscribeReasonCode;

use crate::mqtt::ConnectionEvent;

/// The time of an input, read by the owner: the wall clock for reported
/// events, the monotonic one for timers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Now {
    pub wall: DateTime<Utc>,
    pub mono: Instant,
}

/// Something that happened to the session. `M` is a delivered message,
/// which the session hands back in [`Action::Admit`] or drops.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input<M> {
    /// The broker accepted the connection (CONNACK with a success code; a
    /// refused CONNACK arrives as `ConnectionFailed`).
    ConnAck,
    /// The client put a SUBSCRIBE with this packet id on the wire.
    SubscribeSent { pkid: u16 },
    /// The broker answered a SUBSCRIBE.
    SubAck {
        pkid: u16,
        codes: Vec<SubscribeReasonCode>,
    },
    /// The broker delivered a message.
    Publish(M),
    /// Any other packet from the broker (PINGRESP, PUBACK...): a sign of life.
    OtherPacket,
    /// Connecting failed or the connection broke; the client has already
    /// dropped it. `reason` is a sentence for the operator.
    ConnectionFailed { reason: String },
    /// The client took every SUBSCRIBE of [`Action::Subscribe`].
    Subscribed,
    /// The client would not take a SUBSCRIBE request.
    SubscribeNotQueued { reason: String },
    /// The instant of [`Session::timer`](super::Session::timer) has come.
    TimerFired,
    /// Ingestion must end (a stop, or nobody reads the queue any more).
    StopRequested,
}

/// What the owner must do, in order. When carrying one out fails, the owner
/// skips the rest and feeds the failure back as an input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action<M> {
    /// Start attempt number `attempt` of this outage: poll the event loop,
    /// which connects.
    Connect { attempt: u32 },
    /// Queue one SUBSCRIBE per topic, in this order, then feed back
    /// [`Input::Subscribed`] or [`Input::SubscribeNotQueued`].
    Subscribe { topics: Vec<String> },
    /// Stamp and check this message and hand it towards the queue.
    Admit(M),
    /// Close the connection from this side (the broker or the handshake
    /// failed us); the next attempt opens a new one.
    DropConnection,
    /// Queue every admitted message now, waiting for room: what a lost
    /// connection delivered reaches the model before the loss is reported.
    QueueAdmitted,
    /// Count it in the ingress counters.
    Count(Tally),
    /// Publish the link status for health readers.
    SetStatus {
        connected: bool,
        failed_attempts: u32,
        last_error: Option<String>,
    },
    /// Tell the monitor.
    Report(ConnectionEvent),
    /// A SUBACK for no pending SUBSCRIBE (or with a wrong code count): log
    /// it and go on.
    IgnoreSuback { pkid: u16 },
    /// Queue what fits without waiting, unsubscribe and disconnect: the
    /// session has stopped.
    Disconnect,
}

/// A counted occurrence (beside attempts, which [`Action::Connect`] counts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tally {
    Connected,
    SubscriptionRefused,
}
