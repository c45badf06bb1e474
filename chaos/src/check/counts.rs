//! (d) Processed counts never go backwards across restores, except by the
//! documented rollback to the last committed snapshot.
//!
//! Three views of the count must agree with that:
//! - the committed snapshots of a monitor, in commit order, never count
//!   fewer frames than their predecessor;
//! - every restore loaded a snapshot that was committed (same save time and
//!   count), and the worker's next commit replaced exactly that snapshot,
//!   at that count: it resumed from the last committed snapshot;
//! - the counts a worker reports in its status never drop, except across a
//!   restore of its own, and never below the count that restore loaded.

use std::collections::BTreeMap;

use super::{Observations, StatusSample, Table, Ts, Verdict, ms};

pub fn processed_never_goes_back(obs: &Observations) -> Verdict {
    let mut v = Verdict::new(
        "(d) processed counts never go backwards except by rollback to the last committed snapshot",
    );
    snapshots_never_count_fewer(obs, &mut v);
    restores_loaded_committed_snapshots(obs, &mut v);
    restores_resumed_from_their_snapshot(obs, &mut v);
    for ((monitor, writer), samples) in status_series(obs) {
        reported_counts_never_drop(obs, monitor, writer, samples, &mut v);
    }
    v.vacuous_fails("processed counts")
}

/// Each monitor's committed snapshots, in commit order, never count fewer
/// frames than their predecessor.
fn snapshots_never_count_fewer(obs: &Observations, v: &mut Verdict) {
    for (monitor, writes) in super::writes_by_monitor(obs) {
        let mut previous: Option<&super::Write> = None;
        for w in writes.into_iter().filter(|w| w.table == Table::Checkpoint) {
            if let Some(p) = previous {
                v.expect(w.processed >= p.processed, || {
                    format!(
                        "monitor {monitor}: the snapshot committed by {} at {} counts {:?} frames, its predecessor by {} counted {:?}",
                        w.writer,
                        ms(w.at),
                        w.processed,
                        p.writer,
                        p.processed
                    )
                });
            }
            previous = Some(w);
        }
    }
}

/// Every restore loaded a snapshot that a commit wrote (same save time and count).
fn restores_loaded_committed_snapshots(obs: &Observations, v: &mut Verdict) {
    for r in &obs.restores {
        let committed = obs.writes.iter().any(|w| {
            w.table == Table::Checkpoint
                && w.monitor == r.monitor
                && w.saved_at == Some(r.saved_at)
                && w.processed == Some(r.processed)
        });
        v.expect(committed, || {
            format!(
                "monitor {}: {} restored a snapshot saved {} with {} frames at {}, which no commit wrote",
                r.monitor,
                r.writer,
                ms(r.saved_at),
                r.processed,
                ms(r.at)
            )
        });
    }
}

/// A restoring worker's first commit replaced exactly the snapshot it
/// loaded, at that count.
fn restores_resumed_from_their_snapshot(obs: &Observations, v: &mut Verdict) {
    for e in super::effective_restores(obs) {
        let r = e.restore;
        let resumed = e.replaced.is_some_and(|p| p.saved_at == Some(r.saved_at))
            && e.commit.processed == Some(r.processed);
        v.expect(resumed, || {
            format!(
                "monitor {}: {} restored the snapshot saved {} ({} frames) at {}, but its first commit (#{} at {}, {:?} frames) replaced the snapshot saved {}",
                r.monitor,
                r.writer,
                ms(r.saved_at),
                r.processed,
                ms(r.at),
                e.commit.seq,
                ms(e.commit.at),
                e.commit.processed,
                e.replaced
                    .and_then(|p| p.saved_at)
                    .map_or("(none)".into(), ms),
            )
        });
    }
}

/// The status samples of each (monitor, worker).
fn status_series(obs: &Observations) -> BTreeMap<(uuid::Uuid, &str), Vec<&StatusSample>> {
    let mut series: BTreeMap<(uuid::Uuid, &str), Vec<&StatusSample>> = BTreeMap::new();
    for s in &obs.status {
        series
            .entry((s.monitor, s.writer.as_str()))
            .or_default()
            .push(s);
    }
    series
}

/// The counts one worker reports for one monitor never drop, except across
/// a restore of its own, and never below the count that restore loaded.
fn reported_counts_never_drop(
    obs: &Observations,
    monitor: uuid::Uuid,
    writer: &str,
    mut samples: Vec<&StatusSample>,
    v: &mut Verdict,
) {
    // While the driver holds a replayed row in place, every start refuses
    // it and writes the refusal without owning the monitor: such a status
    // row keeps the count it had (an unowned write cannot know how far the
    // monitor got), so its count is not this writer's.
    samples.retain(|s| !during_replay(obs, monitor, s.heartbeat_at));
    samples.sort_by_key(|s| s.heartbeat_at);
    samples.dedup_by_key(|s| (s.heartbeat_at, s.processed));
    let restores: Vec<_> = obs
        .restores
        .iter()
        .filter(|r| r.monitor == monitor && r.writer == writer)
        .collect();
    let mut previous: Option<&StatusSample> = None;
    for s in samples {
        // The newest restore of this worker before the heartbeat.
        let base = restores
            .iter()
            .filter(|r| r.at <= s.heartbeat_at)
            .max_by_key(|r| r.at);
        let above_base = base.is_none_or(|r| s.processed >= r.processed);
        let monotone = previous.is_none_or(|p| {
            s.processed >= p.processed || base.is_some_and(|r| r.at > p.heartbeat_at)
        });
        v.expect(above_base && monotone, || {
            format!(
                "monitor {monitor}: {writer} reported {} frames at {} after {} at {} (its last restore: {})",
                s.processed,
                ms(s.heartbeat_at),
                previous.map_or(0, |p| p.processed),
                previous.map_or("-".into(), |p| ms(p.heartbeat_at)),
                base.map_or("none".into(), |r| format!(
                    "{} frames at {}",
                    r.processed,
                    ms(r.at)
                )),
            )
        });
        previous = Some(s);
    }
}

/// Whether `at` falls between a replay of `monitor`'s row and the driver's
/// repair of it (to the end of the run if it was never repaired).
fn during_replay(obs: &Observations, monitor: uuid::Uuid, at: Ts) -> bool {
    obs.replays
        .iter()
        .filter(|r| r.monitor == monitor)
        .any(|r| r.at <= at && r.repaired_at.is_none_or(|end| at <= end))
}
