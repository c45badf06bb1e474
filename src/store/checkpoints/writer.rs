//! The signing writer of one monitor's snapshot: checkpoints, evidence
//! batches and alarm reconciliation, each fenced by the row's signature.

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use uuid::Uuid;

use super::{
    CheckpointStore, LossReason, NotCommitted, OwnershipLost, WriteKind, WriteOutcome,
    ledger_statement,
};
use crate::snapshot::{FencingToken, SealedSnapshot};
use crate::store::{
    cached::StaticSql,
    checkout,
    evidence::{AlarmReconciliation, PendingResults, close_orphaned_alarms, insert_results},
    fence::Fence,
    health::HealthReporter,
    schema::radar_runtime_checkpoints as rows,
};

/// The signing writer of one monitor's snapshot.
#[derive(Debug)]
pub struct CheckpointWriter {
    pub(super) store: CheckpointStore,
    pub(super) service_id: Uuid,
    pub(super) fence: Fence,
    /// A graph run's writer: each write also checks, under the row lock,
    /// that the run is not recorded as failed.
    pub(super) graph_run: bool,
}

/// Why a fenced transaction was rolled back.
pub(super) enum TxError {
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
        self.fence.last_token()
    }

    /// Every signature the row may hold while this writer still owns it:
    /// the last confirmed one and those of checkpoints whose commit reply
    /// was lost. None once its health reporter saw the ownership lost.
    pub fn accepted_tokens(&self) -> Vec<Vec<u8>> {
        self.fence.accepted().unwrap_or_default()
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
        match self.replace(next, EvidenceBatch(pending)).await {
            Ok((writer, ())) => WriteOutcome::Committed(writer),
            Err(not) => not.into(),
        }
    }

    /// The first checkpoint of a restarted monitor: replaces the snapshot
    /// it loaded and, in the same transaction (under the row lock the
    /// replacement took, stamped with the new signature), closes the alarms
    /// its detector does not know and reads the highest stored alarm
    /// number (see [`close_orphaned_alarms`]).
    pub async fn first_checkpoint(
        self,
        next: &SealedSnapshot,
        keep_open: Option<DateTime<Utc>>,
    ) -> Result<(Self, AlarmReconciliation), NotCommitted> {
        self.replace(next, CloseOrphanedAlarms { keep_open }).await
    }

    /// The compare-and-swap: replaces the row only if it holds a signature
    /// this writer accepts, then makes `then` under the new signature in
    /// the same transaction.
    async fn replace<W: HeldWrite>(
        self,
        next: &SealedSnapshot,
        then: W,
    ) -> Result<(Self, W::Output), NotCommitted> {
        debug_assert_eq!(next.envelope.service_id, self.service_id);
        let Some(accepted) = self.fence.begin(&next.token) else {
            return Err(NotCommitted::OwnershipLost(
                self.lose(WriteKind::Checkpoint),
            ));
        };
        let store = &self.store;
        let result = store
            .bounded(async {
                let mut conn = checkout(&store.pool).await?;
                let outcome = conn
                    .transaction::<_, TxError, _>(async |conn| {
                        let update = super::replace_statement(next, &store.writer_id, &accepted);
                        let swap = Swap {
                            statement: update,
                            service_id: self.service_id,
                            token: &next.token,
                            graph_run: self.graph_run,
                        };
                        swap.then(conn, then).await
                    })
                    .await;
                Ok(outcome)
            })
            .await;
        match result {
            Ok(Ok(output)) => {
                self.fence.committed(&next.token);
                Ok((self, output))
            }
            Ok(Err(TxError::Refused)) => Err(NotCommitted::OwnershipLost(
                self.lose(WriteKind::Checkpoint),
            )),
            Ok(Err(TxError::RunFailed)) => Err(NotCommitted::OwnershipLost(
                self.fenced_by_failed_run(WriteKind::Checkpoint),
            )),
            Ok(Err(TxError::Db(e))) => {
                let error = self.store.db_error(e);
                self.fence.uncertain(&next.token);
                Err(NotCommitted::Failed {
                    writer: self,
                    error,
                })
            }
            Err(error) => {
                self.fence.uncertain(&next.token);
                Err(NotCommitted::Failed {
                    writer: self,
                    error,
                })
            }
        }
    }

    /// Commits a background batch of results between checkpoints: locks the
    /// snapshot row, checks it still holds this writer's signature, and
    /// writes the batch under that signature. `batch` is only read.
    pub async fn commit_evidence(self, batch: &PendingResults) -> WriteOutcome {
        match self.write_under_held_signature(EvidenceBatch(batch)).await {
            Ok((writer, held, ())) => {
                // The row may show a checkpoint whose commit we could not
                // confirm: it is ours, so adopt it.
                if let Some(token) = FencingToken::from_slice(&held) {
                    writer.fence.confirm(&token);
                }
                WriteOutcome::Committed(writer)
            }
            Err(not) => not.into(),
        }
    }

    /// The bounded transaction every write between checkpoints makes: locks
    /// the snapshot row, checks it holds a signature this writer accepts
    /// (and, for a graph run, that the run is not recorded as failed), then
    /// makes `write` under that signature. A refusal counts as a refused
    /// evidence batch. Returns the signature the row held.
    async fn write_under_held_signature<W: HeldWrite>(
        self,
        write: W,
    ) -> Result<(Self, Vec<u8>, W::Output), NotCommitted> {
        let Some(accepted) = self.fence.accepted() else {
            return Err(NotCommitted::OwnershipLost(
                self.lose(WriteKind::EvidenceBatch),
            ));
        };
        let store = &self.store;
        let result = store
            .bounded(async {
                let mut conn = checkout(&store.pool).await?;
                let outcome = conn
                    .transaction::<_, TxError, _>(async |conn| {
                        let held =
                            lock_held_signature(conn, self.service_id, &accepted, self.graph_run)
                                .await?;
                        let output = write.write(conn, self.service_id, &held).await?;
                        Ok((held, output))
                    })
                    .await;
                Ok(outcome)
            })
            .await;
        match result {
            Ok(Ok((held, output))) => Ok((self, held, output)),
            Ok(Err(TxError::Refused)) => Err(NotCommitted::OwnershipLost(
                self.lose(WriteKind::EvidenceBatch),
            )),
            Ok(Err(TxError::RunFailed)) => Err(NotCommitted::OwnershipLost(
                self.fenced_by_failed_run(WriteKind::EvidenceBatch),
            )),
            Ok(Err(TxError::Db(e))) => Err(NotCommitted::Failed {
                error: self.store.db_error(e),
                writer: self,
            }),
            Err(error) => Err(NotCommitted::Failed {
                writer: self,
                error,
            }),
        }
    }

    pub(super) fn lose(self, refused: WriteKind) -> OwnershipLost {
        self.fence.lose(self.service_id, refused)
    }

    fn fenced_by_failed_run(self, refused: WriteKind) -> OwnershipLost {
        OwnershipLost {
            reason: LossReason::FailedRun,
            ..self.lose(refused)
        }
    }
}

