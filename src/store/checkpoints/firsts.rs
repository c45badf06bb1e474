//! The first checkpoints of monitors restarting together, written in one
//! transaction. A worker restarting thousands of monitors made one
//! transaction per monitor (`BEGIN`, the swap's pipeline, `COMMIT`: three
//! round trips, a pool checkout and a commit each); the protocol and the
//! commits were about half of PostgreSQL's CPU in a start of 10,000
//! (BENCHMARKS.md section 6, rounds 19 and 20).
//!
//! Each monitor keeps the semantics of [`CheckpointWriter::first_checkpoint`]:
//! its row is replaced only if it holds a signature its writer accepts, and
//! only then, under the row lock and stamped with the new signature, its
//! ledger entry is written and the alarms its detector does not know are
//! closed. One transaction carries up to
//! [`MAX_FIRST_CHECKPOINTS_PER_TRANSACTION`] monitors in four round trips:
//!
//! 1. lock the batch's rows, skipping those another transaction holds;
//! 2. every locked monitor's compare-and-swap, as one pipeline;
//! 3. the ledger entry and the alarm reconciliation of each monitor whose
//!    swap succeeded, as one pipeline;
//! 4. `COMMIT`.
//!
//! A refused swap affects nothing and is followed by nothing, so it does not
//! touch the other monitors' writes. A row held by another transaction (an
//! old owner's checkpoint in flight, a frozen process's open transaction)
//! never delays the others: that monitor writes alone afterwards, waiting
//! for the row as it always did. Nothing waits to fill a batch (a lone
//! restart writes as before, a batch grows while the previous one is in
//! flight), and a batch whose transaction fails hands no shared error to
//! its monitors: each then writes alone, its token kept acceptable in case
//! the failed commit did happen.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use tokio::sync::{mpsc, oneshot};
use uuid::Uuid;

use super::{
    CheckpointStore, CheckpointWriter, NotCommitted, WriteKind, ledger_statement, replace_statement,
};
use crate::snapshot::SealedSnapshot;
use crate::store::{
    AlarmReconciliation, StoreError, checkout, evidence::close_orphaned_alarms,
    schema::radar_runtime_checkpoints as rows,
};

/// Monitors whose first checkpoints one transaction writes at most (the
/// worker starts 64 at once).
pub const MAX_FIRST_CHECKPOINTS_PER_TRANSACTION: usize = 64;

/// What a batch decided for one monitor.
#[derive(Debug)]
enum Batched {
    /// Committed with the batch: the reconciliation of its alarms.
    Committed(AlarmReconciliation),
    /// Its row holds a signature its writer does not accept.
    Refused,
    /// Not tried: another transaction holds its row (or it was in the
    /// batch twice). Nothing of it was written.
    Skipped,
    /// The batch's transaction failed, or the batch never answered: its
    /// commit is uncertain.
    Failed,
}

struct Request {
    sealed: SealedSnapshot,
    /// The signatures its swap accepts (its writer's fence, begun).
    accepted: Vec<Vec<u8>>,
    keep_open: Option<DateTime<Utc>>,
    reply: oneshot::Sender<Batched>,
}

/// Where a worker's restarting monitors write their first checkpoints.
#[derive(Clone)]
pub struct FirstCheckpoints {
    requests: mpsc::UnboundedSender<Request>,
}

/// The task that writes the batches; it ends when every
/// [`FirstCheckpoints`] is dropped.
pub struct FirstCheckpointWriter {
    store: CheckpointStore,
    requests: mpsc::UnboundedReceiver<Request>,
}

impl FirstCheckpoints {
    pub fn new(store: CheckpointStore) -> (Self, FirstCheckpointWriter) {
        let (requests, queue) = mpsc::unbounded_channel();
        (
            Self { requests },
            FirstCheckpointWriter {
                store,
                requests: queue,
            },
        )
    }

    async fn write(
        &self,
        sealed: &SealedSnapshot,
        accepted: Vec<Vec<u8>>,
        keep_open: Option<DateTime<Utc>>,
    ) -> Batched {
        let (reply, answer) = oneshot::channel();
        let request = Request {
            sealed: sealed.clone(),
            accepted,
            keep_open,
            reply,
        };
        if self.requests.send(request).is_err() {
            // The writer task is gone: nothing was sent.
            return Batched::Skipped;
        }
        answer.await.unwrap_or(Batched::Failed)
    }
}

