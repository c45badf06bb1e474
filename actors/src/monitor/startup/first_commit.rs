//! The first commit: claiming or replacing the snapshot row, then
//! reconciling the alarms.

use chrono::Utc;
use radar::{
    runtime::ExitReason,
    snapshot::FencingToken,
    store::{
        AlarmReconciliation, CheckpointStore, CheckpointWriter, Claim, PendingResults,
        ReconcileError, WriteOutcome,
    },
};

use super::StartError;

/// The checkpoint before subscribing, then the alarm reconciliation: a
/// detector restored after a hard crash does not know alarms that a
/// background batch committed after its snapshot. They are closed (it would
/// never close them) and new alarms are numbered after every stored one.
pub(super) async fn first_commit(
    store: &CheckpointStore,
    sealed: &radar::snapshot::SealedSnapshot,
    loaded: Option<FencingToken>,
    keep_open: Option<chrono::DateTime<Utc>>,
    graph_run: bool,
) -> Result<(CheckpointWriter, AlarmReconciliation), StartError> {
    let id = sealed.envelope.service_id;
    let writer = claim_or_replace(store, sealed, loaded, graph_run).await?;
    match writer.reconcile_alarms(keep_open).await {
        Ok((writer, found)) => {
            if found.closed > 0 {
                tracing::warn!(monitor_id = %id, closed = found.closed, highest_alarm_seq = found.highest_seq, "Closed alarms left open after the restored snapshot: the detector rolled back past their opening and would never close them.");
            }
            Ok((writer, found))
        }
        Err(ReconcileError::OwnershipLost(lost)) => {
            Err(StartError::Superseded(superseded_while_starting(&lost)))
        }
        Err(ReconcileError::Failed(error)) => Err(ExitReason::Failed {
            error: format!(
                "closing the alarms monitor {id} left open before its restart failed: {error}"
            ),
        }
        .into()),
    }
}

async fn claim_or_replace(
    store: &CheckpointStore,
    sealed: &radar::snapshot::SealedSnapshot,
    loaded: Option<FencingToken>,
    graph_run: bool,
) -> Result<CheckpointWriter, StartError> {
    let id = sealed.envelope.service_id;
    // A graph run's writes, this first one included, are fenced by its
    // failure record too: a replacement admitted before the failure
    // committed must not go on with the failed generation.
    let fence = |writer: CheckpointWriter| {
        if graph_run {
            writer.fenced_by_graph_run()
        } else {
            writer
        }
    };
    match loaded {
        None => match store.claim(sealed).await {
            Ok(Claim::Won(writer)) => Ok(fence(writer)),
            Ok(Claim::Lost(lost)) => Err(StartError::Superseded(superseded_while_starting(&lost))),
            Err(e) => Err(ExitReason::Failed {
                error: format!("the first checkpoint of monitor {id} failed: {e}"),
            }
            .into()),
        },
        Some(token) => match fence(store.resume(id, token))
            .checkpoint(sealed, &PendingResults::default())
            .await
        {
            WriteOutcome::Committed(writer) => Ok(writer),
            WriteOutcome::OwnershipLost(lost) => {
                Err(StartError::Superseded(superseded_while_starting(&lost)))
            }
            WriteOutcome::Failed { error, .. } => Err(ExitReason::Failed {
                error: format!(
                    "the checkpoint before subscribing of monitor {id} failed: {e}",
                    e = error
                ),
            }
            .into()),
        },
    }
}

/// Another worker committed between this worker's load and its first
/// commit. Nothing was computed or written here yet, so this is not a
/// terminal ownership loss: the monitor starts again from the newer
/// snapshot after the restart backoff (in a rolling update the newcomer
/// must end up owning the monitor, not nobody).
fn superseded_while_starting(lost: &radar::store::OwnershipLost) -> ExitReason {
    ExitReason::Failed {
        error: format!(
            "another worker committed a newer snapshot while this one was starting \
             ({lost}); starting again from that snapshot"
        ),
    }
}
