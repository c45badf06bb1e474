//! The alignment policy of a monitor: which observations may form a frame.

use chrono::TimeDelta;
use serde::{Deserialize, Serialize};

use crate::config::FieldError;

/// Limits that decide whether observations are admitted and combined into a
/// frame. All durations are milliseconds. Every field is part of the config
/// fingerprint, so changing any of them invalidates the monitor's snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlignmentPolicy {
    /// Longest time a value may wait in a partial frame (measured on this
    /// worker's receipt clock) before it is dropped as expired.
    pub freshness_ms: u64,
    /// Largest age of an observation when it is processed: processing time
    /// minus its source timestamp, so time spent in the ingress queue counts.
    pub max_age_ms: u64,
    /// How far a source timestamp may lie ahead of this worker's clock.
    pub future_tolerance_ms: u64,
    /// Largest spread between the source timestamps within one frame.
    pub max_skew_ms: u64,
    /// A required reading that delivered nothing for this long (while
    /// connected) puts the monitor in `no_data`. Unset: `max_age_ms`, the
    /// age beyond which an observation could not be used anyway. Left out
    /// of the serialized form when unset, so existing fingerprints hold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub silence_ms: Option<u64>,
}

/// A day: no sensible alignment limit is longer, so a larger one is a unit mistake.
const MAX_POLICY_MS: u64 = 86_400_000;

impl Default for AlignmentPolicy {
    fn default() -> Self {
        Self {
            freshness_ms: 5_000,
            max_age_ms: 30_000,
            future_tolerance_ms: 2_000,
            max_skew_ms: 1_000,
            silence_ms: None,
        }
    }
}

impl AlignmentPolicy {
    /// [`Self::freshness_ms`] as a duration.
    pub fn freshness(&self) -> TimeDelta {
        millis(self.freshness_ms)
    }

    /// [`Self::max_age_ms`] as a duration.
    pub fn max_age(&self) -> TimeDelta {
        millis(self.max_age_ms)
    }

    /// [`Self::future_tolerance_ms`] as a duration.
    pub fn future_tolerance(&self) -> TimeDelta {
        millis(self.future_tolerance_ms)
    }

    /// [`Self::max_skew_ms`] as a duration.
    pub fn max_skew(&self) -> TimeDelta {
        millis(self.max_skew_ms)
    }

    /// How long a required reading may deliver nothing before the monitor
    /// is `no_data`: [`Self::silence_ms`], else [`Self::max_age_ms`].
    pub fn silence(&self) -> TimeDelta {
        millis(self.silence_ms.unwrap_or(self.max_age_ms))
    }

    /// Field errors under the given prefix (e.g. `alignment`).
    pub fn validate(&self, prefix: &str) -> Vec<FieldError> {
        let mut errors = Vec::new();
        for (name, value, may_be_zero) in [
            ("freshness_ms", self.freshness_ms, false),
            ("max_age_ms", self.max_age_ms, false),
            ("future_tolerance_ms", self.future_tolerance_ms, true),
            ("max_skew_ms", self.max_skew_ms, true),
            ("silence_ms", self.silence_ms.unwrap_or(1), false),
        ] {
            if value == 0 && !may_be_zero {
                errors.push(FieldError::new(
                    format!("{prefix}.{name}"),
                    "must be a positive number of milliseconds",
                ));
            } else if value > MAX_POLICY_MS {
                errors.push(FieldError::new(
                    format!("{prefix}.{name}"),
                    format!(
                        "{value} ms is longer than a day ({MAX_POLICY_MS} ms); is the unit right?"
                    ),
                ));
            }
        }
        errors
    }
}

/// An unvalidated policy may hold absurd values; saturate instead of panicking.
fn millis(ms: u64) -> TimeDelta {
    i64::try_from(ms)
        .ok()
        .and_then(TimeDelta::try_milliseconds)
        .unwrap_or(TimeDelta::MAX)
}
