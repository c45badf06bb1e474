//! The recovery invariants, as pure functions over what a run recorded.
//!
//! A run records its observations (the database's write audit, the final
//! tables, samples taken while it ran, the workers' logs, the faults it
//! injected); [`check`] turns them into one [`Verdict`] per invariant. Nothing
//! here does IO, so each invariant is unit-tested with a deliberately broken
//! history that it must reject.
//!
//! Layout: `observations` (what a run records, and the timing allowances),
//! `fencing` (a), `evidence` (b, c), `counts` (d), `coverage` (e),
//! `logs` (f, g), `alarms` (h, i), `owners` (j). Shared here: the verdict,
//! the pairing of each restore with the commit that made it effective, and
//! interval arithmetic.

mod alarms;
mod counts;
mod coverage;
mod evidence;
mod fencing;
mod logs;
mod observations;
mod owners;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use uuid::Uuid;

pub use self::observations::{
    AlarmRow, Coverage, Gap, Limits, Observations, Op, Outage, OutageKind, ProcessLog, Replay,
    Restore, ResultRow, StatusSample, Table, Write,
};

pub type Ts = DateTime<Utc>;

/// The outcome of one invariant.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub name: &'static str,
    pub passed: u64,
    pub failed: u64,
    /// The first failures, each saying what, where and when.
    pub failures: Vec<String>,
}

/// Failures kept per invariant; the count goes on.
const KEPT_FAILURES: usize = 20;

impl Verdict {
    fn new(name: &'static str) -> Self {
        Self {
            name,
            passed: 0,
            failed: 0,
            failures: Vec::new(),
        }
    }

    fn pass(&mut self) {
        self.passed += 1;
    }

    fn fail(&mut self, why: String) {
        self.failed += 1;
        if self.failures.len() < KEPT_FAILURES {
            self.failures.push(why);
        }
    }

    fn expect(&mut self, ok: bool, why: impl FnOnce() -> String) {
        if ok { self.pass() } else { self.fail(why()) }
    }

    /// A verdict with nothing checked proves nothing: it fails.
    fn vacuous_fails(mut self, what: &str) -> Self {
        if self.passed + self.failed == 0 {
            self.fail(format!("nothing to check: the run recorded no {what}"));
        }
        self
    }
}

/// Every invariant, in report order.
pub fn check(obs: &Observations) -> Vec<Verdict> {
    vec![
        fencing::no_write_after_successor(obs),
        evidence::no_committed_evidence_lost(obs),
        evidence::no_duplicate_evidence(obs),
        counts::processed_never_goes_back(obs),
        coverage::every_interruption_is_a_gap(obs),
        logs::no_panic(obs),
        logs::every_monitor_resumed(obs),
        alarms::no_orphaned_open_alarm(obs),
        alarms::alarm_numbers_unique(obs),
        owners::never_unowned_for_long(obs),
        logs::offset_clocks_noticed(obs),
        owners::every_replay_reported(obs),
    ]
}

/// The `application_name` of the driver's own replay and repair writes.
pub const REPLAY_WRITER: &str = "radar-chaos-replay";

/// The writes of each monitor by radar workers, in commit order. The
/// driver's replay and its repair are left out: the repair puts back
/// exactly the row the replay overwrote, so without both the chain of
/// signatures is the workers' own.
fn writes_by_monitor(obs: &Observations) -> BTreeMap<Uuid, Vec<&Write>> {
    let mut by: BTreeMap<Uuid, Vec<&Write>> = BTreeMap::new();
    for w in obs.writes.iter().filter(|w| w.writer != REPLAY_WRITER) {
        by.entry(w.monitor).or_default().push(w);
    }
    for writes in by.values_mut() {
        writes.sort_by_key(|w| w.seq);
    }
    by
}

/// A restore that took effect: its worker's next checkpoint of that monitor
/// committed. `replaced` is the checkpoint that commit replaced.
#[derive(Debug, Clone, Copy)]
struct Effective<'a> {
    restore: &'a Restore,
    commit: &'a Write,
    replaced: Option<&'a Write>,
}

/// Pairs each restore with its worker's first checkpoint of the monitor
/// after it, unless the worker restored again first (its commit was refused
/// and it reloaded). Restores that never committed are left out.
fn effective_restores(obs: &Observations) -> Vec<Effective<'_>> {
    let by_monitor = writes_by_monitor(obs);
    let mut out = Vec::new();
    for r in &obs.restores {
        let Some(writes) = by_monitor.get(&r.monitor) else {
            continue;
        };
        let Some(commit) = writes
            .iter()
            .find(|w| w.table == Table::Checkpoint && w.writer == r.writer && w.at > r.at)
        else {
            continue;
        };
        let restored_again = obs.restores.iter().any(|o| {
            o.writer == r.writer && o.monitor == r.monitor && o.at > r.at && o.at < commit.at
        });
        if restored_again {
            continue;
        }
        let replaced = commit.replaced.as_ref().and_then(|sig| {
            writes
                .iter()
                .rev()
                .find(|w| w.table == Table::Checkpoint && w.seq < commit.seq && &w.signature == sig)
                .copied()
        });
        out.push(Effective {
            restore: r,
            commit,
            replaced,
        });
    }
    out
}

/// How much of `[from, to]` lies outside every gap (an open gap runs on).
fn uncovered(from: Ts, to: Ts, gaps: &[Gap]) -> chrono::Duration {
    let mut spans: Vec<(Ts, Option<Ts>)> = gaps.iter().map(|g| (g.from, g.to)).collect();
    spans.sort_by_key(|s| s.0);
    let mut cursor = from;
    let mut missing = chrono::Duration::zero();
    for (start, end) in spans {
        if cursor >= to {
            break;
        }
        if start > cursor {
            missing += start.min(to) - cursor;
        }
        match end {
            None => return missing,
            Some(end) => cursor = cursor.max(end),
        }
    }
    if to > cursor {
        missing += to - cursor;
    }
    missing
}

fn short(sig: &[u8]) -> String {
    sig.iter().take(4).map(|b| format!("{b:02x}")).collect()
}

fn ms(ts: Ts) -> String {
    ts.format("%H:%M:%S%.3f").to_string()
}
