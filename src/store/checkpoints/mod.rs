//! The snapshot row of each monitor, fenced by its signature.
//!
//! A writer owns a monitor's snapshot for as long as the row holds a
//! signature it loaded or committed. The first snapshot is an insert that
//! only one worker can win; every later write compares the row's signature
//! first (checkpoints by a conditional update, evidence batches under the
//! row lock, health writes by a plain read). A refusal turns the writer into
//! [`OwnershipLost`], which cannot write anything.
//!
//! `RADAR_DB_WRITE_ENABLED=false` is the caller's choice not to build a
//! [`CheckpointStore`] at all (hold an `Option<CheckpointStore>`): then
//! nothing is read or written and the monitor starts fresh.

mod firsts;
mod outcome;
mod reads;
mod writer;

use std::{collections::HashMap, fmt, time::Duration};

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel_async::{AsyncConnection, RunQueryDsl};
use uuid::Uuid;

pub use self::firsts::{
    FirstCheckpointWriter, FirstCheckpoints, MAX_FIRST_CHECKPOINTS_PER_TRANSACTION,
};
pub use self::outcome::{Claim, LossReason, NotCommitted, OwnershipLost, WriteKind, WriteOutcome};
pub use self::reads::{MAX_READS_PER_STATEMENT, SnapshotReader, SnapshotReads};
pub use self::writer::CheckpointWriter;
use self::writer::{CloseOrphanedAlarms, EvidenceBatch, HeldWrite, Swap, TxError};
use super::evidence::{AlarmReconciliation, PendingResults};
use super::stored::{LedgerEntry, SnapshotColumns, StoredSnapshot};
use super::{
    Pool, StoreError,
    cached::{StaticSql, static_sql},
    checkout,
    fence::Fence,
    schema::{radar_checkpoint_ledger as ledger, radar_runtime_checkpoints as rows},
};
use crate::snapshot::{FencingToken, SealedSnapshot};

/// Snapshot reads and writes for one worker process.
#[derive(Clone)]
pub struct CheckpointStore {
    pool: Pool,
    writer_id: String,
    timeout: Duration,
}

