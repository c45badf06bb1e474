//! What the run watches, and how: a write audit in the database
//! (`radar_testkit::audit`: triggers that record every committed snapshot,
//! evidence and alarm write with the writing session's `application_name`), samples of `radar status --json`
//! and of the evidence table while the run goes on, and at the end the
//! final tables, `radar snapshot inspect --json` of every monitor and the
//! workers' JSON logs.

use std::{
    collections::BTreeMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use anyhow::{Context, Result, bail};
use chrono::{DateTime, NaiveDateTime, Utc};
use diesel::sql_types::{BigInt, Bytea, Double, Text, Timestamptz, Uuid as SqlUuid};
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use radar_testkit::audit;
use serde_json::Value;
use tokio::task::JoinHandle;
use uuid::Uuid;

use crate::{
    check::{AlarmRow, Coverage, Gap, Op, Restore, ResultRow, StatusSample, Table, Write},
    fleet::{WorkerEnv, radar_cli},
};

/// How long one observation may take (the database may be paused).
const QUERY_LIMIT: Duration = Duration::from_secs(5);

pub async fn connect(url: &str) -> Result<AsyncPgConnection> {
    match tokio::time::timeout(QUERY_LIMIT, AsyncPgConnection::establish(url)).await {
        Ok(conn) => conn.with_context(|| format!("connecting to {url}")),
        Err(_) => bail!("connecting to {url} took longer than {QUERY_LIMIT:?}"),
    }
}

/// Installs the write audit (`radar_testkit::audit`) in the run's database.
pub async fn install_audit(url: &str) -> Result<()> {
    audit::try_install(&mut connect(url).await?).await
}

/// The audited writes, as the invariants read them.
pub async fn audited_writes(url: &str) -> Result<Vec<Write>> {
    let rows = audit::try_writes(&mut connect(url).await?).await?;
    rows.into_iter()
        .map(|r| {
            Ok(Write {
                seq: r.seq,
                table: match r.tbl.as_str() {
                    "checkpoint" => Table::Checkpoint,
                    "evidence" => Table::Evidence,
                    "alarm" => Table::Alarm,
                    other => bail!("unknown audited table {other}"),
                },
                op: match r.op.as_str() {
                    "INSERT" => Op::Insert,
                    "UPDATE" => Op::Update,
                    "DELETE" => Op::Delete,
                    other => bail!("unknown audited operation {other}"),
                },
                monitor: r.service_id,
                writer: r.app,
                txid: r.txid,
                signature: r.signature,
                replaced: r.replaced,
                processed: r.processed_count,
                saved_at: r.saved_at,
                frame_ts: r.frame_ts,
                score: r.score,
                at: r.at,
            })
        })
        .collect()
}

#[derive(diesel::QueryableByName)]
struct ResultSql {
    #[diesel(sql_type = SqlUuid)]
    service_id: Uuid,
    #[diesel(sql_type = Timestamptz)]
    ts: DateTime<Utc>,
    #[diesel(sql_type = Double)]
    score: f64,
    #[diesel(sql_type = Bytea)]
    writer_signature: Vec<u8>,
}

impl From<ResultSql> for ResultRow {
    fn from(r: ResultSql) -> Self {
        Self {
            monitor: r.service_id,
            frame_ts: r.ts,
            score: r.score,
            signature: r.writer_signature,
        }
    }
}

pub async fn evidence_rows(url: &str) -> Result<Vec<ResultRow>> {
    results(
        url,
        "SELECT service_id, frame_ts AS ts, score, writer_signature FROM radar_evidence",
    )
    .await
}

pub async fn alarm_rows(url: &str) -> Result<Vec<ResultRow>> {
    results(
        url,
        "SELECT service_id, opened_at AS ts, peak_score AS score, writer_signature FROM radar_alarms",
    )
    .await
}

#[derive(diesel::QueryableByName)]
struct AlarmSql {
    #[diesel(sql_type = SqlUuid)]
    service_id: Uuid,
    #[diesel(sql_type = BigInt)]
    alarm_seq: i64,
    #[diesel(sql_type = Timestamptz)]
    opened_at: DateTime<Utc>,
    #[diesel(sql_type = diesel::sql_types::Nullable<Timestamptz>)]
    closed_at: Option<DateTime<Utc>>,
}

/// The alarm table with numbers and close times.
pub async fn alarm_table(url: &str) -> Result<Vec<AlarmRow>> {
    let read = async {
        let mut conn = connect(url).await?;
        let rows: Vec<AlarmSql> = diesel::sql_query(
            "SELECT service_id, alarm_seq, opened_at, closed_at FROM radar_alarms",
        )
        .load(&mut conn)
        .await?;
        anyhow::Ok(
            rows.into_iter()
                .map(|r| AlarmRow {
                    monitor: r.service_id,
                    seq: r.alarm_seq,
                    opened_at: r.opened_at,
                    closed_at: r.closed_at,
                })
                .collect(),
        )
    };
    match tokio::time::timeout(QUERY_LIMIT, read).await {
        Ok(rows) => rows,
        Err(_) => bail!("reading alarms took longer than {QUERY_LIMIT:?}"),
    }
}

async fn results(url: &str, query: &str) -> Result<Vec<ResultRow>> {
    let read = async {
        let mut conn = connect(url).await?;
        let rows: Vec<ResultSql> = diesel::sql_query(query).load(&mut conn).await?;
        anyhow::Ok(rows.into_iter().map(ResultRow::from).collect())
    };
    match tokio::time::timeout(QUERY_LIMIT, read).await {
        Ok(rows) => rows,
        Err(_) => bail!("reading results took longer than {QUERY_LIMIT:?}"),
    }
}

/// The committed snapshot of each monitor: who wrote it and its count.
#[derive(Debug, Clone, diesel::QueryableByName)]
pub struct SnapshotRow {
    #[diesel(sql_type = SqlUuid)]
    pub service_id: Uuid,
    #[diesel(sql_type = Text)]
    pub writer_id: String,
    #[diesel(sql_type = BigInt)]
    pub processed_count: i64,
}

pub async fn snapshot_rows(url: &str) -> Result<Vec<SnapshotRow>> {
    let read = async {
        let mut conn = connect(url).await?;
        let rows: Vec<SnapshotRow> = diesel::sql_query(
            "SELECT service_id, writer_id, processed_count FROM radar_runtime_checkpoints",
        )
        .load(&mut conn)
        .await?;
        anyhow::Ok(rows)
    };
    match tokio::time::timeout(QUERY_LIMIT, read).await {
        Ok(rows) => rows,
        Err(_) => bail!("reading snapshot rows took longer than {QUERY_LIMIT:?}"),
    }
}

/// Evidence rows read so far, as first seen.
type SeenEvidence = BTreeMap<(Uuid, DateTime<Utc>), ResultRow>;

/// Samples `radar status --json` and the evidence table until stopped.
pub struct Sampler {
    stop: Arc<AtomicBool>,
    task: JoinHandle<()>,
    status: Arc<Mutex<Vec<StatusSample>>>,
    evidence: Arc<Mutex<SeenEvidence>>,
}

/// What the sampler saw.
pub struct Samples {
    pub status: Vec<StatusSample>,
    pub evidence: Vec<ResultRow>,
}

impl Sampler {
    pub fn start(env: WorkerEnv, url: String) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let status = Arc::new(Mutex::new(Vec::new()));
        let evidence = Arc::new(Mutex::new(BTreeMap::new()));
        let task = tokio::spawn(sample(
            env,
            url,
            Arc::clone(&stop),
            Arc::clone(&status),
            Arc::clone(&evidence),
        ));
        Self {
            stop,
            task,
            status,
            evidence,
        }
    }

    pub async fn stop(self) -> Samples {
        self.stop.store(true, Ordering::SeqCst);
        let _ = self.task.await;
        let status = lock(&self.status).clone();
        let evidence: Vec<ResultRow> = lock(&self.evidence).values().cloned().collect();
        Samples { status, evidence }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Every sampling round reads the status; every third also the evidence.
const SAMPLE_EVERY: Duration = Duration::from_millis(1500);

async fn sample(
    env: WorkerEnv,
    url: String,
    stop: Arc<AtomicBool>,
    status: Arc<Mutex<Vec<StatusSample>>>,
    evidence: Arc<Mutex<SeenEvidence>>,
) {
    let mut round = 0u64;
    // `AtomicBool::load` by path: diesel's `RunQueryDsl::load` is in scope.
    while !AtomicBool::load(&stop, Ordering::SeqCst) {
        round += 1;
        if let Ok(rows) = status_rows(&env).await {
            lock(&status).extend(rows);
        }
        if round.is_multiple_of(3)
            && let Ok(rows) = evidence_rows(&url).await
        {
            let mut seen = lock(&evidence);
            for row in rows {
                seen.entry((row.monitor, row.frame_ts)).or_insert(row);
            }
        }
        tokio::time::sleep(SAMPLE_EVERY).await;
    }
}

/// `radar status --json`, as samples of the rows some worker reported.
pub async fn status_rows(env: &WorkerEnv) -> Result<Vec<StatusSample>> {
    // Before the command: a heartbeat read later only looks younger.
    let sampled_at = Utc::now();
    let (ok, out) = radar_cli(env, &["status", "--json"], QUERY_LIMIT).await?;
    if !ok {
        bail!("radar status failed");
    }
    let rows: Value = serde_json::from_str(&out).context("radar status --json output")?;
    Ok(rows
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|row| {
            Some(StatusSample {
                monitor: row["monitor_id"].as_str()?.parse().ok()?,
                writer: row["worker_id"].as_str()?.to_string(),
                heartbeat_at: row["heartbeat_at"].as_str()?.parse().ok()?,
                processed: row["processed_count"].as_i64()?,
                sampled_at: Some(sampled_at),
            })
        })
        .collect())
}

/// `radar snapshot inspect ID --json`: the committed coverage history.
pub async fn coverage(env: &WorkerEnv, monitor: Uuid) -> Result<Coverage> {
    let id = monitor.to_string();
    let (ok, out) = radar_cli(
        env,
        &["snapshot", "inspect", &id, "--json"],
        Duration::from_secs(30),
    )
    .await?;
    let v: Value = serde_json::from_str(&out)
        .with_context(|| format!("radar snapshot inspect {id} --json output"))?;
    if !ok {
        bail!(
            "the snapshot of monitor {id} is not restorable: {}",
            v["reason"].as_str().unwrap_or("(no reason given)")
        );
    }
    let c = &v["coverage"];
    let ts = |v: &Value| v.as_str().and_then(|s| s.parse::<DateTime<Utc>>().ok());
    Ok(Coverage {
        covered_from: ts(&c["covered_from"]),
        covered_to: ts(&c["covered_to"]),
        gaps: c["gaps"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|g| {
                Some(Gap {
                    cause: g["cause"].as_str()?.to_string(),
                    from: ts(&g["from"])?,
                    to: ts(&g["to"]),
                })
            })
            .collect(),
        complete_from: ts(&c["dropped_before"]),
        restores: c["last_restore"]["restores"].as_u64().unwrap_or(0),
    })
}

/// The "Snapshot restored" lines of one worker's JSON log.
pub fn restores(writer: &str, log: &str) -> Vec<Restore> {
    log.lines()
        .filter(|l| l.contains("Snapshot restored"))
        .filter_map(|line| {
            let v: Value = serde_json::from_str(line).ok()?;
            Some(Restore {
                writer: writer.to_string(),
                monitor: v["monitor_id"].as_str()?.parse().ok()?,
                at: v["timestamp"].as_str()?.parse().ok()?,
                processed: v["restored_processed"].as_i64()?,
                saved_at: display_time(v["saved_at"].as_str()?)?,
            })
        })
        .collect()
}

/// A `DateTime<Utc>` as its `Display` writes it (`2026-11-30 12:00:00.123456 UTC`).
fn display_time(s: &str) -> Option<DateTime<Utc>> {
    let naive =
        NaiveDateTime::parse_from_str(s.strip_suffix(" UTC")?, "%Y-%m-%d %H:%M:%S%.f").ok()?;
    Some(naive.and_utc())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restores_are_read_from_json_log_lines() {
        let log = concat!(
            r#"{"timestamp":"2026-11-30T12:00:01.500000Z","level":"INFO","message":"Snapshot restored; input since its save time is not replayed.","monitor_id":"00000000-0000-0000-0000-000000000007","restored_processed":90,"saved_at":"2026-11-30 12:00:00.123456 UTC","partial_frames_cleared":0}"#,
            "\n",
            r#"{"timestamp":"2026-11-30T12:00:02Z","level":"INFO","message":"Monitor started; subscribing."}"#,
            "\nnot json\n"
        );
        let found = restores("w1", log);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].processed, 90);
        assert_eq!(found[0].monitor, Uuid::from_u128(7));
        assert_eq!(
            found[0].saved_at,
            "2026-11-30T12:00:00.123456Z"
                .parse::<DateTime<Utc>>()
                .unwrap()
        );
        assert_eq!(
            found[0].at,
            "2026-11-30T12:00:01.5Z".parse::<DateTime<Utc>>().unwrap()
        );
    }
}
