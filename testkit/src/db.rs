//! Test databases on the shared cluster (or on a private one): each test
//! gets its own database (and its own MQTT topic prefix), so tests run in
//! parallel and never depend on leftovers.

use std::{
    sync::atomic::{AtomicU32, Ordering},
    time::Duration,
};

use anyhow::{Context, Result};
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// The server tests use: `RADAR_TEST_DATABASE_URL`, without a database name,
/// else the local trust-auth cluster.
pub fn server_url() -> String {
    std::env::var("RADAR_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432".to_string())
        .trim_end_matches('/')
        .to_string()
}

/// A name unique to this process and call, safe as a database name or topic prefix.
pub fn unique_name(tag: &str) -> String {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let tag: String = tag
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    format!("radar_test_{tag}_{}_{n}_{nanos:x}", std::process::id())
}

/// A database created for one test.
pub struct TestDb {
    pub name: String,
    pub url: String,
}

/// Creates an empty database (no migrations).
pub async fn empty_database(tag: &str) -> TestDb {
    empty_database_on(&server_url(), tag).await
}

/// Creates an empty database on `server` (a URL without a database name).
pub async fn empty_database_on(server: &str, tag: &str) -> TestDb {
    let name = unique_name(tag);
    let mut admin = AsyncPgConnection::establish(&format!("{server}/postgres"))
        .await
        .unwrap_or_else(|e| {
            panic!("cannot reach PostgreSQL at {server}: {e}; run scripts/test, which starts it")
        });
    diesel::sql_query(format!("CREATE DATABASE \"{name}\""))
        .execute(&mut admin)
        .await
        .expect("create test database");
    TestDb {
        url: format!("{server}/{name}"),
        name,
    }
}

/// Creates a database with every migration applied.
pub async fn migrated_database(tag: &str) -> TestDb {
    migrated_database_on(&server_url(), tag).await
}

/// Creates a database with every migration applied on `server`.
pub async fn migrated_database_on(server: &str, tag: &str) -> TestDb {
    let db = empty_database_on(server, tag).await;
    radar::store::migrate(&db.url)
        .await
        .expect("migrate test database");
    db
}

/// Turns fleet-wide graph authoring on (it starts off), as
/// `radar graph authoring enable` does when no live worker blocks it.
pub async fn enable_graph_authoring(db: &TestDb) {
    let pool = radar::store::connect(&db.url, 1, STATEMENT_TIMEOUT)
        .await
        .expect("connect to test database");
    radar::store::fleet::set_authoring(&pool, true, "test")
        .await
        .expect("enable graph authoring");
}

/// A connection to a test database, for direct SQL in assertions.
pub async fn connect(db: &TestDb) -> AsyncPgConnection {
    AsyncPgConnection::establish(&db.url)
        .await
        .expect("connect to test database")
}

/// The statement timeout of the tests' pools (the worker's default).
pub const STATEMENT_TIMEOUT: Duration = Duration::from_secs(30);

/// The version of a migration no binary knows, as a newer radar would leave it.
pub const NEWER_MIGRATION: &str = "29991231000000";

/// Records [`NEWER_MIGRATION`] in the ledger, as if a newer binary had
/// migrated the database.
pub async fn mark_migrated_by_newer_binary(db: &TestDb) {
    let mut conn = connect(db).await;
    diesel::sql_query("INSERT INTO __diesel_schema_migrations (version) VALUES ($1)")
        .bind::<diesel::sql_types::Text, _>(NEWER_MIGRATION)
        .execute(&mut conn)
        .await
        .expect("record a newer migration");
}

/// Opens a plain connection to a database URL.
pub async fn connect_url(url: &str) -> Result<AsyncPgConnection> {
    AsyncPgConnection::establish(url)
        .await
        .with_context(|| format!("connecting to the test database {url}"))
}