impl fmt::Debug for CheckpointStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CheckpointStore")
            .field("writer_id", &self.writer_id)
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl CheckpointStore {
    /// `writer_id` names this worker instance in the row (diagnostics).
    /// The pool's statement timeout (`RADAR_CHECKPOINT_TIMEOUT_SECONDS` in a
    /// worker) bounds each statement; twice that bounds a whole write.
    pub fn new(pool: Pool, writer_id: impl Into<String>) -> Self {
        Self {
            timeout: pool.statement_timeout(),
            pool,
            writer_id: writer_id.into(),
        }
    }

    pub fn writer_id(&self) -> &str {
        &self.writer_id
    }

    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// The row of a monitor, if it has one, with the ledger's record of
    /// its newest commit.
    pub async fn load_snapshot(
        &self,
        service_id: Uuid,
    ) -> Result<Option<StoredSnapshot>, StoreError> {
        let mut found = self.load_snapshots(&[service_id]).await?;
        Ok(found.remove(&service_id))
    }

    /// The rows of `ids` (those that have one), in one statement, each with
    /// the ledger's record of its newest commit.
    pub async fn load_snapshots(
        &self,
        ids: &[Uuid],
    ) -> Result<HashMap<Uuid, StoredSnapshot>, StoreError> {
        self.bounded(async {
            let mut conn = checkout(&self.pool).await?;
            let found = rows::table
                .filter(rows::service_id.eq_any(ids))
                .left_join(ledger::table.on(ledger::service_id.eq(rows::service_id)))
                .select((
                    SnapshotColumns::as_select(),
                    (ledger::sequence, ledger::signature).nullable(),
                ))
                .load::<(SnapshotColumns, Option<LedgerEntry>)>(&mut conn)
                .await?;
            Ok(found
                .into_iter()
                .map(|(columns, newest)| {
                    let stored = StoredSnapshot::new(columns, newest);
                    (stored.service_id(), stored)
                })
                .collect())
        })
        .await
    }

    /// Writes the first snapshot of a monitor that had none. Exactly one of
    /// several racing workers wins; the others get `Lost`.
    pub async fn claim(&self, initial: &SealedSnapshot) -> Result<Claim, StoreError> {
        let empty = PendingResults::default();
        let (claim, ()) = self
            .claim_then(initial, false, EvidenceBatch(&empty))
            .await?;
        Ok(claim)
    }

    /// The claim of a starting monitor: [`Self::claim`] with the alarm
    /// reconciliation of [`CheckpointWriter::first_checkpoint`] in the same
    /// transaction. A graph run's claim is also refused (`Lost`) when its
    /// run is recorded as failed. The reconciliation is the default (none
    /// closed, no alarm) unless the claim is won.
    pub async fn first_claim(
        &self,
        initial: &SealedSnapshot,
        keep_open: Option<DateTime<Utc>>,
        graph_run: bool,
    ) -> Result<(Claim, AlarmReconciliation), StoreError> {
        self.claim_then(initial, graph_run, CloseOrphanedAlarms { keep_open })
            .await
    }

    async fn claim_then<W: HeldWrite>(
        &self,
        initial: &SealedSnapshot,
        graph_run: bool,
        then: W,
    ) -> Result<(Claim, W::Output), StoreError>
    where
        W::Output: Default,
    {
        let service_id = initial.envelope.service_id;
        let outcome = self
            .bounded(async {
                let mut conn = checkout(&self.pool).await?;
                let outcome = conn
                    .transaction::<_, TxError, _>(async |conn| {
                        // A failed run's generation is fenced for every
                        // writer: the insert is rolled back.
                        let swap = Swap {
                            statement: claim_statement(initial, &self.writer_id),
                            service_id,
                            token: &initial.token,
                            graph_run,
                        };
                        swap.then(conn, then).await
                    })
                    .await;
                match outcome {
                    Ok(output) => Ok(ClaimTx::Won(output)),
                    Err(TxError::Refused) => Ok(ClaimTx::Lost(LossReason::Successor)),
                    Err(TxError::RunFailed) => Ok(ClaimTx::Lost(LossReason::FailedRun)),
                    Err(TxError::Db(e)) => Err(self.db_error(e)),
                }
            })
            .await?;
        let fence = Fence::new(initial.token.clone());
        Ok(match outcome {
            ClaimTx::Won(output) => (
                Claim::Won(CheckpointWriter {
                    store: self.clone(),
                    service_id,
                    fence,
                    graph_run,
                }),
                output,
            ),
            ClaimTx::Lost(reason) => (
                Claim::Lost(OwnershipLost {
                    reason,
                    ..fence.lose(service_id, WriteKind::InitialSnapshot)
                }),
                W::Output::default(),
            ),
        })
    }

    /// A writer for a snapshot this worker loaded and restored.
    pub fn resume(&self, service_id: Uuid, loaded: FencingToken) -> CheckpointWriter {
        CheckpointWriter {
            store: self.clone(),
            service_id,
            fence: Fence::new(loaded),
            graph_run: false,
        }
    }

    /// Runs a database operation with an overall deadline, as a backstop
    /// for the per-statement timeout (e.g. a pool that cannot connect).
    pub(super) async fn bounded<T>(
        &self,
        operation: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        match tokio::time::timeout(self.timeout * 2, operation).await {
            Ok(result) => result,
            Err(_) => Err(self.timeout_error()),
        }
    }

    pub(super) fn db_error(&self, e: diesel::result::Error) -> StoreError {
        let cancelled = matches!(&e, diesel::result::Error::DatabaseError(_, info)
            if info.message().contains("statement timeout") || info.message().contains("lock timeout"));
        if cancelled {
            self.timeout_error()
        } else {
            StoreError::Query(e)
        }
    }

    fn timeout_error(&self) -> StoreError {
        StoreError::Timeout {
            seconds: self.timeout.as_secs_f64().ceil() as u64,
        }
    }
}

/// How a claim's transaction ended.
enum ClaimTx<T> {
    Won(T),
    Lost(LossReason),
}

/// The claim of a fresh monitor's row: inserts `s` unless a row exists
/// (then nothing is inserted and the claim is lost). The commit time is
/// the column's default.
fn claim_statement<'a>(s: &'a SealedSnapshot, writer_id: &'a str) -> StaticSql<'a> {
    with_row(
        static_sql(
            "INSERT INTO radar_runtime_checkpoints (service_id, envelope, format_version, \
               config_fingerprint, runtime_versions, processed_count, observation_history_len, \
               saved_at, payload_sha256, key_id, signature, payload, writer_id) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) \
             ON CONFLICT DO NOTHING",
        ),
        s,
        writer_id,
    )
}

