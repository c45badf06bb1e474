//! The reconnect schedule: how long the reconnect owner waits before each
//! attempt. Pure, so tests can shrink it and check the production values.

use std::time::Duration;

/// An exponential schedule: `initial`, doubled per failed attempt, capped at
/// `max`, with no attempt limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    pub initial: Duration,
    pub max: Duration,
}

impl Backoff {
    /// The production schedule: 5 s, 10 s, 20 s, ... capped at 5 minutes.
    pub const PRODUCTION: Backoff = Backoff {
        initial: Duration::from_secs(5),
        max: Duration::from_secs(300),
    };

    /// The wait before attempt number `attempt` (0-based) of one outage.
    /// Saturates instead of overflowing, however many attempts have failed.
    pub fn delay(&self, attempt: u32) -> Duration {
        let factor = 1u32.checked_shl(attempt).unwrap_or(u32::MAX);
        self.initial.saturating_mul(factor).min(self.max)
    }
}

impl Default for Backoff {
    fn default() -> Self {
        Self::PRODUCTION
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn production_schedule_doubles_from_five_seconds_to_five_minutes() {
        let secs: Vec<u64> = (0..10)
            .map(|a| Backoff::PRODUCTION.delay(a).as_secs())
            .collect();
        assert_eq!(secs, [5, 10, 20, 40, 80, 160, 300, 300, 300, 300]);
    }

    #[test]
    fn production_schedule_has_no_attempt_limit() {
        for attempt in [11, 31, 32, 33, 64, 1_000, u32::MAX] {
            assert_eq!(Backoff::PRODUCTION.delay(attempt), Duration::from_secs(300));
        }
    }

    #[test]
    fn a_shrunk_schedule_keeps_the_same_shape() {
        let b = Backoff {
            initial: Duration::from_millis(50),
            max: Duration::from_millis(300),
        };
        let ms: Vec<u128> = (0..6).map(|a| b.delay(a).as_millis()).collect();
        assert_eq!(ms, [50, 100, 200, 300, 300, 300]);
    }

    proptest! {
        #[test]
        fn delay_never_exceeds_max_and_never_shrinks(
            initial_ms in 0u64..10_000_000,
            max_ms in 0u64..100_000_000,
            attempt in 0u32..u32::MAX,
        ) {
            let b = Backoff {
                initial: Duration::from_millis(initial_ms),
                max: Duration::from_millis(max_ms),
            };
            let here = b.delay(attempt);
            let next = b.delay(attempt.saturating_add(1));
            prop_assert!(here <= b.max);
            prop_assert!(next >= here);
            prop_assert_eq!(b.delay(0), b.initial.min(b.max));
        }

        #[test]
        fn delay_does_not_overflow_with_huge_durations(
            initial_s in 0u64..u64::MAX,
            attempt in 0u32..200,
        ) {
            let b = Backoff { initial: Duration::from_secs(initial_s), max: Duration::MAX };
            prop_assert!(b.delay(attempt) >= b.initial);
        }
    }
}
