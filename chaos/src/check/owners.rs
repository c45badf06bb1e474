//! (j) No monitor is left without a live owner for longer than
//! [`UNOWNED_BOUND`]. Every status sample of a monitor is judged by the age
//! of its heartbeat at the moment the driver read it (heartbeats are
//! stamped on the database's clock, which the driver shares). A heartbeat
//! cannot be written while PostgreSQL is down, and every start after an
//! outage may wait out the supervisor's restart backoff, so samples up to
//! [`AFTER_OUTAGE`] after a database outage are not judged.

use std::time::Duration;

use super::{Observations, OutageKind, Verdict, ms};

/// A replayed row is reported by the next start, which comes once the
/// owner's refused monitor has been silent for the take-back delay.
pub const REPLAY_REPORTED_WITHIN: Duration = Duration::from_secs(120);

/// The stated bound: a lost monitor is taken back once its owner has been
/// silent for 35 s (one 5 s poll later), a killed worker is replaced within
/// 3 s and restores in a few seconds; a live owner's idle row is up to 10 s
/// old (refreshed every 10 s); 60 s leaves room for a loaded host.
pub const UNOWNED_BOUND: Duration = Duration::from_secs(60);
/// After a database outage, starts that failed wait out a restart backoff
/// (5 s, doubling) before they are tried again.
pub const AFTER_OUTAGE: Duration = Duration::from_secs(90);

pub fn never_unowned_for_long(obs: &Observations) -> Verdict {
    let mut v = Verdict::new("(j) no monitor without a live owner for longer than 60 s");
    let bound = chrono::Duration::from_std(UNOWNED_BOUND).unwrap_or(chrono::Duration::MAX);
    let after = chrono::Duration::from_std(AFTER_OUTAGE).unwrap_or(chrono::Duration::MAX);
    for s in &obs.status {
        let Some(at) = s.sampled_at else {
            continue;
        };
        let excused = obs
            .outages
            .iter()
            .filter(|o| o.kind == OutageKind::Database)
            .any(|o| at >= o.from && at <= o.to + after);
        // From a replay until its repair and the restart after it, the
        // monitor has no owner by design.
        let replayed = obs.replays.iter().any(|r| {
            r.monitor == s.monitor && at >= r.at && r.repaired_at.is_none_or(|t| at <= t + bound)
        });
        if excused || replayed {
            continue;
        }
        let age = at - s.heartbeat_at;
        v.expect(age <= bound, || {
            format!(
                "monitor {}: at {} its last heartbeat ({}, by {}) was {:.1} s old",
                s.monitor,
                ms(at),
                ms(s.heartbeat_at),
                s.writer,
                age.num_milliseconds() as f64 / 1000.0
            )
        });
    }
    v.vacuous_fails("status samples outside database outages")
}

pub fn every_replay_reported(obs: &Observations) -> Verdict {
    let mut v = Verdict::new("(k) every refused replay reported");
    let within =
        chrono::Duration::from_std(REPLAY_REPORTED_WITHIN).unwrap_or(chrono::Duration::MAX);
    for r in &obs.replays {
        v.expect(r.reported_at.is_some_and(|t| t - r.at <= within), || match r.reported_at {
            Some(t) => format!(
                "monitor {}: an older signed row written back at {} was reported as replayed only at {} ({:.1} s later)",
                r.monitor,
                ms(r.at),
                ms(t),
                (t - r.at).num_milliseconds() as f64 / 1000.0
            ),
            None => format!(
                "monitor {}: an older signed row written back at {} was never reported as replayed in its status",
                r.monitor,
                ms(r.at)
            ),
        });
    }
    v.vacuous_fails("replayed rows")
}
