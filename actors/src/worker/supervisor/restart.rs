//! A monitor's exit and when it may start again: transient failures wait a
//! growing delay, reset once a run lasted long enough; terminal exits are
//! never restarted in this process.

use std::time::{Duration, Instant};

use actix::prelude::*;
use radar::{
    mqtt::Backoff,
    runtime::{ExitReason, Restart},
};

use super::{Exited, Supervisor, WorkerOutcome};
use crate::monitor::MonitorExited;

/// Restart delays of a monitor whose start failed transiently.
const RESTART_BACKOFF: Backoff = Backoff {
    initial: Duration::from_secs(5),
    max: Duration::from_secs(300),
};

/// A monitor that ran this long since its last start had recovered: its
/// next failure waits the first restart delay again. Without this, every
/// failure a long-lived worker ever saw (one per database outage, say)
/// would lengthen the next wait, up to the five-minute cap.
const RECOVERED_AFTER: Duration = Duration::from_secs(60);

/// The number of the failure that just ended a run that lasted `ran_for`,
/// `previous` being the failures counted before it.
fn failure_number(previous: u32, ran_for: Duration) -> u32 {
    if ran_for >= RECOVERED_AFTER {
        1
    } else {
        previous.saturating_add(1)
    }
}

impl Handler<MonitorExited> for Supervisor {
    type Result = ();

    fn handle(&mut self, msg: MonitorExited, _: &mut Self::Context) {
        let (name, ran_for) = self
            .running
            .remove(&msg.id)
            .map(|r| (r.name, r.started.elapsed()))
            .unwrap_or_default();
        let previous = self.exited.get(&msg.id).map_or(0, |e| e.attempts);
        let attempts = failure_number(previous, ran_for);
        let retry_at = match msg.reason.restart() {
            Restart::AfterBackoff if !self.shutting_down => {
                let delay = RESTART_BACKOFF.delay(attempts - 1);
                tracing::warn!(monitor_id = %msg.id, %name, reason = %msg.reason, retry_in_s = delay.as_secs(), "Monitor failed; it will be restarted.");
                Some(Instant::now() + delay)
            }
            _ => {
                if msg.reason.is_terminal() && msg.reason != ExitReason::Stopped {
                    tracing::error!(monitor_id = %msg.id, %name, reason = %msg.reason, "Monitor ended for good in this process.");
                }
                None
            }
        };
        if self.scope.single() == Some(msg.id) && !self.shutting_down && msg.reason.is_terminal() {
            self.end(WorkerOutcome::MonitorFailed(msg.reason.clone()));
        }
        self.exited.insert(
            msg.id,
            Exited {
                reason: msg.reason,
                attempts,
                retry_at,
            },
        );
        self.settle_if_stopped();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_in_quick_succession_lengthen_the_wait() {
        let mut attempts = 0;
        for _ in 0..4 {
            attempts = failure_number(attempts, Duration::from_secs(1));
        }
        assert_eq!(attempts, 4);
        assert_eq!(RESTART_BACKOFF.delay(attempts - 1), Duration::from_secs(40));
    }

    #[test]
    fn a_monitor_that_ran_long_enough_starts_its_backoff_over() {
        let attempts = failure_number(6, RECOVERED_AFTER);
        assert_eq!(attempts, 1);
        assert_eq!(RESTART_BACKOFF.delay(attempts - 1), RESTART_BACKOFF.initial);
        assert_eq!(
            failure_number(6, RECOVERED_AFTER - Duration::from_millis(1)),
            7
        );
    }

    #[test]
    fn the_count_saturates() {
        assert_eq!(failure_number(u32::MAX, Duration::ZERO), u32::MAX);
    }
}
