//! What the reconnect owner tells the monitor about its connection.

use std::time::Duration;

use chrono::{DateTime, Utc};

/// A change of the connection, in the order it happened. The runtime turns
/// `Disconnected` .. `Connected` into an MQTT outage in the coverage history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConnectionEvent {
    /// The broker acknowledged every required subscription with a success
    /// code. `attempt` counts the attempts this took (1 = first try).
    Connected { at: DateTime<Utc>, attempt: u32 },
    /// An established connection (all subscriptions acknowledged) was lost.
    Disconnected { at: DateTime<Utc>, reason: String },
    /// The broker refused a subscription (SUBACK 0x80). For a required
    /// reading the connection is dropped and retried on the backoff
    /// schedule; an optional reading's refusal only costs that reading.
    SubscriptionRefused {
        at: DateTime<Utc>,
        topic: String,
        required: bool,
    },
    /// An attempt failed (or the connection was lost); the next attempt,
    /// number `next_attempt` of this outage, starts after `retry_in`.
    Retrying {
        at: DateTime<Utc>,
        next_attempt: u32,
        retry_in: Duration,
        reason: String,
    },
    /// Ingestion stopped on request; no more messages will come.
    Stopped { at: DateTime<Utc> },
}

/// The latest connection state, for a health reader that must never wait.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkStatus {
    /// Every required subscription is acknowledged on a live connection.
    pub connected: bool,
    /// When `connected` last changed.
    pub since: DateTime<Utc>,
    /// Failed attempts in the current outage (0 while connected).
    pub failed_attempts: u32,
    /// Why the last attempt failed or the connection was lost.
    pub last_error: Option<String>,
}
