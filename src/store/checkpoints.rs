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

use std::{fmt, time::Duration};

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel_async::{AsyncConnection, RunQueryDsl};
use thiserror::Error;
use uuid::Uuid;

use super::stored::{LedgerEntry, SnapshotColumns, StoredSnapshot};
use super::{
    Pool, StoreError, checkout,
    evidence::{AlarmReconciliation, PendingResults, close_orphaned_alarms, insert_results},
    fence::Fence,
    health::HealthReporter,
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

/// How an attempt to write the first snapshot ended.
#[derive(Debug)]
pub enum Claim {
    /// This worker's snapshot is the row: it owns the monitor.
    Won(CheckpointWriter),
    /// Another worker's snapshot was there first.
    Lost(OwnershipLost),
}

/// How a fenced write ended. Each arm hands the writer on or retires it.
#[derive(Debug)]
pub enum WriteOutcome {
    Committed(CheckpointWriter),
    /// Nothing known was committed; the writer may retry with the same
    /// pending results.
    Failed {
        writer: CheckpointWriter,
        error: StoreError,
    },
    OwnershipLost(OwnershipLost),
}

/// Why the alarm reconciliation of a (re)started monitor did not happen.
#[derive(Debug)]
pub enum ReconcileError {
    Failed(StoreError),
    OwnershipLost(OwnershipLost),
}

/// Which write found out that another worker owns the snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteKind {
    InitialSnapshot,
    Checkpoint,
    EvidenceBatch,
    Health,
}

impl fmt::Display for WriteKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::InitialSnapshot => "initial snapshot",
            Self::Checkpoint => "checkpoint",
            Self::EvidenceBatch => "evidence batch",
            Self::Health => "health write",
        })
    }
}

/// Why a writer may write no more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LossReason {
    /// Another worker committed a successor snapshot.
    Successor,
    /// The monitor's graph run is recorded as failed: its generation is
    /// fenced for every writer, even one holding the row's signature.
    FailedRun,
}

impl fmt::Display for LossReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Successor => "another worker committed a successor",
            Self::FailedRun => "its graph run is recorded as failed (a fenced generation)",
        })
    }
}

/// A writer that found another worker's snapshot in its row, or a failed
/// run behind it. Terminal: it has no write methods, and its pending
/// results stay with the caller.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error(
    "Monitor {service_id} lost ownership of its snapshot: its {refused} was refused because \
     {reason} (this worker held token {token}). This worker stops the monitor and writes \
     nothing more for it; the new owner carries on."
)]
pub struct OwnershipLost {
    pub service_id: Uuid,
    /// Short form of the token this worker last held.
    pub token: String,
    pub refused: WriteKind,
    pub reason: LossReason,
}