/// The compare-and-swap of a checkpoint: replaces the monitor's row
/// with `s` only if it holds one of the `accepted` signatures, and
/// stamps the commit's time (the column default only applies on
/// insert). Every checkpoint runs it, so it is a constant text each
/// connection prepares once ([`static_sql`]); diesel's `update` is
/// never cached, and PostgreSQL parsed and planned it on every commit
/// (BENCHMARKS.md section 6, round 16).
pub(super) fn replace_statement<'a>(
    s: &'a SealedSnapshot,
    writer_id: &'a str,
    accepted: &'a [Vec<u8>],
) -> StaticSql<'a> {
    use diesel::sql_types::{Array, Bytea};
    with_row(
        static_sql(
            "UPDATE radar_runtime_checkpoints SET envelope = $2, format_version = $3, \
               config_fingerprint = $4, runtime_versions = $5, processed_count = $6, \
               observation_history_len = $7, saved_at = $8, payload_sha256 = $9, key_id = $10, \
               signature = $11, payload = $12, writer_id = $13, committed_at = now() \
             WHERE service_id = $1 AND signature = ANY($14)",
        ),
        s,
        writer_id,
    )
    .bind::<Array<Bytea>, _>(accepted)
}

/// Binds a snapshot row's columns as `$1` to `$13`, in the order of
/// [`claim_statement`]'s column list: the one place that maps a sealed
/// snapshot to its row, for the claim and for every replacement.
fn with_row<'a>(
    statement: StaticSql<'a>,
    s: &'a SealedSnapshot,
    writer_id: &'a str,
) -> StaticSql<'a> {
    use diesel::sql_types::{Bytea, Int4, Int8, Text, Timestamptz, Uuid as SqlUuid};
    let e = &s.envelope;
    statement
        .bind::<SqlUuid, _>(e.service_id)
        .bind::<Bytea, _>(s.bytes.envelope.as_slice())
        .bind::<Int4, _>(i32::from(e.format_version))
        .bind::<Bytea, _>(e.config_fingerprint.as_slice())
        .bind::<Text, _>(e.runtime_versions.as_str())
        .bind::<Int8, _>(i64::try_from(e.processed_count).unwrap_or(i64::MAX))
        .bind::<Int4, _>(i32::try_from(e.observation_history_len).unwrap_or(i32::MAX))
        .bind::<Timestamptz, _>(e.saved_at)
        .bind::<Bytea, _>(e.payload_sha256.as_slice())
        .bind::<Text, _>(e.key_id.as_str())
        .bind::<Bytea, _>(s.bytes.signature.as_slice())
        .bind::<Bytea, _>(s.bytes.payload.as_slice())
        .bind::<Text, _>(writer_id)
}

/// Records `token` as the monitor's newest committed snapshot, inside the
/// transaction that commits it, so a loader can tell a replayed older row
/// from the newest one. Every commit runs it: a constant text each
/// connection prepares once (diesel never caches an upsert).
pub(super) fn ledger_statement(service_id: Uuid, token: &FencingToken) -> StaticSql<'_> {
    use diesel::sql_types::{Bytea, Uuid as SqlUuid};
    static_sql(
        "INSERT INTO radar_checkpoint_ledger (service_id, sequence, signature) VALUES ($1, 1, $2) \
         ON CONFLICT (service_id) DO UPDATE SET sequence = radar_checkpoint_ledger.sequence + 1, \
           signature = EXCLUDED.signature, committed_at = now()",
    )
    .bind::<SqlUuid, _>(service_id)
    .bind::<Bytea, _>(token.as_bytes())
}

#[cfg(test)]
mod tests {
    use diesel::{pg::Pg, query_builder::QueryFragment};

    use super::*;

    #[test]
    fn a_checkpoints_statements_are_prepared_once_per_connection() {
        let sealed = crate::snapshot::tests::sealed(3);
        let accepted = vec![b"old".to_vec(), sealed.token.as_bytes().to_vec()];
        let replace = replace_statement(&sealed, "worker", &accepted);
        assert_eq!(replace.is_safe_to_cache_prepared(&Pg), Ok(true));
        let sql = diesel::debug_query::<Pg, _>(&replace).to_string();
        assert!(sql.contains("signature = ANY($14)"), "{sql}");
        let ledger = ledger_statement(sealed.envelope.service_id, &sealed.token);
        assert_eq!(ledger.is_safe_to_cache_prepared(&Pg), Ok(true));
        let claim = claim_statement(&sealed, "worker");
        let sql = diesel::debug_query::<Pg, _>(&claim).to_string();
        assert!(sql.contains("$12, $13) ON CONFLICT DO NOTHING"), "{sql}");
    }
}
