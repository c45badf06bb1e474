//! (e) Every restart and outage is reported as a coverage gap.
//!
//! Windows during which a monitor cannot have watched its stream, each of
//! which the final coverage history must cover with gaps (up to the slack):
//! - a restart: from the save time of the snapshot a worker restored to the
//!   restore (what happened in between was rolled back or never seen), or
//!   to where a broker blackhole began whose held-back frames could still
//!   reach the broker after the restore (see `restart_window_end`);
//! - a broker outage, once the workers could notice it;
//! - a database outage longer than the checkpoint timeout, from when the
//!   model must have stopped advancing: the timeout (plus detection) after
//!   the outage began, or after frames could flow again when the broker was
//!   down or its link blackholed too (without input nothing is left
//!   uncommitted, so nothing stalls).
//!
//! Windows are clipped to the history's covered span (a monitor reports
//! nothing before its first or after its newest frame) and to the part of
//! the list that was not folded into totals. The history must also count
//! exactly the restores that took effect.

use std::collections::BTreeMap;

use super::{Coverage, Observations, OutageKind, Ts, Verdict, ms};

/// Per monitor, the windows the coverage history must show as gaps: from,
/// to and what happened.
type Windows = BTreeMap<uuid::Uuid, Vec<(Ts, Ts, String)>>;

pub fn every_interruption_is_a_gap(obs: &Observations) -> Verdict {
    let mut v = Verdict::new("(e) every restart and outage reported as a coverage gap");
    let (mut windows, effective) = restart_windows(obs);
    add_outage_windows(obs, &mut windows);
    let slack = chrono::Duration::from_std(obs.limits.slack).unwrap_or_default();
    let empty = Coverage::default();
    for m in &obs.monitors {
        let coverage = obs.coverage.get(m).unwrap_or(&empty);
        let expected = effective.get(m).copied().unwrap_or(0);
        let own = windows.get(m).map(Vec::as_slice).unwrap_or_default();
        monitor_shows_its_gaps(*m, coverage, own, expected, slack, &mut v);
    }
    v.vacuous_fails("monitors")
}

/// The restart window of every restore that took effect, and how many took
/// effect per monitor.
fn restart_windows(obs: &Observations) -> (Windows, BTreeMap<uuid::Uuid, u64>) {
    let mut windows: Windows = BTreeMap::new();
    let mut effective: BTreeMap<uuid::Uuid, u64> = BTreeMap::new();
    for e in super::effective_restores(obs) {
        let r = e.restore;
        *effective.entry(r.monitor).or_default() += 1;
        windows.entry(r.monitor).or_default().push((
            r.saved_at,
            restart_window_end(obs, r.at),
            format!(
                "restart: {} restored the snapshot saved {}",
                r.writer,
                ms(r.saved_at)
            ),
        ));
    }
    (windows, effective)
}

/// Adds every outage's window, from when the workers must have noticed it,
/// to each monitor's windows.
fn add_outage_windows(obs: &Observations, windows: &mut Windows) {
    for o in &obs.outages {
        let Some(from) = outage_window_start(obs, o) else {
            continue;
        };
        if from >= o.to {
            continue;
        }
        for m in &obs.monitors {
            windows
                .entry(*m)
                .or_default()
                .push((from, o.to, o.what.clone()));
        }
    }
}

/// Where an outage's window begins; none for a blackholed link.
fn outage_window_start(obs: &Observations, o: &super::Outage) -> Option<Ts> {
    let limits = obs.limits;
    let timeout = chrono::Duration::from_std(limits.checkpoint_timeout + limits.stall_detection)
        .unwrap_or(chrono::Duration::MAX);
    let detection = chrono::Duration::from_std(limits.outage_detection).unwrap_or_default();
    let reconnect = chrono::Duration::from_std(limits.reconnect).unwrap_or_default();
    Some(match o.kind {
        // Shorter than the keep-alive: TCP delivers what was dropped
        // once the link is back, so nothing is lost and no gap is due.
        OutageKind::BrokerLink => return None,
        OutageKind::Broker => o.from + detection,
        // The model stops a timeout after the first checkpoint that
        // cannot commit started. While the broker is down nothing
        // changes and no checkpoint is due, so that clock starts once
        // frames can flow again.
        // A blackholed link stops frames just the same; they flow
        // again once TCP retransmits what it held (see
        // `link_delivers_again`).
        OutageKind::Database => {
            let flowing = obs
                .outages
                .iter()
                .filter(|b| b.from < o.to && b.to > o.from)
                .filter_map(|b| match b.kind {
                    OutageKind::Broker => Some(b.to + reconnect),
                    OutageKind::BrokerLink => Some(link_delivers_again(b)),
                    OutageKind::Database => None,
                })
                .fold(o.from, Ts::max);
            flowing + timeout
        }
    })
}