/// The signing writer of one monitor's snapshot.
#[derive(Debug)]
pub struct CheckpointWriter {
    store: CheckpointStore,
    service_id: Uuid,
    fence: Fence,
    /// A graph run's writer: each write also checks, under the row lock,
    /// that the run is not recorded as failed.
    graph_run: bool,
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
        self.bounded(async {
            let mut conn = checkout(&self.pool).await?;
            let found = rows::table
                .find(service_id)
                .left_join(ledger::table.on(ledger::service_id.eq(rows::service_id)))
                .select((
                    SnapshotColumns::as_select(),
                    (ledger::sequence, ledger::signature).nullable(),
                ))
                .first::<(SnapshotColumns, Option<LedgerEntry>)>(&mut conn)
                .await
                .optional()?;
            Ok(found.map(|(columns, newest)| StoredSnapshot::new(columns, newest)))
        })
        .await
    }

    /// Writes the first snapshot of a monitor that had none. Exactly one of
    /// several racing workers wins; the others get `Lost`.
    pub async fn claim(&self, initial: &SealedSnapshot) -> Result<Claim, StoreError> {
        let service_id = initial.envelope.service_id;
        let inserted = self
            .bounded(async {
                let mut conn = checkout(&self.pool).await?;
                let inserted = conn
                    .transaction::<_, diesel::result::Error, _>(async |conn| {
                        let inserted = diesel::insert_into(rows::table)
                            .values(self.row_values(initial))
                            .on_conflict_do_nothing()
                            .execute(conn)
                            .await?;
                        if inserted == 1 {
                            record_in_ledger(conn, service_id, &initial.token).await?;
                        }
                        Ok(inserted)
                    })
                    .await;
                inserted.map_err(|e| self.db_error(e))
            })
            .await?;
        let fence = Fence::new(initial.token.clone());
        if inserted == 1 {
            Ok(Claim::Won(CheckpointWriter {
                store: self.clone(),
                service_id,
                fence,
                graph_run: false,
            }))
        } else {
            Ok(Claim::Lost(
                fence.lose(service_id, WriteKind::InitialSnapshot),
            ))
        }
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

    #[allow(clippy::type_complexity)]
    fn row_values<'a>(
        &'a self,
        s: &'a SealedSnapshot,
    ) -> (
        diesel::dsl::Eq<rows::service_id, Uuid>,
        diesel::dsl::Eq<rows::envelope, &'a [u8]>,
        diesel::dsl::Eq<rows::format_version, i32>,
        diesel::dsl::Eq<rows::config_fingerprint, &'a [u8]>,
        diesel::dsl::Eq<rows::runtime_versions, &'a str>,
        diesel::dsl::Eq<rows::processed_count, i64>,
        diesel::dsl::Eq<rows::observation_history_len, i32>,
        diesel::dsl::Eq<rows::saved_at, DateTime<Utc>>,
        diesel::dsl::Eq<rows::payload_sha256, &'a [u8]>,
        diesel::dsl::Eq<rows::key_id, &'a str>,
        diesel::dsl::Eq<rows::signature, &'a [u8]>,
        diesel::dsl::Eq<rows::payload, &'a [u8]>,
        diesel::dsl::Eq<rows::writer_id, &'a str>,
    ) {
        let e = &s.envelope;
        (
            rows::service_id.eq(e.service_id),
            rows::envelope.eq(s.bytes.envelope.as_slice()),
            rows::format_version.eq(i32::from(e.format_version)),
            rows::config_fingerprint.eq(e.config_fingerprint.as_slice()),
            rows::runtime_versions.eq(e.runtime_versions.as_str()),
            rows::processed_count.eq(i64::try_from(e.processed_count).unwrap_or(i64::MAX)),
            rows::observation_history_len
                .eq(i32::try_from(e.observation_history_len).unwrap_or(i32::MAX)),
            rows::saved_at.eq(e.saved_at),
            rows::payload_sha256.eq(e.payload_sha256.as_slice()),
            rows::key_id.eq(e.key_id.as_str()),
            rows::signature.eq(s.bytes.signature.as_slice()),
            rows::payload.eq(s.bytes.payload.as_slice()),
            rows::writer_id.eq(self.writer_id.as_str()),
        )
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

/// Records `token` as the monitor's newest committed snapshot, inside the
/// transaction that commits it, so a loader can tell a replayed older row
/// from the newest one.
async fn record_in_ledger(
    conn: &mut diesel_async::AsyncPgConnection,
    service_id: Uuid,
    token: &FencingToken,
) -> diesel::QueryResult<usize> {
    diesel::insert_into(ledger::table)
        .values((
            ledger::service_id.eq(service_id),
            ledger::sequence.eq(1),
            ledger::signature.eq(token.as_bytes()),
        ))
        .on_conflict(ledger::service_id)
        .do_update()
        .set((
            ledger::sequence.eq(ledger::sequence + 1),
            ledger::signature.eq(diesel::upsert::excluded(ledger::signature)),
            ledger::committed_at.eq(diesel::dsl::now),
        ))
        .execute(conn)
        .await
}

/// Why a fenced transaction was rolled back.
enum TxError {
    Db(diesel::result::Error),
    /// The row holds a signature this writer does not know.
    Refused,
    /// The graph run behind this writer is recorded as failed.
    RunFailed,
}

impl From<diesel::result::Error> for TxError {
    fn from(e: diesel::result::Error) -> Self {
        Self::Db(e)
    }
}

impl CheckpointWriter {
    pub fn service_id(&self) -> Uuid {
        self.service_id
    }

    /// The signature this writer last loaded or committed.
    pub fn token(&self) -> FencingToken {
        self.fence.lock().current.clone()
    }

    /// Every signature the row may hold while this writer still owns it:
    /// the last confirmed one and those of checkpoints whose commit reply
    /// was lost.
    pub fn accepted_tokens(&self) -> Vec<Vec<u8>> {
        self.fence.accepted(false)
    }

    /// This writer's monitor runs a graph: from now on no write commits
    /// once its run is recorded as failed, whoever recorded it.
    pub fn fenced_by_graph_run(mut self) -> Self {
        self.graph_run = true;
        self
    }

    /// A health reporter that follows this writer's token.
    pub fn health_reporter(&self) -> HealthReporter {
        HealthReporter::new(self.store.clone(), self.service_id, self.fence.clone())
    }

    /// Replaces the snapshot and commits `pending` with it, in one
    /// transaction. `pending` is only read: on any outcome but `Committed`
    /// the caller still holds it for the next attempt.
    pub async fn checkpoint(self, next: &SealedSnapshot, pending: &PendingResults) -> WriteOutcome {
        debug_assert_eq!(next.envelope.service_id, self.service_id);
        if self.fence.is_lost() {
            return WriteOutcome::OwnershipLost(self.lose(WriteKind::Checkpoint));
        }
        let accepted = self.fence.accepted(false);
        self.fence.begin(&next.token);
        let store = &self.store;
        // The compare-and-swap: replaces the row only if it holds a
        // signature this writer accepts.
        let update = diesel::update(
            rows::table
                .find(self.service_id)
                .filter(rows::signature.eq_any(&accepted)),
        )
        // The column default only applies on insert; each commit must stamp
        // its own time.
        .set((
            store.row_values(next),
            rows::committed_at.eq(diesel::dsl::now),
        ));
        let result = store
            .bounded(async {
                let mut conn = checkout(&store.pool).await?;
                let outcome = conn
                    .transaction::<_, TxError, _>(async |conn| {
                        if update.execute(conn).await? == 0 {
                            return Err(TxError::Refused);
                        }
                        if self.graph_run && generation_failed(conn, self.service_id).await? {
                            return Err(TxError::RunFailed);
                        }
                        record_in_ledger(conn, self.service_id, &next.token).await?;
                        if !pending.is_empty() {
                            insert_results(conn, self.service_id, next.token.as_bytes(), pending)
                                .await?;
                        }
                        Ok(())
                    })
                    .await;
                Ok(outcome)
            })
            .await;
        match result {
            Ok(Ok(())) => {
                self.fence.committed(&next.token);
                WriteOutcome::Committed(self)
            }
            Ok(Err(TxError::Refused)) => {
                WriteOutcome::OwnershipLost(self.lose(WriteKind::Checkpoint))
            }
            Ok(Err(TxError::RunFailed)) => {
                WriteOutcome::OwnershipLost(self.fenced_by_failed_run(WriteKind::Checkpoint))
            }
            Ok(Err(TxError::Db(e))) => {
                let error = self.store.db_error(e);
                self.fence.uncertain(&next.token);
                WriteOutcome::Failed {
                    writer: self,
                    error,
                }
            }
            Err(error) => {
                self.fence.uncertain(&next.token);
                WriteOutcome::Failed {
                    writer: self,
                    error,
                }
            }
        }
    }

    /// Commits a background batch of results between checkpoints: locks the
    /// snapshot row, checks it still holds this writer's signature, and
    /// writes the batch under that signature. `batch` is only read.
    pub async fn commit_evidence(self, batch: &PendingResults) -> WriteOutcome {
        if self.fence.is_lost() {
            return WriteOutcome::OwnershipLost(self.lose(WriteKind::EvidenceBatch));
        }
        let accepted = self.fence.accepted(false);
        let store = &self.store;
        let result = store
            .bounded(async {
                let mut conn = checkout(&store.pool).await?;
                let outcome = conn
                    .transaction::<_, TxError, _>(async |conn| {
                        let held =
                            lock_held_signature(conn, self.service_id, &accepted, self.graph_run)
                                .await?;
                        insert_results(conn, self.service_id, &held, batch).await?;
                        Ok(held)
                    })
                    .await;
                Ok(outcome)
            })
            .await;
        match result {
            Ok(Ok(held)) => {
                // The row may show a checkpoint whose commit we could not
                // confirm: it is ours, so adopt it.
                if let Some(token) = FencingToken::from_slice(&held) {
                    self.fence.confirm(&token);
                }
                WriteOutcome::Committed(self)
            }
            Ok(Err(TxError::Refused)) => {
                WriteOutcome::OwnershipLost(self.lose(WriteKind::EvidenceBatch))
            }
            Ok(Err(TxError::RunFailed)) => {
                WriteOutcome::OwnershipLost(self.fenced_by_failed_run(WriteKind::EvidenceBatch))
            }
            Ok(Err(TxError::Db(e))) => WriteOutcome::Failed {
                error: self.store.db_error(e),
                writer: self,
            },
            Err(error) => WriteOutcome::Failed {
                writer: self,
                error,
            },
        }
    }

    /// After the first commit of a (re)started monitor: closes the alarms
    /// its detector does not know (all open ones but `keep_open`, the
    /// restored detector's own) and reads the highest stored alarm number,
    /// under the row lock and this writer's signature, like an evidence
    /// batch.
    pub async fn reconcile_alarms(
        self,
        keep_open: Option<DateTime<Utc>>,
    ) -> Result<(Self, AlarmReconciliation), ReconcileError> {
        if self.fence.is_lost() {
            return Err(ReconcileError::OwnershipLost(
                self.lose(WriteKind::EvidenceBatch),
            ));
        }
        let accepted = self.fence.accepted(false);
        let store = &self.store;
        let result = store
            .bounded(async {
                let mut conn = checkout(&store.pool).await?;
                let outcome = conn
                    .transaction::<_, TxError, _>(async |conn| {
                        let held =
                            lock_held_signature(conn, self.service_id, &accepted, self.graph_run)
                                .await?;
                        Ok(close_orphaned_alarms(conn, self.service_id, &held, keep_open).await?)
                    })
                    .await;
                Ok(outcome)
            })
            .await;
        match result {
            Ok(Ok(found)) => Ok((self, found)),
            Ok(Err(TxError::Refused)) => Err(ReconcileError::OwnershipLost(
                self.lose(WriteKind::EvidenceBatch),
            )),
            Ok(Err(TxError::RunFailed)) => Err(ReconcileError::OwnershipLost(
                self.fenced_by_failed_run(WriteKind::EvidenceBatch),
            )),
            Ok(Err(TxError::Db(e))) => Err(ReconcileError::Failed(self.store.db_error(e))),
            Err(error) => Err(ReconcileError::Failed(error)),
        }
    }

    fn lose(self, refused: WriteKind) -> OwnershipLost {
        self.fence.lose(self.service_id, refused)
    }

    fn fenced_by_failed_run(self, refused: WriteKind) -> OwnershipLost {
        OwnershipLost {
            reason: LossReason::FailedRun,
            ..self.lose(refused)
        }
    }
}

/// Locks the monitor's snapshot row and returns the signature it holds, if
/// this writer accepts it and (for a graph run) the run is not recorded as
/// failed: the check every write between checkpoints makes under the lock.
async fn lock_held_signature(
    conn: &mut diesel_async::AsyncPgConnection,
    service_id: Uuid,
    accepted: &[Vec<u8>],
    graph_run: bool,
) -> Result<Vec<u8>, TxError> {
    let signature: Option<Vec<u8>> = rows::table
        .find(service_id)
        .select(rows::signature)
        .for_update()
        .first(conn)
        .await
        .optional()?;
    let Some(held) = signature.filter(|s| accepted.contains(s)) else {
        return Err(TxError::Refused);
    };
    if graph_run && generation_failed(conn, service_id).await? {
        return Err(TxError::RunFailed);
    }
    Ok(held)
}

/// Whether the monitor's graph run is recorded as failed. Called after the
/// snapshot row is locked: as a statement of its own it sees a failure
/// record that committed while this transaction waited for the lock.
async fn generation_failed(
    conn: &mut diesel_async::AsyncPgConnection,
    service_id: Uuid,
) -> Result<bool, diesel::result::Error> {
    use super::schema::graph_runs;
    diesel::select(diesel::dsl::exists(
        graph_runs::table
            .filter(graph_runs::service_id.eq(service_id))
            .filter(graph_runs::status.eq("failed")),
    ))
    .get_result(conn)
    .await
}
