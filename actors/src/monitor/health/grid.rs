//! When a monitor's periodic beats fall: on a grid shared by every monitor
//! of the process.

use std::{sync::OnceLock, time::Duration};

use uuid::Uuid;

use super::HEARTBEAT;

/// When a monitor's periodic beats fall: on a grid of [`HEARTBEAT`]s
/// shared by every monitor of the process, offset by a whole second for
/// half of them (by id), the first after `now` by at most one [`HEARTBEAT`].
/// Every monitor still beats every [`HEARTBEAT`], but one timer wakeup
/// serves half the monitors instead of one wakeup each (a wakeup per
/// monitor was much of an idle worker's CPU), and the worker's flush
/// still writes about half of them each second.
pub fn first_beat(service_id: Uuid, now: tokio::time::Instant) -> tokio::time::Instant {
    static GRID: OnceLock<tokio::time::Instant> = OnceLock::new();
    let grid = *GRID.get_or_init(|| now);
    let half = HEARTBEAT / 2;
    let offset = if service_id.as_u128() & 1 == 1 {
        half
    } else {
        Duration::ZERO
    };
    let start = grid + offset;
    if now < start {
        return start;
    }
    // How far into its current cycle the grid is: less than a HEARTBEAT.
    let into = (now - start).as_nanos() % HEARTBEAT.as_nanos();
    now + (HEARTBEAT - Duration::from_nanos(u64::try_from(into).unwrap_or(0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every monitor beats at most one `HEARTBEAT` after it starts (its
    /// status row stays as fresh as with a timer of its own), and monitors
    /// share two instants per cycle, one second apart.
    #[test]
    fn beats_fall_on_two_shared_instants_at_most_one_heartbeat_away() {
        let even = Uuid::from_u128(2);
        let odd = Uuid::from_u128(3);
        let base = tokio::time::Instant::now();
        // The grid is the process's: its origin is whatever the first call saw.
        let origin = first_beat(even, base);
        assert!(origin > base && origin <= base + HEARTBEAT);
        for step_ms in [0u64, 1, 250, 999, 1000, 1001, 1999, 2000, 2001, 7777] {
            let now = base + Duration::from_millis(step_ms);
            let a = first_beat(even, now);
            let b = first_beat(odd, now);
            for (at, label) in [(a, "even"), (b, "odd")] {
                assert!(at > now, "{label} at {step_ms} ms: not after now");
                assert!(
                    at <= now + HEARTBEAT,
                    "{label} at {step_ms} ms: later than one heartbeat"
                );
            }
            let apart = if a > b { a - b } else { b - a };
            assert_eq!(
                apart.as_millis() % HEARTBEAT.as_millis(),
                (HEARTBEAT / 2).as_millis(),
                "at {step_ms} ms: the two halves are not one second apart"
            );
            assert_eq!(
                (a - origin).as_nanos() % HEARTBEAT.as_nanos(),
                0,
                "at {step_ms} ms: off the grid"
            );
            assert_eq!(
                first_beat(Uuid::from_u128(4), now),
                a,
                "same half, same instant"
            );
        }
    }
}
