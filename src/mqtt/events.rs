//! What the reconnect owner tells the monitor about its connection.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::coverage::{CoverageHistory, GapCause};

/// A change of the connection, in the order it happened. The runtime turns
/// `Disconnected` .. `Connected` into an MQTT outage in the coverage history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConnectionEvent {
    /// The broker acknowledged every required subscription with a success
    /// code. `attempt` counts the attempts this took (1 = first try).
    Connected { at: DateTime<Utc>, attempt: u32 },
    /// An established connection (all subscriptions acknowledged) was lost.
    /// `at` is the last sign of life: when the broker last sent any packet
    /// (message, PINGRESP or ack), not when the keep-alive noticed, so the
    /// silent time before detection counts as part of the outage.
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

impl ConnectionEvent {
    /// Records the event in the monitor's coverage history: losing an
    /// established connection opens an `mqtt_outage` gap at the drop, and
    /// the next `Connected` (every required SUBACK a success) closes it.
    /// Before the first connection the `startup` gap already explains the
    /// missing time. Returns whether the history changed, which is a
    /// checkpoint trigger.
    pub fn record_in(&self, coverage: &mut CoverageHistory) -> bool {
        match self {
            Self::Disconnected { at, .. } => coverage.open_gap(GapCause::MqttOutage, *at),
            Self::Connected { at, .. } => coverage.close_gap(GapCause::MqttOutage, *at),
            Self::SubscriptionRefused { .. } | Self::Retrying { .. } | Self::Stopped { .. } => {
                false
            }
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn at(second: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 29, 21, 0, second).unwrap()
    }

    #[test]
    fn an_outage_is_a_gap_from_the_drop_until_resubscribed() {
        let mut coverage = CoverageHistory::fresh(at(0));
        assert!(coverage.record_frame(at(1)));
        let version = coverage.version;
        let down = ConnectionEvent::Disconnected {
            at: at(10),
            reason: "reset".into(),
        };
        assert!(down.record_in(&mut coverage));
        let retry = ConnectionEvent::Retrying {
            at: at(10),
            next_attempt: 2,
            retry_in: Duration::from_secs(5),
            reason: "refused".into(),
        };
        assert!(!retry.record_in(&mut coverage));
        assert!(
            ConnectionEvent::Connected {
                at: at(25),
                attempt: 3
            }
            .record_in(&mut coverage)
        );
        assert_eq!(coverage.version, version + 2);
        let gap = coverage.gaps.last().unwrap();
        assert_eq!(
            (gap.cause, gap.from, gap.to),
            (GapCause::MqttOutage, at(10), Some(at(25)))
        );
    }

    #[test]
    fn the_first_connection_is_no_outage() {
        let mut coverage = CoverageHistory::fresh(at(0));
        let version = coverage.version;
        assert!(
            !ConnectionEvent::Connected {
                at: at(3),
                attempt: 1
            }
            .record_in(&mut coverage)
        );
        assert_eq!(coverage.version, version);
        assert_eq!(coverage.active_causes(), [GapCause::Startup]);
    }
}
