//! The checkpoint actor's first write: claiming or replacing the snapshot
//! row, then reconciling the alarms. A restart's replacement is written
//! with those of other restarting monitors (`FirstCheckpoints`, one
//! transaction for up to 64, each fenced by its own signature). It
//! settles like every commit (see `writes::committed`); the start that
//! waits for it learns the outcome.

use std::time::Instant;

use actix::prelude::*;
use chrono::{DateTime, Utc};
use radar::{
    runtime::{ExitReason, SnapshotHandoff},
    snapshot::{FencingToken, SealedSnapshot},
    store::{
        AlarmReconciliation, CheckpointStore, CheckpointWriter, Claim, FirstCheckpoints,
        HealthReporter, NotCommitted,
    },
    telemetry::events,
};
use tokio::sync::oneshot;

use super::{CheckpointActor, Slot};
use crate::monitor::model::ContinueAlarms;

/// What the first write needs, and who waits for its outcome.
pub struct FirstWrite {
    /// `None`: database writes are disabled; nothing is claimed.
    pub store: Option<CheckpointStore>,
    /// Where a restart's first checkpoint is written together with those
    /// of other restarting monitors (with `store`).
    pub firsts: Option<FirstCheckpoints>,
    /// The token of the snapshot the start loaded (`None`: a fresh
    /// monitor, whose row is claimed).
    pub loaded: Option<FencingToken>,
    /// The opening time of the alarm the restored detector still has open.
    pub keep_open: Option<DateTime<Utc>>,
    /// A graph run's writes are fenced by its failure record too.
    pub graph_run: bool,
    /// The start, waiting to subscribe.
    pub outcome: oneshot::Sender<FirstOutcome>,
}

/// How the first write ended: the health reporter that follows the writer
/// (`None`: database writes are disabled), or why this worker does not own
/// the monitor.
pub type FirstOutcome = Result<Option<HealthReporter>, FirstCommitError>;

/// Why the first write did not make this worker the owner.
#[derive(Debug)]
pub enum FirstCommitError {
    /// Another worker committed after the load: the start loads again.
    Superseded(ExitReason),
    /// The start fails with this reason.
    Failed(ExitReason),
}

impl From<ExitReason> for FirstCommitError {
    fn from(reason: ExitReason) -> Self {
        Self::Failed(reason)
    }
}

impl CheckpointActor {
    /// Commits the checkpoint before subscribing and hands its outcome to
    /// the start. A failure is not retried: the start ends (or, superseded,
    /// starts again) and halts this actor.
    pub(super) fn commit_first(
        &mut self,
        first: FirstWrite,
        next: SnapshotHandoff,
        ctx: &mut Context<Self>,
    ) {
        let FirstWrite {
            store,
            firsts,
            loaded,
            keep_open,
            graph_run,
            outcome,
        } = first;
        let Some(store) = store else {
            // Nothing is written: the model never waits for a commit.
            self.slot = Slot::Disabled;
            self.view.send_modify(|v| {
                v.last_commit_at = Some(Utc::now());
                v.commits += 1;
            });
            self.report(true, &next);
            let _ = outcome.send(Ok(None));
            return;
        };
        let started = Instant::now();
        let sealed = next.sealed.clone();
        let first = First {
            store,
            firsts,
            loaded,
            keep_open,
            graph_run,
        };
        async move { first_commit(first, &sealed).await }
            .into_actor(self)
            .map(move |result, act, ctx| {
                let _span = act.span.clone().entered();
                match result {
                    Ok((writer, alarms)) => {
                        // Before any input reaches the model (its mailbox
                        // keeps the order; the start attaches the input
                        // once `outcome` answers).
                        act.model.do_send(ContinueAlarms {
                            after: alarms.highest_seq,
                        });
                        act.metrics.emit(events::OwnershipAcquired);
                        let reporter = writer.health_reporter();
                        act.committed(writer, &next, started, (0, 0));
                        let _ = outcome.send(Ok(Some(reporter)));
                    }
                    Err(error) => {
                        // The start halts this actor; nothing is written.
                        act.slot = Slot::Lost;
                        let _ = outcome.send(Err(error));
                    }
                }
                act.drive(ctx);
                act.arm(ctx);
            })
            .wait(ctx);
    }
}

/// What the first write needs once the database writes are enabled.
struct First {
    store: CheckpointStore,
    firsts: Option<FirstCheckpoints>,
    loaded: Option<FencingToken>,
    keep_open: Option<DateTime<Utc>>,
    graph_run: bool,
}

/// The checkpoint before subscribing, with the alarm reconciliation in its
/// transaction: a detector restored after a hard crash does not know
/// alarms that a background batch committed after its snapshot. They are
/// closed (it would never close them) and new alarms are numbered after
/// every stored one.
async fn first_commit(
    first: First,
    sealed: &SealedSnapshot,
) -> Result<(CheckpointWriter, AlarmReconciliation), FirstCommitError> {
    let id = sealed.envelope.service_id;
    let (writer, found) = claim_or_replace(first, sealed).await?;
    if found.closed > 0 {
        tracing::warn!(monitor_id = %id, closed = found.closed, highest_alarm_seq = found.highest_seq, "Closed alarms left open after the restored snapshot: the detector rolled back past their opening and would never close them.");
    }
    Ok((writer, found))
}

async fn claim_or_replace(
    first: First,
    sealed: &SealedSnapshot,
) -> Result<(CheckpointWriter, AlarmReconciliation), FirstCommitError> {
    let First {
        store,
        firsts,
        loaded,
        keep_open,
        graph_run,
    } = first;
    let id = sealed.envelope.service_id;
    // A graph run's writes, this first one included, are fenced by its
    // failure record too: a replacement admitted before the failure
    // committed must not go on with the failed generation.
    match loaded {
        None => match store.first_claim(sealed, keep_open, graph_run).await {
            Ok((Claim::Won(writer), found)) => Ok((writer, found)),
            Ok((Claim::Lost(lost), _)) => Err(FirstCommitError::Superseded(
                superseded_while_starting(&lost),
            )),
            Err(e) => Err(ExitReason::Failed {
                error: format!("the first checkpoint of monitor {id} failed: {e}"),
            }
            .into()),
        },
        Some(token) => {
            let writer = store.resume(id, token);
            let writer = if graph_run {
                writer.fenced_by_graph_run()
            } else {
                writer
            };
            let written = match &firsts {
                Some(firsts) => {
                    writer
                        .first_checkpoint_together(firsts, sealed, keep_open)
                        .await
                }
                None => writer.first_checkpoint(sealed, keep_open).await,
            };
            match written {
                Ok(committed) => Ok(committed),
                Err(NotCommitted::OwnershipLost(lost)) => Err(FirstCommitError::Superseded(
                    superseded_while_starting(&lost),
                )),
                Err(NotCommitted::Failed { error, .. }) => Err(ExitReason::Failed {
                    error: format!(
                        "the checkpoint before subscribing of monitor {id} failed: {error}"
                    ),
                }
                .into()),
            }
        }
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
