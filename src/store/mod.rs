//! PostgreSQL: the one shared state of a radar fleet.
//!
//! - `migrate`: migrations and the schema ledger.
//! - `services`: the monitors' rows.
//! - `status`: reading the operational status workers write.
//! - `graphs`: graph revisions and runs: publish, activate, admit, failure records.
//! - `schema`: diesel table definitions.
//! - `stored`: a snapshot row as read back, and its trust checks.
//! - `checkpoints`: the signed snapshot row and its fenced writers.
//! - `fence`: the tokens a writer and its heartbeat share.
//! - `evidence`: alarms and evidence rows, committed under a writer's token.
//! - `health`: the operational status, checked against the token without locking.

mod checkpoints;
mod error;
mod evidence;
mod fence;
pub mod graphs;
mod health;
mod migrate;
pub mod schema;
mod services;
mod status;
mod stored;

use diesel_async::{
    AsyncPgConnection,
    pooled_connection::{AsyncDieselConnectionManager, deadpool},
};

pub use checkpoints::{
    CheckpointStore, CheckpointWriter, Claim, OwnershipLost, WriteKind, WriteOutcome,
};
pub use error::StoreError;
pub use evidence::{AlarmRecord, EvidenceRecord, PendingResults};
pub use graphs::{
    Activated, Admission, AdmissionRefusal, FailureRecord, GraphStore, GraphStoreError, PlanChange,
    PublishPlan, RetriedFailure, RevisionRow, RunInspection, RunRow, RunSummary, StopOutcome,
};
pub use health::{HealthOutcome, HealthRecord, HealthReporter};
pub use migrate::{LedgerState, check_schema, known_migrations, ledger_state, migrate};
pub use services::{MonitorRow, Services};
pub use status::{StatusRow, list_status};
pub use stored::StoredSnapshot;

/// One pool per process.
pub type Pool = deadpool::Pool<AsyncPgConnection>;
/// A connection checked out of the pool.
pub type PooledConnection = deadpool::Object<AsyncPgConnection>;

/// Builds the process's pool and proves it can reach the database.
pub async fn connect(database_url: &str, max_connections: usize) -> Result<Pool, StoreError> {
    let pool = unconnected_pool(database_url, max_connections)?;
    drop(checkout(&pool).await?);
    Ok(pool)
}

/// A pool that connects only when first used (and fails then if the
/// database is unreachable): for parts that a run may never use, such as
/// the graph store of `radar demo` without PostgreSQL.
pub fn unconnected_pool(database_url: &str, max_connections: usize) -> Result<Pool, StoreError> {
    let manager = AsyncDieselConnectionManager::<AsyncPgConnection>::new(database_url);
    deadpool::Pool::builder(manager)
        .max_size(max_connections.max(1))
        .build()
        .map_err(|e| StoreError::Pool(e.to_string()))
}

/// Takes a connection from the pool, naming connection failures as such.
pub async fn checkout(pool: &Pool) -> Result<PooledConnection, StoreError> {
    pool.get().await.map_err(|e| match e {
        deadpool::PoolError::Backend(e) => StoreError::Connect(e.to_string()),
        other => StoreError::Pool(other.to_string()),
    })
}
