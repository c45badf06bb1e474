//! The fleet: which worker processes are live and what their binaries
//! support, and the fleet-wide graph authoring switch that depends on it.
//!
//! Authoring (publishing graph revisions, activating runs) is one durable
//! setting in `radar_fleet_settings`. It starts off and is turned on only
//! while every live worker executes this binary's graph launch contract, so
//! no run is activated that a worker of the fleet would not understand.
//! Publication and activation check it inside their own transaction.

use chrono::{DateTime, Utc};
use diesel::sql_types::{Bool, Double, Integer, Nullable, Text};
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use serde::Serialize;

use super::{Pool, StoreError, cached::static_sql, checkout};
use crate::graph::LAUNCH_CONTRACT_VERSION;

/// A worker whose heartbeat is older than this (on the database's clock)
/// counts as gone: the rule `radar status` flags stale heartbeats by.
/// Workers refresh theirs every [`WORKER_HEARTBEAT_EVERY`].
pub const WORKER_LIVE_FOR: std::time::Duration = std::time::Duration::from_secs(60);

/// How often a worker refreshes its row in `radar_workers`.
pub const WORKER_HEARTBEAT_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// What a worker process advertises about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerAdvert {
    pub worker_id: String,
    /// The graph launch contract its binary executes; `None`: no graph runs.
    pub graph_launch_contract: Option<i32>,
    pub binary_version: String,
}

impl WorkerAdvert {
    /// This binary: it executes [`LAUNCH_CONTRACT_VERSION`].
    pub fn this_binary(worker_id: String) -> Self {
        Self {
            worker_id,
            graph_launch_contract: Some(LAUNCH_CONTRACT_VERSION),
            binary_version: env!("CARGO_PKG_VERSION").to_string(),
        }
    }
}

/// Registers `advert` as running, or refreshes its heartbeat (on the
/// database's clock).
pub async fn worker_heartbeat(pool: &Pool, advert: &WorkerAdvert) -> Result<(), StoreError> {
    let mut conn = checkout(pool).await?;
    // Every few seconds for the worker's lifetime: prepared once per connection.
    static_sql(
        "INSERT INTO radar_workers (worker_id, graph_launch_contract, binary_version, state) \
         VALUES ($1, $2, $3, 'running') \
         ON CONFLICT (worker_id) DO UPDATE SET \
            graph_launch_contract = EXCLUDED.graph_launch_contract, \
            binary_version = EXCLUDED.binary_version, state = 'running', heartbeat_at = now()",
    )
    .bind::<Text, _>(&advert.worker_id)
    .bind::<Nullable<Integer>, _>(advert.graph_launch_contract)
    .bind::<Text, _>(&advert.binary_version)
    .execute(&mut conn)
    .await?;
    Ok(())
}

/// Records that the worker stopped: it no longer counts as live.
pub async fn worker_stopped(pool: &Pool, worker_id: &str) -> Result<(), StoreError> {
    let mut conn = checkout(pool).await?;
    diesel::sql_query(
        "UPDATE radar_workers SET state = 'stopped', heartbeat_at = now() WHERE worker_id = $1",
    )
    .bind::<Text, _>(worker_id)
    .execute(&mut conn)
    .await?;
    Ok(())
}

/// A live worker, as the authoring check sees it.
#[derive(Debug, Clone, PartialEq, Serialize, diesel::QueryableByName)]
pub struct LiveWorker {
    #[diesel(sql_type = Text)]
    pub worker_id: String,
    /// `None`: it runs no graph, or it never registered (a binary older
    /// than the worker registry, seen only through its monitors' status).
    #[diesel(sql_type = Nullable<Integer>)]
    pub graph_launch_contract: Option<i32>,
    /// Whether it has a live row in `radar_workers`.
    #[diesel(sql_type = Bool)]
    pub registered: bool,
    /// Seconds since its newest heartbeat, on the database's clock.
    #[diesel(sql_type = Double)]
    pub heartbeat_age_seconds: f64,
}

impl LiveWorker {
    /// Whether it executes the runs this binary would activate.
    pub fn supports_graphs(&self) -> bool {
        self.graph_launch_contract == Some(LAUNCH_CONTRACT_VERSION)
    }

    /// Why it blocks authoring, for the operator.
    pub fn blocking_reason(&self) -> String {
        let age = self.heartbeat_age_seconds.max(0.0);
        match (self.registered, self.graph_launch_contract) {
            (false, _) => format!(
                "{} (reports monitors but never registered: a binary without graph support; \
                 heartbeat {age:.0} s ago)",
                self.worker_id
            ),
            (true, None) => format!(
                "{} (its binary runs no graphs; heartbeat {age:.0} s ago)",
                self.worker_id
            ),
            (true, Some(contract)) => format!(
                "{} (runs graph launch contract {contract}, this radar activates {}; heartbeat \
                 {age:.0} s ago)",
                self.worker_id, LAUNCH_CONTRACT_VERSION
            ),
        }
    }
}

/// Every live worker: registered workers that have not stopped and whose
/// heartbeat is recent, and workers seen only through a recent, not
/// stopped operational status row of one of their monitors (binaries that
/// predate the registry). Ages on the database's clock.
const LIVE_WORKERS: &str = "
WITH registered AS (
    SELECT worker_id, graph_launch_contract, heartbeat_at FROM radar_workers
    WHERE state <> 'stopped' AND heartbeat_at >= now() - make_interval(secs => $1)
), reporting AS (
    SELECT worker_id, max(heartbeat_at) AS heartbeat_at FROM radar_operational_status
    WHERE state <> 'stopped' AND heartbeat_at >= now() - make_interval(secs => $1)
    GROUP BY worker_id
)
SELECT coalesce(r.worker_id, s.worker_id) AS worker_id,
       r.graph_launch_contract,
       r.worker_id IS NOT NULL AS registered,
       extract(epoch FROM now() - greatest(r.heartbeat_at, s.heartbeat_at))::float8
           AS heartbeat_age_seconds
