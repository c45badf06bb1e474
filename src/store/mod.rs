//! PostgreSQL: the one shared state of a radar fleet.
//!
//! - `migrate`: migrations and the schema ledger.
//! - `services`: the monitors' rows.
//! - `status`: reading the operational status workers write.
//! - `graphs`: graph revisions and runs: publish, activate, admit, failure records.
//! - `schema`: diesel table definitions.

mod error;
pub mod graphs;
mod migrate;
pub mod schema;
mod services;
mod status;

use diesel_async::{
    AsyncPgConnection,
    pooled_connection::{AsyncDieselConnectionManager, deadpool},
};

pub use error::StoreError;
pub use graphs::{
    Activated, Admission, AdmissionRefusal, FailureRecord, GraphStore, GraphStoreError, PlanChange,
    PublishPlan, RetriedFailure, RevisionRow, RunInspection, RunRow, RunSummary, StopOutcome,
};
pub use migrate::{LedgerState, check_schema, known_migrations, ledger_state, migrate};
pub use services::{MonitorRow, Services};
pub use status::{StatusRow, list_status};

/// One pool per process.
pub type Pool = deadpool::Pool<AsyncPgConnection>;
/// A connection checked out of the pool.
pub type PooledConnection = deadpool::Object<AsyncPgConnection>;

/// Builds the process's pool and proves it can reach the database.
pub async fn connect(database_url: &str, max_connections: usize) -> Result<Pool, StoreError> {
    let manager = AsyncDieselConnectionManager::<AsyncPgConnection>::new(database_url);
    let pool = deadpool::Pool::builder(manager)
        .max_size(max_connections.max(1))
        .build()
        .map_err(|e| StoreError::Pool(e.to_string()))?;
    drop(checkout(&pool).await?);
    Ok(pool)
}

/// Takes a connection from the pool, naming connection failures as such.
pub async fn checkout(pool: &Pool) -> Result<PooledConnection, StoreError> {
    pool.get().await.map_err(|e| match e {
        deadpool::PoolError::Backend(e) => StoreError::Connect(e.to_string()),
        other => StoreError::Pool(other.to_string()),
    })
}
