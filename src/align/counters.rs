//! What alignment did with each observation, counted cumulatively (the
//! counters go into the snapshot and into metrics).

use std::fmt;

use serde::{Deserialize, Serialize};

/// Why alignment discarded an observation or a held value.
/// `as_str()` gives the stable `reason` label of the rejection metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AlignRejection {
    /// The observation names a reading index the monitor does not have.
    UnknownReading,
    /// At or below its reading's watermark: already seen, or replayed.
    Stale,
    /// Its source timestamp lies further ahead of its receipt time than the
    /// future tolerance allows.
    Future,
    /// Older than the maximum age when processed (queue time included).
    TooOld,
    /// A held value waited longer than the freshness limit for the rest of
    /// its frame.
    Expired,
    /// A value lay further behind the newest value of the partial frame than
    /// the maximum skew: either the incoming observation (rejected) or a held
    /// value (dropped).
    Skew,
}

impl AlignRejection {
    /// Every reason, for registering metric series up front.
    pub const ALL: [AlignRejection; 6] = [
        Self::UnknownReading,
        Self::Stale,
        Self::Future,
        Self::TooOld,
        Self::Expired,
        Self::Skew,
    ];

    /// The stable metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::UnknownReading => "unknown_reading",
            Self::Stale => "stale",
            Self::Future => "future",
            Self::TooOld => "too_old",
            Self::Expired => "expired",
            Self::Skew => "skew",
        }
    }
}

impl fmt::Display for AlignRejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Cumulative alignment counters. All counts saturate instead of wrapping.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct AlignmentCounters {
    /// Observations that passed admission (required and optional readings).
    pub accepted: u64,
    /// Held values replaced by a newer observation of the same reading
    /// before their frame completed.
    pub superseded: u64,
    /// Frames emitted.
    pub frames: u64,
    pub unknown_reading: u64,
    pub stale: u64,
    pub future: u64,
    pub too_old: u64,
    pub expired: u64,
    pub skew: u64,
}

impl AlignmentCounters {
    /// The count of one reason.
    pub fn rejected(&self, reason: AlignRejection) -> u64 {
        match reason {
            AlignRejection::UnknownReading => self.unknown_reading,
            AlignRejection::Stale => self.stale,
            AlignRejection::Future => self.future,
            AlignRejection::TooOld => self.too_old,
            AlignRejection::Expired => self.expired,
            AlignRejection::Skew => self.skew,
        }
    }

    /// Sum over every reason.
    pub fn rejected_total(&self) -> u64 {
        AlignRejection::ALL
            .iter()
            .fold(0u64, |sum, &r| sum.saturating_add(self.rejected(r)))
    }

    pub(crate) fn count(&mut self, reason: AlignRejection) {
        let slot = match reason {
            AlignRejection::UnknownReading => &mut self.unknown_reading,
            AlignRejection::Stale => &mut self.stale,
            AlignRejection::Future => &mut self.future,
            AlignRejection::TooOld => &mut self.too_old,
            AlignRejection::Expired => &mut self.expired,
            AlignRejection::Skew => &mut self.skew,
        };
        *slot = slot.saturating_add(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_reason_counts_into_its_own_field_and_labels_match_serde() {
        let mut counters = AlignmentCounters::default();
        for (n, reason) in AlignRejection::ALL.into_iter().enumerate() {
            for _ in 0..=n {
                counters.count(reason);
            }
            let json = serde_json::to_string(&reason).unwrap();
            assert_eq!(json, format!("\"{}\"", reason.as_str()));
        }
        for (n, reason) in AlignRejection::ALL.into_iter().enumerate() {
            assert_eq!(counters.rejected(reason), n as u64 + 1, "{reason}");
        }
        assert_eq!(counters.rejected_total(), 21);
    }

    #[test]
    fn counters_saturate_instead_of_wrapping() {
        let mut counters = AlignmentCounters {
            stale: u64::MAX,
            ..Default::default()
        };
        counters.count(AlignRejection::Stale);
        assert_eq!(counters.stale, u64::MAX);
    }
}
