//! Reading and holding rows of a test database: the committed snapshot row,
//! the sessions still connected, a row lock held on purpose so that a
//! worker's write waits, and an earlier snapshot written back as if another
//! writer had committed it.

use std::time::Duration;

use chrono::{DateTime, Utc};
use diesel::sql_types::{BigInt, Bytea, Text, Timestamptz, Uuid as SqlUuid};
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use uuid::Uuid;

use crate::{harness::Harness, poll};

/// The snapshot row's readable columns.
#[derive(Debug, Clone, PartialEq, diesel::QueryableByName)]
pub struct SnapshotRow {
    #[diesel(sql_type = BigInt)]
    pub processed_count: i64,
    #[diesel(sql_type = Bytea)]
    pub signature: Vec<u8>,
    #[diesel(sql_type = Text)]
    pub writer_id: String,
    #[diesel(sql_type = Timestamptz)]
    pub committed_at: DateTime<Utc>,
    #[diesel(sql_type = Timestamptz)]
    pub saved_at: DateTime<Utc>,
}

/// The monitor's committed snapshot row, if there is one.
pub async fn snapshot_row(conn: &mut AsyncPgConnection, id: Uuid) -> Option<SnapshotRow> {
    diesel::sql_query(
        "SELECT processed_count, signature, writer_id, committed_at, saved_at \
         FROM radar_runtime_checkpoints WHERE service_id = $1",
    )
    .bind::<SqlUuid, _>(id)
    .get_result(conn)
    .await
    .ok()
}

/// Waits until the committed snapshot satisfies `condition`.
pub async fn wait_snapshot(
    conn: &mut AsyncPgConnection,
    id: Uuid,
    within: Duration,
    what: &str,
    condition: impl Fn(&SnapshotRow) -> bool,
) -> SnapshotRow {
    poll::within(within)
        .wait_async(what, async || match snapshot_row(conn, id).await {
            Some(row) if condition(&row) => Ok(row),
            other => Err(other),
        })
        .await
}

#[derive(Debug, diesel::QueryableByName)]
struct Count {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

/// The sessions of the test database (other than this one) matching `filter`.
async fn other_sessions(conn: &mut AsyncPgConnection, filter: &str) -> i64 {
    let count: Count = diesel::sql_query(format!(
        "SELECT count(*) AS n FROM pg_stat_activity \
         WHERE datname = current_database() AND pid <> pg_backend_pid() AND {filter}"
    ))
    .get_result(conn)
    .await
    .expect("read pg_stat_activity");
    count.n
}

/// Waits until no other session is connected to the test database: after
/// a kill, PostgreSQL may still be finishing a commit the dead worker sent,
/// so the committed state is only final once its sessions are gone.
pub async fn wait_for_no_other_sessions(conn: &mut AsyncPgConnection, within: Duration) {
    poll::within(within)
        .every(Duration::from_millis(20))
        .wait_async("no other session is connected", async || {
            let n = other_sessions(conn, "true").await;
            poll::check(n == 0, || format!("{n} other sessions"))
        })
        .await
}

/// Holds one row `FOR UPDATE` in a transaction on a connection of its own
/// (`table`'s row of monitor `id`), until that connection ends the
/// transaction: writes that need the row wait meanwhile.
pub async fn lock_row(h: &Harness, table: &str, id: Uuid) -> AsyncPgConnection {
    let mut blocker = h.connect().await;
    diesel::sql_query("BEGIN")
        .execute(&mut blocker)
        .await
        .expect("begin");
    diesel::sql_query(format!(
        "SELECT 1 FROM {table} WHERE service_id = $1 FOR UPDATE"
    ))
    .bind::<SqlUuid, _>(id)
    .execute(&mut blocker)
    .await
    .expect("lock the row");
    blocker
}

/// Holds the monitor's snapshot row `FOR UPDATE` (see [`lock_row`]).
pub async fn lock_snapshot_row(h: &Harness, id: Uuid) -> AsyncPgConnection {
    lock_row(h, "radar_runtime_checkpoints", id).await
}

/// How many other sessions of the test database wait for a lock now.
pub async fn lock_waiters(conn: &mut AsyncPgConnection) -> i64 {
    other_sessions(conn, "wait_event_type = 'Lock'").await
}

/// Waits until some session of the test database waits for a row lock.
pub async fn wait_for_lock_waiter(conn: &mut AsyncPgConnection, within: Duration) {
    poll::within(within)
        .wait_async("a session waits for a row lock", async || {
            let n = lock_waiters(conn).await;
            poll::check(n > 0, || "no session waits for a lock")
        })
        .await
}

/// The side table [`keep_snapshot`] copies rows into.
const KEPT: &str = "radar_test_kept_snapshots";

/// The snapshot columns a write-back replaces (all but the key and the
/// commit time, which is the write-back's own).
const SNAPSHOT_COLUMNS: &str = "envelope, format_version, config_fingerprint, runtime_versions, \
     processed_count, observation_history_len, saved_at, payload_sha256, key_id, signature, \
     payload, writer_id";

/// Copies the monitor's committed snapshot row into a side table of the
/// test database, for [`write_back_kept_snapshot`]. Returns the copy's
/// readable columns.
pub async fn keep_snapshot(conn: &mut AsyncPgConnection, id: Uuid) -> SnapshotRow {
    diesel::sql_query(format!(
        "CREATE TABLE IF NOT EXISTS {KEPT} (LIKE radar_runtime_checkpoints)"
    ))
    .execute(conn)
    .await
    .expect("create the side table for kept snapshots");
    let copied = diesel::sql_query(format!(
        "INSERT INTO {KEPT} SELECT * FROM radar_runtime_checkpoints WHERE service_id = $1"
    ))
    .bind::<SqlUuid, _>(id)
    .execute(conn)
    .await
    .expect("copy the snapshot row");
    assert_eq!(copied, 1, "monitor {id} has a committed snapshot to keep");
    snapshot_row(conn, id).await.expect("the row just copied")
}

/// Puts the snapshot kept by [`keep_snapshot`] back into the monitor's row
/// and records it in the checkpoint ledger as the newest commit: to a
/// worker that loaded the row before, this is another writer's successor
/// (validly signed, and the ledger's newest). Runs on `conn`, inside the
/// transaction it may hold open (e.g. from [`lock_snapshot_row`]).
pub async fn write_back_kept_snapshot(conn: &mut AsyncPgConnection, id: Uuid) {
    let replaced = diesel::sql_query(format!(
        "UPDATE radar_runtime_checkpoints AS r SET ({SNAPSHOT_COLUMNS}, committed_at) = \
         (SELECT {SNAPSHOT_COLUMNS}, now() FROM {KEPT} WHERE service_id = $1) \
         WHERE r.service_id = $1"
    ))
    .bind::<SqlUuid, _>(id)
    .execute(conn)
    .await
    .expect("write the kept snapshot back");
    let recorded = diesel::sql_query(format!(
        "UPDATE radar_checkpoint_ledger SET sequence = sequence + 1, committed_at = now(), \
         signature = (SELECT signature FROM {KEPT} WHERE service_id = $1) \
         WHERE service_id = $1"
    ))
    .bind::<SqlUuid, _>(id)
    .execute(conn)
    .await
    .expect("record the kept snapshot in the ledger");
    assert_eq!(
        (replaced, recorded),
        (1, 1),
        "monitor {id}: the snapshot row and its ledger entry are replaced"
    );
}
