//! How long a monitor waits before writing again after a failed write.
//! Pure: the caller passes the clock.
//!
//! Without a pause, a monitor retries on every incoming batch during a
//! database outage (about 14 attempts per second at 10 frames per second),
//! and a fleet would hammer the database as it recovers. The pause starts
//! at one second and doubles up to a cap; the first commit resets it.

use std::time::{Duration, Instant};

/// The first pause after a failed write.
pub const FIRST_RETRY: Duration = Duration::from_secs(1);

/// Pauses between failed writes: 1 s, doubling, at most `cap`.
#[derive(Debug, Clone)]
pub struct RetryBackoff {
    cap: Duration,
    /// The pause after the most recent failure, if the last write failed.
    current: Option<Duration>,
    until: Option<Instant>,
}

impl RetryBackoff {
    /// `cap` is clamped to at least the first pause.
    pub fn new(cap: Duration) -> Self {
        Self {
            cap: cap.max(FIRST_RETRY),
            current: None,
            until: None,
        }
    }

    /// A write failed at `now`: returns how long to wait before the next.
    pub fn failed(&mut self, now: Instant) -> Duration {
        let pause = match self.current {
            None => FIRST_RETRY,
            Some(previous) => previous.saturating_mul(2),
        }
        .min(self.cap);
        self.current = Some(pause);
        self.until = Some(now + pause);
        pause
    }

    /// A write committed: the next failure starts from the first pause.
    pub fn succeeded(&mut self) {
        self.current = None;
        self.until = None;
    }

    /// True when a write may be tried at `now`.
    pub fn ready(&self, now: Instant) -> bool {
        self.until.is_none_or(|until| now >= until)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_double_from_one_second_up_to_the_cap() {
        let t0 = Instant::now();
        let mut b = RetryBackoff::new(Duration::from_secs(5));
        let pauses: Vec<u64> = (0..6).map(|_| b.failed(t0).as_secs()).collect();
        assert_eq!(pauses, [1, 2, 4, 5, 5, 5]);
    }

    #[test]
    fn no_write_is_ready_before_the_pause_ends() {
        let t0 = Instant::now();
        let mut b = RetryBackoff::new(Duration::from_secs(30));
        assert!(b.ready(t0), "nothing failed yet");
        b.failed(t0);
        b.failed(t0 + Duration::from_secs(1));
        assert!(!b.ready(t0 + Duration::from_millis(2999)));
        assert!(b.ready(t0 + Duration::from_secs(3)));
    }

    #[test]
    fn a_commit_resets_the_pause() {
        let t0 = Instant::now();
        let mut b = RetryBackoff::new(Duration::from_secs(30));
        b.failed(t0);
        b.failed(t0);
        b.succeeded();
        assert!(b.ready(t0));
        assert_eq!(b.failed(t0), FIRST_RETRY);
    }

    #[test]
    fn a_cap_below_the_first_pause_is_raised_to_it() {
        let t0 = Instant::now();
        let mut b = RetryBackoff::new(Duration::from_millis(10));
        assert_eq!(b.failed(t0), FIRST_RETRY);
        assert_eq!(b.failed(t0), FIRST_RETRY);
    }

    #[test]
    fn an_eighty_second_outage_costs_a_handful_of_attempts_not_one_per_batch() {
        // Batches every 100 ms for 80 s, each one tries if the pause allows.
        let t0 = Instant::now();
        let mut b = RetryBackoff::new(Duration::from_secs(30));
        let attempts = (0..800)
            .map(|i| t0 + Duration::from_millis(100 * i))
            .filter(|&now| {
                let ready = b.ready(now);
                if ready {
                    b.failed(now);
                }
                ready
            })
            .count();
        assert!(attempts <= 8, "{attempts} attempts");
    }
}