impl CheckpointWriter {
    /// [`Self::first_checkpoint`], written in a transaction shared with
    /// other restarting monitors (see the module doc). A graph run's
    /// writer, whose writes also check its run's failure record, writes
    /// alone.
    pub async fn first_checkpoint_together(
        self,
        firsts: &FirstCheckpoints,
        next: &SealedSnapshot,
        keep_open: Option<DateTime<Utc>>,
    ) -> Result<(Self, AlarmReconciliation), NotCommitted> {
        if self.graph_run {
            return self.first_checkpoint(next, keep_open).await;
        }
        debug_assert_eq!(next.envelope.service_id, self.service_id);
        let Some(accepted) = self.fence.begin(&next.token) else {
            return Err(NotCommitted::OwnershipLost(
                self.lose(WriteKind::Checkpoint),
            ));
        };
        match firsts.write(next, accepted, keep_open).await {
            Batched::Committed(found) => {
                self.fence.committed(&next.token);
                Ok((self, found))
            }
            Batched::Refused => Err(NotCommitted::OwnershipLost(
                self.lose(WriteKind::Checkpoint),
            )),
            Batched::Skipped => self.first_checkpoint(next, keep_open).await,
            Batched::Failed => {
                // The failed commit may have happened: the row may hold
                // this token, which writing alone must then accept.
                self.fence.uncertain(&next.token);
                self.first_checkpoint(next, keep_open).await
            }
        }
    }
}

impl FirstCheckpointWriter {
    pub async fn run(mut self) {
        let mut batch = Vec::with_capacity(MAX_FIRST_CHECKPOINTS_PER_TRANSACTION);
        while self
            .requests
            .recv_many(&mut batch, MAX_FIRST_CHECKPOINTS_PER_TRANSACTION)
            .await
            > 0
        {
            let decided = write_batch(&self.store, &batch).await;
            if let Err(e) = &decided {
                tracing::warn!(error = %e, monitors = batch.len(), "Writing a batch of first checkpoints failed; each monitor writes its own.");
            }
            let mut decided = decided.ok().map(Vec::into_iter);
            for request in batch.drain(..) {
                let answer = decided
                    .as_mut()
                    .and_then(Iterator::next)
                    .unwrap_or(Batched::Failed);
                let _ = request.reply.send(answer);
            }
        }
    }
}

/// One transaction for the batch: what it decided for each request, in
/// order.
async fn write_batch(
    store: &CheckpointStore,
    batch: &[Request],
) -> Result<Vec<Batched>, StoreError> {
    let ids: Vec<Uuid> = batch.iter().map(|r| r.sealed.envelope.service_id).collect();
    store
        .bounded(async {
            let mut conn = checkout(&store.pool).await?;
            conn.transaction::<_, diesel::result::Error, _>(async |conn| {
                let locked: HashSet<Uuid> = rows::table
                    .filter(rows::service_id.eq_any(&ids))
                    .select(rows::service_id)
                    .for_update()
                    .skip_locked()
                    .load(conn)
                    .await?
                    .into_iter()
                    .collect();
                let mut tried = HashSet::new();
                let tries: Vec<bool> = ids
                    .iter()
                    .map(|id| locked.contains(id) && tried.insert(*id))
                    .collect();
                let swapped = swap_all(&*conn, store, batch, &tries).await?;
                let mut found = follow_all(&*conn, batch, &swapped).await?;
                Ok(tries
                    .iter()
                    .zip(&swapped)
                    .enumerate()
                    .map(|(i, (tried, swapped))| match (tried, swapped) {
                        (false, _) => Batched::Skipped,
                        (true, false) => Batched::Refused,
                        (true, true) => Batched::Committed(found.remove(&i).unwrap_or_default()),
                    })
                    .collect())
            })
            .await
            .map_err(|e| store.db_error(e))
        })
        .await
}

/// The compare-and-swap of every request tried, sent together: whether
/// each replaced its row.
async fn swap_all(
    conn: &AsyncPgConnection,
    store: &CheckpointStore,
    batch: &[Request],
    tries: &[bool],
) -> Result<Vec<bool>, diesel::result::Error> {
    let swaps = batch.iter().zip(tries).map(|(request, tried)| async move {
        if !tried {
            return Ok(false);
        }
        let mut shared = conn;
        replace_statement(&request.sealed, &store.writer_id, &request.accepted)
            .execute(&mut shared)
            .await
            .map(|affected| affected > 0)
    });
    futures_util::future::join_all(swaps)
        .await
        .into_iter()
        .collect()
}

/// The ledger entry and the alarm reconciliation of every swapped
/// request, sent together, under the new signatures: each request's
/// reconciliation by its index.
async fn follow_all(
    conn: &AsyncPgConnection,
    batch: &[Request],
    swapped: &[bool],
) -> Result<HashMap<usize, AlarmReconciliation>, diesel::result::Error> {
    let writes = batch
        .iter()
        .zip(swapped)
        .enumerate()
        .filter(|(_, (_, swapped))| **swapped)
        .map(|(i, (request, _))| async move {
            let service_id = request.sealed.envelope.service_id;
            let token = &request.sealed.token;
            let mut shared = conn;
            let ledger = ledger_statement(service_id, token).execute(&mut shared);
            let closed =
                close_orphaned_alarms(conn, service_id, token.as_bytes(), request.keep_open);
            let (ledger, closed) = futures_util::future::join(ledger, closed).await;
            ledger?;
            Ok((i, closed?))
        });
    futures_util::future::join_all(writes)
        .await
        .into_iter()
        .collect()
}
