//! The recovery invariants, as pure functions over what a run recorded.
//!
//! A run records its observations (the database's write audit, the final
//! tables, samples taken while it ran, the workers' logs, the faults it
//! injected); [`check`] turns them into one [`Verdict`] per invariant. Nothing
//! here does IO, so each invariant is unit-tested with a deliberately broken
//! history that it must reject.
//!
//! Layout: `fencing` (a), `evidence` (b, c), `counts` (d), `coverage` (e),
//! `logs` (f, g), `alarms` (h, i), `owners` (j). Shared here: the observation types, the pairing of each
//! restore with the commit that made it effective, and interval arithmetic.

mod alarms;
mod counts;
mod coverage;
mod evidence;
mod fencing;
mod logs;
mod owners;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

pub type Ts = DateTime<Utc>;

/// Which audited table a write went to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Table {
    Checkpoint,
    Evidence,
    Alarm,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Op {
    Insert,
    Update,
    Delete,
}

/// One committed row write, as the audit trigger recorded it inside the
/// writing transaction (so rolled-back writes leave no trace). `seq` orders
/// the writes of one monitor in commit order: every write of a monitor
/// holds its snapshot row's lock until it commits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Write {
    pub seq: i64,
    pub table: Table,
    pub op: Op,
    pub monitor: Uuid,
    /// The session's `application_name`: the worker process that wrote it
    /// (set by the driver in each worker's database URL, not by radar).
    pub writer: String,
    pub txid: i64,
    /// Checkpoint: the row's new signature; evidence and alarms: the
    /// `writer_signature` they were written under.
    pub signature: Vec<u8>,
    /// Checkpoint updates: the signature the write replaced.
    pub replaced: Option<Vec<u8>>,
    pub processed: Option<i64>,
    pub saved_at: Option<Ts>,
    /// Evidence: the frame's source time; alarms: the opening frame's.
    pub frame_ts: Option<Ts>,
    pub score: Option<f64>,
    pub at: Ts,
}

/// One row of `radar_evidence` (or `radar_alarms`, with `frame_ts` the
/// opening frame and `score` the peak).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResultRow {
    pub monitor: Uuid,
    pub frame_ts: Ts,
    pub score: f64,
    pub signature: Vec<u8>,
}

/// A worker's "Snapshot restored" log line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Restore {
    pub writer: String,
    pub monitor: Uuid,
    pub at: Ts,
    pub processed: i64,
    pub saved_at: Ts,
}

/// One `radar status --json` row as sampled during the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatusSample {
    pub monitor: Uuid,
    pub writer: String,
    pub heartbeat_at: Ts,
    pub processed: i64,
    /// When the driver read it (the driver, the workers and PostgreSQL
    /// share the host's clock).
    #[serde(default)]
    pub sampled_at: Option<Ts>,
}

/// One row of `radar_alarms` at the end of the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AlarmRow {
    pub monitor: Uuid,
    pub seq: i64,
    pub opened_at: Ts,
    pub closed_at: Option<Ts>,
}

/// One gap of a monitor's final coverage history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Gap {
    pub cause: String,
    pub from: Ts,
    /// `None`: still open.
    pub to: Option<Ts>,
}

/// A monitor's coverage history from its last committed snapshot.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Coverage {
    pub covered_from: Option<Ts>,
    pub covered_to: Option<Ts>,
    pub gaps: Vec<Gap>,
    /// Older gaps were folded into totals: the list is complete after this.
    pub complete_from: Option<Ts>,
    /// Restores over the monitor's life, as the history counts them.
    pub restores: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum OutageKind {
    /// The broker was down: no monitor could receive anything.
    Broker,
    /// PostgreSQL was stopped or paused: nothing could commit.
    Database,
    /// The broker's port silently dropped every packet (no reset): the
    /// connections stay up and deliver late, so no gap is required.
    BrokerLink,
}

/// A stretch during which the driver held a service down.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Outage {
    pub kind: OutageKind,
    pub from: Ts,
    pub to: Ts,
    pub what: String,
}

/// A validly signed older snapshot row the driver wrote back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Replay {
    pub monitor: Uuid,
    pub at: Ts,
    /// When the monitor's status reported the refused replay.
    pub reported_at: Option<Ts>,
    /// When the driver put the newest row back.
    pub repaired_at: Option<Ts>,
}

/// A process's log, and how the process ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcessLog {
    pub name: String,
    pub text: String,
    /// Exit code, `None` when killed by a signal or still running.
    pub exit_code: Option<i32>,
}

/// What one run recorded.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Observations {
    pub monitors: Vec<Uuid>,
    pub writes: Vec<Write>,
    pub final_evidence: Vec<ResultRow>,
    pub final_alarms: Vec<ResultRow>,
    /// The alarm table at the end, with numbers and close times.
    #[serde(default)]
    pub alarm_rows: Vec<AlarmRow>,
    /// Evidence rows read while the run went on.
    pub sampled_evidence: Vec<ResultRow>,
    /// Source times (ms) of every frame published, per monitor.
    pub published: BTreeMap<Uuid, BTreeSet<i64>>,
    pub restores: Vec<Restore>,
    pub status: Vec<StatusSample>,
    pub coverage: BTreeMap<Uuid, Coverage>,
    pub outages: Vec<Outage>,
    pub logs: Vec<ProcessLog>,
    /// Per monitor: whether it was owned and processing again after the
    /// faults stopped.
    pub resumed: BTreeMap<Uuid, bool>,
    /// Workers started with an offset clock.
    #[serde(default)]
    pub offset_workers: Vec<String>,
    #[serde(default)]
    pub replays: Vec<Replay>,
    pub limits: Limits,
}

/// Timing allowances of the checks, each with the reason it exists.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Limits {
    /// `RADAR_CHECKPOINT_TIMEOUT_SECONDS` of the workers.
    pub checkpoint_timeout: Duration,
    /// How long after frames can change the model its stall timeout starts
    /// and is noticed: the first change after the last commit follows it by
    /// up to one frame, the checkpoint covering it starts once
    /// `RADAR_CHECKPOINT_MAX_INTERVAL_SECONDS` (1 s in the run) has passed,
    /// on the next frame or tick, and the stall is noticed on the tick (1 s)
    /// after that checkpoint waited the timeout.
    pub stall_detection: Duration,
    /// A worker notices a killed broker when its socket fails.
    pub outage_detection: Duration,
    /// Longest wait of a worker's MQTT reconnect schedule
    /// (`RADAR_TEST_MQTT_BACKOFF_MS` of the run): frames flow again at most
    /// this long after the broker is back.
    pub reconnect: Duration,
    /// Uncovered time allowed inside a window that must be a gap (clock
    /// reads of the driver and the worker are not simultaneous).
    pub slack: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            checkpoint_timeout: Duration::from_secs(5),
            stall_detection: Duration::from_millis(3500),
            outage_detection: Duration::from_secs(1),
            reconnect: Duration::from_secs(2),
            slack: Duration::from_millis(500),
        }
    }
}

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