FROM registered r FULL JOIN reporting s ON s.worker_id = r.worker_id
ORDER BY 1";

/// Every live worker (see [`WORKER_LIVE_FOR`]).
pub async fn live_workers(pool: &Pool) -> Result<Vec<LiveWorker>, StoreError> {
    let mut conn = checkout(pool).await?;
    load_live_workers(&mut conn).await
}

async fn load_live_workers(conn: &mut AsyncPgConnection) -> Result<Vec<LiveWorker>, StoreError> {
    Ok(diesel::sql_query(LIVE_WORKERS)
        .bind::<Double, _>(WORKER_LIVE_FOR.as_secs_f64())
        .load(conn)
        .await?)
}

/// The authoring switch and the fleet it depends on.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AuthoringStatus {
    pub enabled: bool,
    pub changed_by: Option<String>,
    pub changed_at: DateTime<Utc>,
    pub live_workers: Vec<LiveWorker>,
}

impl AuthoringStatus {
    /// The live workers that keep authoring from being enabled.
    pub fn blocking(&self) -> impl Iterator<Item = &LiveWorker> {
        self.live_workers.iter().filter(|w| !w.supports_graphs())
    }
}

#[derive(diesel::QueryableByName)]
struct SettingsRow {
    #[diesel(sql_type = Bool)]
    graph_authoring_enabled: bool,
    #[diesel(sql_type = Nullable<Text>)]
    changed_by: Option<String>,
    #[diesel(sql_type = diesel::sql_types::Timestamptz)]
    changed_at: DateTime<Utc>,
}

/// Why the authoring switch could not be turned or used.
#[derive(Debug, thiserror::Error)]
pub enum AuthoringError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(
        "graph authoring stays off: {} live worker(s) cannot run graphs: {}; upgrade them to a \
         radar that supports graph runs (or stop them; a worker counts as gone {} s after its \
         last heartbeat), then enable again",
        .blocking.len(),
        .blocking.iter().map(LiveWorker::blocking_reason).collect::<Vec<_>>().join("; "),
        WORKER_LIVE_FOR.as_secs()
    )]
    Blocked { blocking: Vec<LiveWorker> },
}

impl From<diesel::result::Error> for AuthoringError {
    fn from(e: diesel::result::Error) -> Self {
        Self::Store(StoreError::Query(e))
    }
}

/// The switch and the live workers.
pub async fn authoring_status(pool: &Pool) -> Result<AuthoringStatus, StoreError> {
    let mut conn = checkout(pool).await?;
    let row = read_settings(&mut conn, "").await?;
    Ok(AuthoringStatus {
        enabled: row.graph_authoring_enabled,
        changed_by: row.changed_by,
        changed_at: row.changed_at,
        live_workers: load_live_workers(&mut conn).await?,
    })
}

/// Turns authoring on or off; `changed_by` is recorded for operators.
/// Enabling refuses, naming them, while any live worker does not execute
/// this binary's graph launch contract. Disabling always succeeds; it
/// does not affect running graph runs, inspection or stopping.
pub async fn set_authoring(
    pool: &Pool,
    enable: bool,
    changed_by: &str,
) -> Result<AuthoringStatus, AuthoringError> {
    let mut conn = checkout(pool).await?;
    conn.transaction::<_, AuthoringError, _>(async |conn| {
        // The row lock serializes switching with publications and
        // activations, which read it FOR SHARE.
        read_settings(conn, "FOR UPDATE").await?;
        let live_workers = load_live_workers(conn).await?;
        if enable {
            let blocking: Vec<LiveWorker> = live_workers
                .iter()
                .filter(|w| !w.supports_graphs())
                .cloned()
                .collect();
            if !blocking.is_empty() {
                return Err(AuthoringError::Blocked { blocking });
            }
        }
        diesel::sql_query(
            "UPDATE radar_fleet_settings SET graph_authoring_enabled = $1, changed_by = $2, \
             changed_at = now() WHERE graph_authoring_enabled IS DISTINCT FROM $1",
        )
        .bind::<Bool, _>(enable)
        .bind::<Text, _>(changed_by)
        .execute(conn)
        .await?;
        let row = read_settings(conn, "").await?;
        Ok(AuthoringStatus {
            enabled: row.graph_authoring_enabled,
            changed_by: row.changed_by,
            changed_at: row.changed_at,
            live_workers,
        })
    })
    .await
}

/// Whether authoring is on, read inside the caller's transaction with a
/// share lock so that it cannot be turned off underneath a publication.
pub(super) async fn authoring_enabled_for_update(
    conn: &mut AsyncPgConnection,
) -> Result<bool, StoreError> {
    Ok(read_settings(conn, "FOR SHARE")
        .await?
        .graph_authoring_enabled)
}

async fn read_settings(
    conn: &mut AsyncPgConnection,
    lock: &str,
) -> Result<SettingsRow, StoreError> {
    Ok(diesel::sql_query(format!(
        "SELECT graph_authoring_enabled, changed_by, changed_at FROM radar_fleet_settings {lock}"
    ))
    .get_result(conn)
    .await?)
}
