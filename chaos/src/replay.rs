//! The replayed snapshot row: what a database writer without the key can
//! try. The driver copies a monitor's validly signed row, lets the monitor
//! move on, then writes the old copy back. The monitor's owner is refused
//! its next write (the row holds a signature it does not know) and stops
//! the monitor; the next start refuses the row as `replayed` and persists
//! that in the monitor's status. Then the driver puts the newest row back
//! (the operator's repair) and restarts the shard's worker. Its sessions
//! are named [`REPLAY_WRITER`], so the checks can tell its writes apart.

use anyhow::Result;
use diesel::sql_types::{Text, Uuid as SqlUuid};
use diesel_async::{AsyncConnection, RunQueryDsl};
use uuid::Uuid;

use crate::observe::connect;

pub use crate::check::REPLAY_WRITER;

/// The columns a replay writes back (everything the signature covers and
/// the readable copies; `service_id` stays).
const COLUMNS: &str = "envelope = o.envelope, format_version = o.format_version, \
    config_fingerprint = o.config_fingerprint, runtime_versions = o.runtime_versions, \
    processed_count = o.processed_count, observation_history_len = o.observation_history_len, \
    saved_at = o.saved_at, payload_sha256 = o.payload_sha256, key_id = o.key_id, \
    signature = o.signature, payload = o.payload, writer_id = o.writer_id, \
    committed_at = o.committed_at";

/// The driver's database URL with its replay sessions' name.
pub fn url(db_url: &str) -> String {
    db_url.replace(
        "application_name=radar-chaos",
        &format!("application_name={REPLAY_WRITER}"),
    )
}

async fn run(url: &str, sql: &str, monitor: Uuid) -> Result<usize> {
    let mut conn = connect(url).await?;
    Ok(diesel::sql_query(sql)
        .bind::<SqlUuid, _>(monitor)
        .execute(&mut conn)
        .await?)
}

/// Keeps a copy of the monitor's row as it is now.
pub async fn save(url: &str, monitor: Uuid) -> Result<()> {
    let mut conn = connect(url).await?;
    for sql in [
        "CREATE TABLE IF NOT EXISTS chaos_replay_old AS \
         SELECT * FROM radar_runtime_checkpoints WITH NO DATA",
        "CREATE TABLE IF NOT EXISTS chaos_replay_new AS \
         SELECT * FROM radar_runtime_checkpoints WITH NO DATA",
        "TRUNCATE chaos_replay_old, chaos_replay_new",
    ] {
        diesel::sql_query(sql).execute(&mut conn).await?;
    }
    run(
        url,
        "INSERT INTO chaos_replay_old SELECT * FROM radar_runtime_checkpoints WHERE service_id = $1",
        monitor,
    )
    .await?;
    Ok(())
}

/// Writes the saved copy back, keeping the newest row for the repair.
/// False when the row has not moved on since the copy (nothing replayed).
pub async fn replay(url: &str, monitor: Uuid) -> Result<bool> {
    let mut conn = connect(url).await?;
    let write_back = format!(
        "UPDATE radar_runtime_checkpoints c SET {COLUMNS} FROM chaos_replay_old o \
         WHERE c.service_id = $1 AND o.service_id = $1 AND c.signature <> o.signature"
    );
    let replayed = conn
        .transaction::<_, diesel::result::Error, _>(async |conn| {
            // Under the row lock no checkpoint commits between keeping the
            // newest row and writing the copy back, so the repair puts back
            // exactly the row the checkpoint ledger names as the newest.
            diesel::sql_query(
                "SELECT 1 FROM radar_runtime_checkpoints WHERE service_id = $1 FOR UPDATE",
            )
            .bind::<SqlUuid, _>(monitor)
            .execute(conn)
            .await?;
            for sql in [
                "DELETE FROM chaos_replay_new WHERE service_id = $1",
                "INSERT INTO chaos_replay_new SELECT * FROM radar_runtime_checkpoints \
                 WHERE service_id = $1",
            ] {
                diesel::sql_query(sql)
                    .bind::<SqlUuid, _>(monitor)
                    .execute(conn)
                    .await?;
            }
            diesel::sql_query(&write_back)
                .bind::<SqlUuid, _>(monitor)
                .execute(conn)
                .await
        })
        .await?;
    Ok(replayed == 1)
}

/// Puts the newest row back, if the row still holds the replayed copy.
pub async fn repair(url: &str, monitor: Uuid) -> Result<bool> {
    let sql = format!(
        "UPDATE radar_runtime_checkpoints c SET {COLUMNS} FROM chaos_replay_new o \
         WHERE c.service_id = $1 AND o.service_id = $1 \
         AND c.signature = (SELECT signature FROM chaos_replay_old WHERE service_id = $1)"
    );
    Ok(run(url, &sql, monitor).await? == 1)
}

#[derive(diesel::QueryableByName)]
struct Reported {
    #[diesel(sql_type = Text)]
    state: String,
}

/// Whether the monitor's status reports the refused replay.
pub async fn reported(url: &str, monitor: Uuid) -> Result<bool> {
    let mut conn = connect(url).await?;
    let rows: Vec<Reported> = diesel::sql_query(
        "SELECT state FROM radar_operational_status WHERE service_id = $1 \
         AND state = 'startup_failed' AND last_error LIKE '%replayed%'",
    )
    .bind::<SqlUuid, _>(monitor)
    .load(&mut conn)
    .await?;
    Ok(rows.iter().any(|r| r.state == "startup_failed"))
}
