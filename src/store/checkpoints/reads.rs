//! The snapshot reads of monitors starting together, gathered into one
//! statement: a worker starting thousands of monitors read each snapshot
//! with a statement (and a pool checkout, and a round trip) of its own,
//! about 0.1 ms of PostgreSQL's CPU each, where one statement for 64 costs
//! 0.04 ms a monitor (BENCHMARKS.md section 6, rounds 18 and 19).
//!
//! Nothing waits to fill a batch: the reader takes whatever requests are
//! queued when it is free, so a lone start reads as before, and a batch
//! grows only while the previous one is in flight. A batch that fails is
//! not answered with one shared error: each of its monitors then reads
//! its own row, as it would have alone, and gets its own answer.

use tokio::sync::{mpsc, oneshot};
use uuid::Uuid;

use super::CheckpointStore;
use crate::store::{StoreError, stored::StoredSnapshot};

/// Monitors read by one statement at most (the worker starts 64 at once).
pub const MAX_READS_PER_STATEMENT: usize = 64;

/// A batch's answer to one monitor: its row (or none), or "the batch
/// failed: read alone".
type Answer = Result<Option<StoredSnapshot>, ()>;

struct Request {
    service_id: Uuid,
    reply: oneshot::Sender<Answer>,
}

/// Where a worker's starting monitors read their snapshots.
#[derive(Clone)]
pub struct SnapshotReads {
    store: CheckpointStore,
    requests: mpsc::UnboundedSender<Request>,
}

/// The task that reads the batches; it ends when every [`SnapshotReads`]
/// is dropped.
pub struct SnapshotReader {
    store: CheckpointStore,
    requests: mpsc::UnboundedReceiver<Request>,
}

impl SnapshotReads {
    pub fn new(store: CheckpointStore) -> (Self, SnapshotReader) {
        let (requests, queue) = mpsc::unbounded_channel();
        (
            Self {
                store: store.clone(),
                requests,
            },
            SnapshotReader {
                store,
                requests: queue,
            },
        )
    }

    /// The monitor's stored snapshot, exactly as
    /// [`CheckpointStore::load_snapshot`] reads it. Read alone when its
    /// batch failed or the reader is gone.
    pub async fn read(&self, service_id: Uuid) -> Result<Option<StoredSnapshot>, StoreError> {
        let (reply, answer) = oneshot::channel();
        let request = Request { service_id, reply };
        if self.requests.send(request).is_ok()
            && let Ok(Ok(found)) = answer.await
        {
            return Ok(found);
        }
        self.store.load_snapshot(service_id).await
    }
}

impl SnapshotReader {
    pub async fn run(mut self) {
        let mut batch = Vec::with_capacity(MAX_READS_PER_STATEMENT);
        while self
            .requests
            .recv_many(&mut batch, MAX_READS_PER_STATEMENT)
            .await
            > 0
        {
            let ids: Vec<Uuid> = batch.iter().map(|r| r.service_id).collect();
            let found = self.store.load_snapshots(&ids).await;
            for request in batch.drain(..) {
                let answer = match &found {
                    Ok(found) => Ok(found.get(&request.service_id).cloned()),
                    Err(_) => Err(()),
                };
                let _ = request.reply.send(answer);
            }
            if let Err(e) = found {
                tracing::warn!(error = %e, monitors = ids.len(), "Reading a batch of snapshots failed; each monitor reads its own.");
            }
        }
    }
}
