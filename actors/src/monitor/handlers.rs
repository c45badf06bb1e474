//! The messages the monitor actor takes and what it does with them: a stop,
//! the end of its input and of its last snapshot, a lost ownership, a
//! quarantine and how its failure record ended.

use actix::prelude::*;
use radar::{
    graph::FailureDiagnostics,
    runtime::ExitReason,
    store::{FailureRecord, OwnershipLost, RetriedFailure},
    telemetry::events,
};
use tokio::sync::oneshot;

use super::{MonitorActor, Stage, checkpoint::RecordFailure, ingestion::StopIngestion};

/// Supervisor -> monitor: stop gracefully (shutdown or retired).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Stop;

/// Model -> monitor: the ingress queue ended after ingestion stopped.
#[derive(Message)]
#[rtype(result = "()")]
pub struct InputDrained;

/// Checkpoint -> monitor: the last snapshot of a graceful stop is settled.
#[derive(Message)]
#[rtype(result = "()")]
pub struct LastSnapshotSettled {
    pub committed: bool,
}

/// Checkpoint/health -> monitor: a write was refused because another worker
/// committed a successor.
#[derive(Message)]
#[rtype(result = "()")]
pub struct LostOwnership {
    pub lost: OwnershipLost,
}

/// Model -> monitor: a graph node failed uncertainly. The model ran its
/// last graph call and will seal nothing more.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Quarantined {
    pub diagnostics: FailureDiagnostics,
}

/// Checkpoint -> monitor: how the failure record ended.
#[derive(Message)]
#[rtype(result = "()")]
pub struct FailureSettled {
    pub outcome: FailureOutcome,
}

/// The end of a quarantined monitor's failure record.
#[derive(Debug)]
pub enum FailureOutcome {
    Retried(RetriedFailure),
    /// There was no writer to record it with (ownership was lost first).
    NoWriter {
        detail: String,
    },
}

impl Handler<Stop> for MonitorActor {
    type Result = ();

    fn handle(&mut self, _: Stop, _: &mut Self::Context) {
        let _span = self.span.clone().entered();
        let id = self.id();
        match &mut self.stage {
            Stage::Starting { stop_requested } => *stop_requested = true,
            Stage::Running(_) => self.begin_stop(),
            Stage::Quarantined { stop_retries, .. } => {
                // An explicit stop ends the retries of the failure record.
                if let Some(stop) = stop_retries.take() {
                    tracing::warn!(monitor_id = %id, "Stop requested while the failure record is still retrying; giving it up.");
                    let _ = stop.send(());
                }
            }
            Stage::Stopping(_) | Stage::Done => {}
        }
    }
}

impl Handler<InputDrained> for MonitorActor {
    type Result = ();

    fn handle(&mut self, _: InputDrained, _: &mut Self::Context) {
        let _span = self.span.clone().entered();
        tracing::debug!(monitor_id = %self.id(), "Ingress queue drained; waiting for the last snapshot.");
    }
}

impl Handler<LastSnapshotSettled> for MonitorActor {
    type Result = ();

    fn handle(&mut self, msg: LastSnapshotSettled, ctx: &mut Self::Context) {
        let _span = self.span.clone().entered();
        let Stage::Stopping(live) = &self.stage else {
            return;
        };
        let run = live.run;
        if msg.committed {
            tracing::info!(monitor_id = %self.id(), "Committed the last snapshot.");
        }
        let (Some(run_id), Some(graphs)) = (run, self.worker.graphs.clone()) else {
            self.finish(ExitReason::Stopped, ctx);
            return;
        };
        // A run an operator asked to stop is stopped now; a worker shutdown
        // leaves it running for the next worker.
        let id = self.id();
        async move {
            match graphs.run(run_id).await {
                Ok(run) if run.lifecycle_intent == "stopping" => {
                    match graphs.mark_stopped(run_id, id).await {
                        Ok(true) => tracing::info!(monitor_id = %id, %run_id, "Graph run stopped."),
                        Ok(false) => {}
                        Err(e) => tracing::warn!(monitor_id = %id, %run_id, error = %e, "Could not mark the graph run stopped."),
                    }
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(monitor_id = %id, %run_id, error = %e, "Could not read the graph run's lifecycle intent."),
            }
        }
        .into_actor(self)
        .map(|_, act, ctx| act.finish(ExitReason::Stopped, ctx))
        .wait(ctx);
    }
}

impl Handler<LostOwnership> for MonitorActor {
    type Result = ();