/// One monitor's history covers each of its windows (clipped to the covered
/// span) with gaps up to the slack, and counts the restores that took effect.
fn monitor_shows_its_gaps(
    m: uuid::Uuid,
    coverage: &Coverage,
    windows: &[(Ts, Ts, String)],
    expected: u64,
    slack: chrono::Duration,
    v: &mut Verdict,
) {
    let (Some(first), Some(last)) = (coverage.covered_from, coverage.covered_to) else {
        v.fail(format!(
            "monitor {m}: its final snapshot has no covered span"
        ));
        return;
    };
    let complete = coverage.complete_from.map_or(first, |c| c.max(first));
    for (from, to, what) in windows {
        let (from, to) = ((*from).max(complete), (*to).min(last));
        if from >= to {
            continue;
        }
        let missing = super::uncovered(from, to, &coverage.gaps);
        v.expect(missing <= slack, || {
            format!(
                "monitor {m}: {what}: {:.1} s of {} .. {} are shown as watched; gaps: {}",
                missing.as_seconds_f64(),
                ms(from),
                ms(to),
                describe(coverage, from, to)
            )
        });
    }
    v.expect(coverage.restores == expected, || {
        format!(
            "monitor {m}: its history counts {} restores, but {expected} restores took effect",
            coverage.restores
        )
    });
}

/// Where a restart window ends: at the restore, unless frames with older
/// source times could still reach the broker after it. A restored worker
/// subscribes only after the restore (clean session, nothing retained), so
/// it sees exactly the frames that reach the broker afterwards, and the
/// product dates the end of its gap at the first one's source time. The
/// publisher timestamps a frame when it hands it over; a blackholed link
/// (no reset, the publisher stays connected) holds every frame since the
/// blackhole began and TCP delivers them late: its retransmission timer
/// doubles, so the first retransmission after the link is back can come
/// up to the blackhole's length later (plus a second for the minimum
/// timeout and the broker). Frames from such a blackhole are watched, not
/// missed, so the window ends where the blackhole began.
fn restart_window_end(obs: &Observations, restored_at: Ts) -> Ts {
    obs.outages
        .iter()
        .filter(|b| b.kind == OutageKind::BrokerLink && b.from < restored_at)
        .filter(|b| restored_at < link_delivers_again(b))
        .map(|b| b.from)
        .fold(restored_at, Ts::min)
}

/// By when the frames a blackholed link held back have all reached the
/// broker: TCP's retransmission timer doubles while the link is dead, so
/// its first retransmission after the link is back comes up to the
/// blackhole's length later, plus a second for the minimum timeout and
/// the broker.
fn link_delivers_again(b: &super::Outage) -> Ts {
    b.to + (b.to - b.from) + chrono::Duration::seconds(1)
}

/// The gaps near a window, for the failure message.
fn describe(c: &Coverage, from: Ts, to: Ts) -> String {
    let margin = chrono::Duration::seconds(10);
    let near: Vec<String> = c
        .gaps
        .iter()
        .filter(|g| g.from <= to + margin && g.to.is_none_or(|end| end >= from - margin))
        .map(|g| {
            format!(
                "{} {}..{}",
                g.cause,
                ms(g.from),
                g.to.map_or("open".into(), ms)
            )
        })
        .collect();
    if near.is_empty() {
        "none nearby".into()
    } else {
        near.join(", ")
    }
}
