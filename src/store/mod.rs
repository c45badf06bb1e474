//! PostgreSQL: the one shared state of a radar fleet.
//!
//! - `connection`: one connection, with TLS when `sslmode` requires it.
//! - `cached`: constant SQL each connection prepares once.
//! - `migrate`: migrations and the schema ledger.
//! - `services`: the monitors' rows.
//! - `status`: reading the operational status workers write.
//! - `fleet`: the worker registry and the fleet-wide graph authoring switch.
//! - `graphs`: graph revisions and runs: publish, activate, admit, failure records.
//! - `schema`: diesel table definitions.
//! - `stored`: a snapshot row as read back, and its trust checks.
//! - `checkpoints`: the signed snapshot row and its fenced writers.
//! - `fence`: the tokens a writer and its heartbeat share.
//! - `evidence`: alarms and evidence rows, committed under a writer's token.
//! - `health`: the operational status, checked against the token without locking.
//! - `heartbeats`: every monitor's periodic status of one worker, written together.

mod cached;
mod checkpoints;
mod connection;
mod error;
mod evidence;
mod fence;
pub mod fleet;
pub mod graphs;
mod health;
mod heartbeats;
mod migrate;
pub mod schema;
mod services;
mod status;
mod stored;

use std::time::Duration;

use diesel::ConnectionError;
use diesel_async::{
    AsyncPgConnection, SimpleAsyncConnection,
    pooled_connection::{AsyncDieselConnectionManager, ManagerConfig, RecyclingMethod, deadpool},
};

pub use checkpoints::{
    CheckpointStore, CheckpointWriter, Claim, FirstCheckpointWriter, FirstCheckpoints, LossReason,
    MAX_FIRST_CHECKPOINTS_PER_TRANSACTION, MAX_READS_PER_STATEMENT, NotCommitted, OwnershipLost,
    SnapshotReader, SnapshotReads, WriteKind, WriteOutcome,
};
pub use error::StoreError;
pub use evidence::{AlarmReconciliation, AlarmRecord, EvidenceRecord, PendingResults};
pub use graphs::{
    Activated, Admission, AdmissionRefusal, FailureRecord, GraphStore, GraphStoreError, PlanChange,
    PublishPlan, RetriedFailure, RevisionRow, RunInspection, RunRow, RunSummary, StopOutcome,
};
pub use health::{HealthOutcome, HealthRecord, HealthReporter, JsonDocument};
pub use heartbeats::{
    FLUSH_EVERY, GroupBeat, HeartbeatFlusher, Heartbeats, MAX_ROWS_PER_STATEMENT,
};
pub use migrate::{LedgerState, check_schema, known_migrations, ledger_state, migrate};
pub use services::{MonitorHead, MonitorRow, Services};
pub use status::{ClockReading, StatusRow, list_status, read_clock, without_live_owner};
pub use stored::StoredSnapshot;

/// One pool per process. Every connection bounds each of its statements,
/// lock waits included, and every idle pause inside a transaction by the
/// pool's statement timeout (set once per session when the connection is
/// made, so no transaction spends a round trip on it).
#[derive(Clone)]
pub struct Pool {
    connections: deadpool::Pool<AsyncPgConnection>,
    statement_timeout: Duration,
}

impl Pool {
    /// The bound of every statement on this pool's connections.
    pub fn statement_timeout(&self) -> Duration {
        self.statement_timeout
    }
}

/// A connection checked out of the pool.
pub type PooledConnection = deadpool::Object<AsyncPgConnection>;

/// Builds the process's pool and proves it can reach the database.
/// `statement_timeout` bounds every statement of every connection
/// (`RADAR_CHECKPOINT_TIMEOUT_SECONDS` in a worker).
pub async fn connect(
    database_url: &str,
    max_connections: usize,
    statement_timeout: Duration,
) -> Result<Pool, StoreError> {
    // SET takes no bind parameters; the value is an integer we format.
    let ms = statement_timeout.as_millis().clamp(1, i32::MAX as u128);
    let mut config = ManagerConfig::default();
    config.custom_setup = Box::new(move |url| {
        let url = url.to_string();
        Box::pin(async move {
            let mut conn = connection::establish(&url).await?;
            // A writer frozen inside a transaction (SIGSTOP, a stalled
            // host) would hold the snapshot row lock for as long as it is
            // frozen and block every takeover: the server ends a session
            // that sits idle inside a transaction for longer than a statement
            // may run.
            conn.batch_execute(&format!(
                "SET statement_timeout = {ms}; SET idle_in_transaction_session_timeout = {ms}"
            ))
            .await
            .map_err(|e| ConnectionError::BadConnection(e.to_string()))?;
            Ok(conn)
        })
    });
    // A connection that died in the pool fails its next statement, which
    // every caller already retries; no extra round trip per checkout.
    config.recycling_method = RecyclingMethod::Fast;
    let manager =
        AsyncDieselConnectionManager::<AsyncPgConnection>::new_with_config(database_url, config);
    let connections = deadpool::Pool::builder(manager)
        .max_size(max_connections.max(1))
        .build()
        .map_err(|e| StoreError::Pool(e.to_string()))?;
    let pool = Pool {
        connections,
        statement_timeout,
    };
    drop(checkout(&pool).await?);
    Ok(pool)
}

/// Takes a connection from the pool, naming connection failures as such.
pub async fn checkout(pool: &Pool) -> Result<PooledConnection, StoreError> {
    pool.connections.get().await.map_err(|e| match e {
        deadpool::PoolError::Backend(e) => StoreError::Connect(e.to_string()),
        other => StoreError::Pool(other.to_string()),
    })
}