    fn handle(&mut self, msg: LostOwnership, ctx: &mut Self::Context) {
        let _span = self.span.clone().entered();
        tracing::error!(monitor_id = %self.id(), "{}", msg.lost);
        self.finish(
            ExitReason::OwnershipLost {
                detail: msg.lost.to_string(),
            },
            ctx,
        );
    }
}

impl Handler<Quarantined> for MonitorActor {
    type Result = ();

    fn handle(&mut self, msg: Quarantined, ctx: &mut Self::Context) {
        let _span = self.span.clone().entered();
        let run = match &self.stage {
            Stage::Running(live) | Stage::Stopping(live) => live.run,
            Stage::Starting { .. } => None,
            Stage::Quarantined { .. } | Stage::Done => return,
        };
        let (Some(run_id), Some(graphs)) = (run, self.worker.graphs.clone()) else {
            let detail = events::quarantine_detail(run.unwrap_or_default(), &msg.diagnostics);
            self.finish(ExitReason::Quarantined { detail }, ctx);
            return;
        };
        let (Stage::Running(live) | Stage::Stopping(live)) =
            std::mem::replace(&mut self.stage, Stage::Done)
        else {
            return;
        };
        self.metrics.emit(events::GraphQuarantined {
            run_id,
            diagnostics: &msg.diagnostics,
        });
        let parts = live.parts;
        // No more input: the graph is never called again.
        parts.ingestion.do_send(StopIngestion);
        let (stop, stopped) = oneshot::channel();
        parts.checkpoint.do_send(RecordFailure {
            run_id,
            diagnostics: msg.diagnostics.clone(),
            graphs,
            stop: stopped,
        });
        self.stage = Stage::Quarantined {
            parts,
            run_id,
            diagnostics: msg.diagnostics,
            stop_retries: Some(stop),
        };
    }
}

impl Handler<FailureSettled> for MonitorActor {
    type Result = ();

    fn handle(&mut self, msg: FailureSettled, ctx: &mut Self::Context) {
        let _span = self.span.clone().entered();
        let Stage::Quarantined {
            run_id,
            diagnostics,
            ..
        } = &self.stage
        else {
            return;
        };
        let run_id = *run_id;
        let summary = events::quarantine_detail(run_id, diagnostics);
        let reason = match msg.outcome {
            FailureOutcome::Retried(RetriedFailure::Settled { record, attempts }) => match record {
                FailureRecord::Recorded | FailureRecord::AlreadyRecorded => {
                    tracing::info!(monitor_id = %self.id(), %run_id, attempts, "The graph run's failure is recorded; its last snapshot stays as it was.");
                    ExitReason::Quarantined {
                        detail: format!("{summary}; the failure is recorded"),
                    }
                }
                FailureRecord::OwnershipLost { detail } => ExitReason::OwnershipLost {
                    detail: format!("{detail}; the failure of {summary} was not recorded"),
                },
                FailureRecord::IdentityMismatch { detail } => ExitReason::Quarantined {
                    detail: format!("{summary}; the failure was not recorded: {detail}"),
                },
            },
            FailureOutcome::Retried(RetriedFailure::Stopped {
                attempts,
                last_error,
            }) => ExitReason::Quarantined {
                detail: format!(
                    "{summary}; stopped before the failure was recorded ({attempts} attempts, last error: {last_error})"
                ),
            },
            FailureOutcome::NoWriter { detail } => ExitReason::Quarantined {
                detail: format!("{summary}; the failure was not recorded: {detail}"),
            },
        };
        self.finish(reason, ctx);
    }
}
