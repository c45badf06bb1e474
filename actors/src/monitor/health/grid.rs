//! When a monitor's periodic beats fall: on a grid shared by every monitor
//! of the process, beaten by the worker's driver.

use std::time::Duration;

use uuid::Uuid;

use super::HEARTBEAT;

/// How often the driver ticks: each tick beats one half of the monitors,
/// so every monitor beats every [`HEARTBEAT`]; the worker's flush writes
/// the beaten monitors whose record changed and the idle ones whose row is
/// due for a refresh (`REFRESH_EVERY`).
pub const TICK: Duration = Duration::from_secs(HEARTBEAT.as_secs() / 2);

/// The half of the monitors `service_id` belongs to, by id.
pub fn half(service_id: Uuid) -> usize {
    usize::from(service_id.as_u128() & 1 == 1)
}

/// The half a driver that started at `origin` beats on its tick at `at`:
/// the halves take turns, so each half's ticks are one [`HEARTBEAT`] apart.
pub fn half_at(origin: tokio::time::Instant, at: tokio::time::Instant) -> usize {
    let ticks = at.saturating_duration_since(origin).as_nanos() / TICK.as_nanos();
    usize::from(ticks % 2 == 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each half of the monitors is beaten on every other tick, so each
    /// monitor beats once per `HEARTBEAT` (its status row stays as fresh as
    /// with a timer of its own), and both halves of the ids are served.
    #[test]
    fn each_half_is_beaten_once_per_heartbeat_and_the_halves_alternate() {
        assert_eq!(TICK * 2, HEARTBEAT);
        let origin = tokio::time::Instant::now();
        let mut last = [None::<tokio::time::Instant>; 2];
        for k in 1..=10u32 {
            let at = origin + TICK * k;
            let h = half_at(origin, at);
            assert_ne!(
                half_at(origin, at + TICK),
                h,
                "tick {k}: the next tick beats the same half"
            );
            if let Some(before) = last[h] {
                assert_eq!(at - before, HEARTBEAT, "tick {k}: half {h}");
            }
            last[h] = Some(at);
        }
        assert!(last.iter().all(Option::is_some), "a half is never beaten");
        assert_eq!(half(Uuid::from_u128(2)), half(Uuid::from_u128(4)));
        assert_ne!(half(Uuid::from_u128(2)), half(Uuid::from_u128(3)));
    }
}