/// A write made under the snapshot row's lock, stamped with the signature
/// the row holds.
pub(super) trait HeldWrite: Send {
    type Output: Send;

    /// Sends its statements on `conn` when first polled, after those of
    /// every future polled before it (see [`Swap::then`]).
    fn write<'c>(
        self,
        conn: &'c AsyncPgConnection,
        service_id: Uuid,
        held: &'c [u8],
    ) -> impl Future<Output = Result<Self::Output, diesel::result::Error>> + Send + 'c
    where
        Self: 'c;
}

/// The compare-and-swap that opens every fenced transaction which writes a
/// snapshot (a claim's insert or a checkpoint's conditional update), and
/// what follows it under the new signature.
pub(super) struct Swap<'a> {
    /// Affects the snapshot row only if this writer may write it.
    pub(super) statement: StaticSql<'a>,
    pub(super) service_id: Uuid,
    pub(super) token: &'a FencingToken,
    /// Also check, under the row lock, that the graph run has not failed.
    pub(super) graph_run: bool,
}

impl Swap<'_> {
    /// Runs the swap, the graph run's check, the ledger entry and `then`
    /// inside the caller's transaction, in that order, as one pipeline: all
    /// are sent before the first reply is read (one round trip instead of
    /// one per statement; each commit is a few round trips, at thousands of
    /// starts a second of PostgreSQL's CPU, BENCHMARKS.md section 6, round
    /// 19). PostgreSQL runs them one after the other in the order sent, so
    /// each still runs under the row lock the swap took. A refused swap
    /// (nothing affected) or a failed run rolls the whole transaction back,
    /// including what the later statements did; the first statement's
    /// failure is the one reported.
    pub(super) async fn then<W: HeldWrite>(
        self,
        conn: &AsyncPgConnection,
        then: W,
    ) -> Result<W::Output, TxError> {
        let Self {
            statement,
            service_id,
            token,
            graph_run,
        } = self;
        let mut shared = conn;
        let swapped = statement.execute(&mut shared);
        let failed = async move {
            match graph_run {
                true => generation_failed(conn, service_id).await.map(Some),
                false => Ok(None),
            }
        };
        let ledger = ledger_statement(service_id, token).execute(&mut shared);
        let written = then.write(conn, service_id, token.as_bytes());
        // `join4` polls in argument order: the order the statements are sent.
        let (swapped, failed, ledger, written) =
            futures_util::future::join4(swapped, failed, ledger, written).await;
        if swapped? == 0 {
            return Err(TxError::Refused);
        }
        if failed? == Some(true) {
            return Err(TxError::RunFailed);
        }
        ledger?;
        Ok(written?)
    }
}

/// A background batch of results.
pub(super) struct EvidenceBatch<'a>(pub(super) &'a PendingResults);

impl HeldWrite for EvidenceBatch<'_> {
    type Output = ();

    fn write<'c>(
        self,
        conn: &'c AsyncPgConnection,
        service_id: Uuid,
        held: &'c [u8],
    ) -> impl Future<Output = Result<(), diesel::result::Error>> + Send + 'c
    where
        Self: 'c,
    {
        insert_results(conn, service_id, held, self.0)
    }
}

/// The close of the alarms a restored detector does not know.
pub(super) struct CloseOrphanedAlarms {
    pub(super) keep_open: Option<DateTime<Utc>>,
}

impl HeldWrite for CloseOrphanedAlarms {
    type Output = AlarmReconciliation;

    fn write<'c>(
        self,
        conn: &'c AsyncPgConnection,
        service_id: Uuid,
        held: &'c [u8],
    ) -> impl Future<Output = Result<AlarmReconciliation, diesel::result::Error>> + Send + 'c
    where
        Self: 'c,
    {
        close_orphaned_alarms(conn, service_id, held, self.keep_open)
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
pub(super) async fn generation_failed(
    mut conn: &AsyncPgConnection,
    service_id: Uuid,
) -> Result<bool, diesel::result::Error> {
    use crate::store::schema::graph_runs;
    diesel::select(diesel::dsl::exists(
        graph_runs::table
            .filter(graph_runs::service_id.eq(service_id))
            .filter(graph_runs::status.eq("failed")),
    ))
    .get_result(&mut conn)
    .await
}
