//! One monitor's counters, kept in its board slot as atomics. `/metrics`
//! writes them as text straight from here ([`super::text`]): through the
//! OpenTelemetry SDK each of a thousand monitors' series was collected into
//! the SDK's data model and encoded again, most of a scrape's CPU.
//!
//! Their breakdowns (by reason, trigger, cause) and the distributions stay
//! per worker in the SDK, where they are a few dozen series in all.

use std::sync::atomic::{AtomicU64, Ordering};

use super::names::Metric;

/// The per-monitor counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Count {
    Received,
    Accepted,
    Rejected,
    FramesEmitted,
    FramesFlagged,
    AlarmsOpened,
    AlarmsClosed,
    ReconnectAttempts,
    CheckpointCommits,
    CheckpointFailures,
    StaleRejected,
}

impl Count {
    /// In the order `/metrics` writes them.
    pub const ALL: [Count; 11] = [
        Self::Received,
        Self::Accepted,
        Self::Rejected,
        Self::FramesEmitted,
        Self::FramesFlagged,
        Self::AlarmsOpened,
        Self::AlarmsClosed,
        Self::ReconnectAttempts,
        Self::CheckpointCommits,
        Self::CheckpointFailures,
        Self::StaleRejected,
    ];

    pub const fn metric(self) -> Metric {
        match self {
            Self::Received => Metric::ObservationsReceived,
            Self::Accepted => Metric::ObservationsAccepted,
            Self::Rejected => Metric::ObservationsRejected,
            Self::FramesEmitted => Metric::FramesEmitted,
            Self::FramesFlagged => Metric::FramesFlagged,
            Self::AlarmsOpened => Metric::AlarmsOpened,
            Self::AlarmsClosed => Metric::AlarmsClosed,
            Self::ReconnectAttempts => Metric::MqttReconnectAttempts,
            Self::CheckpointCommits => Metric::CheckpointCommits,
            Self::CheckpointFailures => Metric::CheckpointFailures,
            Self::StaleRejected => Metric::RecoveryStaleRejected,
        }
    }

    /// Whether the series exists from admission at 0. The others appear at
    /// their first increment: an idle monitor then costs only the series an
    /// operator reads per monitor, and `rate(...) == 0` alerts (frames,
    /// received) see a monitor that never counted anything.
    pub const fn from_admission(self) -> bool {
        matches!(
            self,
            Self::Received
                | Self::Accepted
                | Self::Rejected
                | Self::FramesEmitted
                | Self::CheckpointCommits
        )
    }

    const fn index(self) -> usize {
        self as usize
    }
}

/// The counters of one monitor. Lock-free, so the network side may count
/// per message.
#[derive(Debug, Default)]
pub struct Counts {
    values: [AtomicU64; Count::ALL.len()],
    /// Closed coverage gaps, seconds as `f64` bits, all causes together.
    gap_seconds: AtomicU64,
}

impl Counts {
    pub fn add(&self, count: Count, n: u64) {
        self.values[count.index()].fetch_add(n, Ordering::Relaxed);
    }

    pub fn get(&self, count: Count) -> u64 {
        self.values[count.index()].load(Ordering::Relaxed)
    }

    /// Adds a closed gap's length; negative or non-finite lengths add
    /// nothing, so the total stays a valid counter.
    pub fn add_gap_seconds(&self, seconds: f64) {
        if !(seconds.is_finite() && seconds > 0.0) {
            return;
        }
        // A compare-and-swap loop: the only writer is the monitor's health
        // side, so it practically never retries.
        let _ = self
            .gap_seconds
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
                Some((f64::from_bits(bits) + seconds).to_bits())
            });
    }

    pub fn gap_seconds(&self) -> f64 {
        f64::from_bits(self.gap_seconds.load(Ordering::Relaxed))
    }

    /// Every count as of now (each read on its own; they are independent).
    pub fn values(&self) -> CountValues {
        CountValues(std::array::from_fn(|i| {
            self.values[i].load(Ordering::Relaxed)
        }))
    }
}

/// A copy of one monitor's counts, for its view.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CountValues([u64; Count::ALL.len()]);

impl CountValues {
    pub fn get(&self, count: Count) -> u64 {
        self.0[count.index()]
    }

    /// Sets one count (tests build views by hand).
    pub fn with(mut self, count: Count, n: u64) -> Self {
        self.0[count.index()] = n;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_count_adds_up_on_its_own() {
        let c = Counts::default();
        c.add(Count::Received, 3);
        c.add(Count::Received, 2);
        c.add(Count::StaleRejected, 1);
        assert_eq!(c.get(Count::Received), 5);
        assert_eq!(c.get(Count::StaleRejected), 1);
        assert_eq!(c.get(Count::Accepted), 0);
    }

    #[test]
    fn gap_seconds_add_up_and_ignore_values_a_counter_cannot_take() {
        let c = Counts::default();
        assert_eq!(c.gap_seconds(), 0.0);
        c.add_gap_seconds(1.5);
        c.add_gap_seconds(-4.0);
        c.add_gap_seconds(f64::NAN);
        c.add_gap_seconds(2.25);
        assert_eq!(c.gap_seconds(), 3.75);
    }

    #[test]
    fn every_count_has_its_own_per_monitor_counter_metric() {
        let metrics: std::collections::BTreeSet<_> =
            Count::ALL.iter().map(|c| c.metric()).collect();
        assert_eq!(metrics.len(), Count::ALL.len());
        for (i, c) in Count::ALL.iter().enumerate() {
            assert_eq!(c.index(), i);
            assert!(c.metric().per_monitor(), "{:?}", c.metric());
            assert_eq!(c.metric().kind(), super::super::names::Kind::Counter);
        }
    }
}
