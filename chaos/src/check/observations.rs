//! What a run records, as the checks read it: the audited writes, the
//! final tables, samples taken while it ran, restores, coverage histories,
//! outages, replays and process logs; and the timing allowances (with the
//! reason for each) the checks grant.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::Ts;

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
