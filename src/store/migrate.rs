//! Migrations and the schema ledger.
//!
//! The ledger is diesel's `__diesel_schema_migrations` table: every applied
//! migration version. A binary compares it with the migrations embedded in
//! itself, so it can refuse a database migrated by a newer binary instead of
//! misreading tables it does not know.

use std::collections::BTreeSet;

use diesel::Connection;
use diesel::{migration::MigrationSource, pg::Pg};
use diesel_async::{AsyncPgConnection, async_connection_wrapper::AsyncConnectionWrapper};
use diesel_migrations::{EmbeddedMigrations, MigrationHarness, embed_migrations};

use super::StoreError;

const MIGRATIONS: EmbeddedMigrations = embed_migrations!("migrations");

type SyncConnection = AsyncConnectionWrapper<AsyncPgConnection>;

/// The migration versions compiled into this binary, oldest first.
pub fn known_migrations() -> Vec<String> {
    let mut versions: Vec<String> = MigrationSource::<Pg>::migrations(&MIGRATIONS)
        .unwrap_or_default()
        .iter()
        .map(|m| m.name().version().to_string())
        .collect();
    versions.sort();
    versions
}

/// How the database's ledger compares with this binary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerState {
    pub applied: Vec<String>,
    /// Known here, not applied yet.
    pub pending: Vec<String>,
    /// Applied there, unknown here: a newer binary migrated the database.
    pub unknown: Vec<String>,
}

/// Applies every pending migration, after refusing a database that a newer
/// binary migrated. Returns the versions it applied.
pub async fn migrate(database_url: &str) -> Result<Vec<String>, StoreError> {
    let url = database_url.to_string();
    blocking(move || {
        let (mut conn, _runtime) = establish(&url)?;
        let ledger = ledger(&mut conn)?;
        if !ledger.unknown.is_empty() {
            return Err(StoreError::SchemaNewerThanBinary {
                unknown: ledger.unknown,
            });
        }
        let applied = conn
            .run_pending_migrations(MIGRATIONS)
            .map_err(|e| StoreError::Migration(e.to_string()))?;
        Ok(applied.iter().map(ToString::to_string).collect())
    })
    .await
}

/// Reads the ledger without changing anything but diesel's own bookkeeping.
pub async fn ledger_state(database_url: &str) -> Result<LedgerState, StoreError> {
    let url = database_url.to_string();
    blocking(move || {
        let (mut conn, _runtime) = establish(&url)?;
        ledger(&mut conn)
    })
    .await
}

/// Succeeds only when the database holds exactly the migrations this binary
/// knows: what a worker checks before it touches any table.
pub async fn check_schema(database_url: &str) -> Result<(), StoreError> {
    let ledger = ledger_state(database_url).await?;
    if !ledger.unknown.is_empty() {
        return Err(StoreError::SchemaNewerThanBinary {
            unknown: ledger.unknown,
        });
    }
    if !ledger.pending.is_empty() {
        return Err(StoreError::SchemaBehind {
            pending: ledger.pending,
        });
    }
    Ok(())
}

fn ledger(conn: &mut SyncConnection) -> Result<LedgerState, StoreError> {
    let applied: BTreeSet<String> = conn
        .applied_migrations()
        .map_err(|e| StoreError::Migration(e.to_string()))?
        .iter()
        .map(ToString::to_string)
        .collect();
    let known: BTreeSet<String> = known_migrations().into_iter().collect();
    Ok(LedgerState {
        pending: known.difference(&applied).cloned().collect(),
        unknown: applied.difference(&known).cloned().collect(),
        applied: applied.into_iter().collect(),
    })
}

/// A blocking connection for diesel's migration harness. A TLS connection's
/// driver task needs a runtime that runs on its own, so the caller keeps the
/// returned runtime alive as long as the connection.
fn establish(url: &str) -> Result<(SyncConnection, Option<tokio::runtime::Runtime>), StoreError> {
    let connect_error = |e: diesel::ConnectionError| StoreError::Connect(e.to_string());
    let plan = super::connection::plan(url).map_err(StoreError::Connect)?;
    if plan.tls.is_none() {
        return Ok((SyncConnection::establish(url).map_err(connect_error)?, None));
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(|e| StoreError::Connect(format!("starting a runtime for the connection: {e}")))?;
    let conn = runtime
        .block_on(super::connection::establish(url))
        .map_err(connect_error)?;
    Ok((SyncConnection::from(conn), Some(runtime)))
}

/// Diesel's migration harness is synchronous; it must not block an async
/// runtime thread (and `block_in_place` panics on a current-thread runtime).
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, StoreError> + Send + 'static,
) -> Result<T, StoreError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| StoreError::Migration(format!("migration task failed: {e}")))?
}
