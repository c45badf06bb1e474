//! One monitor's actors and its lifecycle.
//!
//! - [`MonitorActor`] (this file): starts the others in order (load and
//!   verify the snapshot, restore or start fresh, checkpoint before
//!   subscribing, subscribe), stops them gracefully, and turns terminal
//!   states into an [`ExitReason`] for the supervisor. A graph run's
//!   quarantine ends here too: ingestion stops, the checkpoint actor records
//!   the failure (until it commits or an explicit stop), then the monitor exits.
//! - `ingestion`: the MQTT reconnect owner and its connection events.
//! - `model`: alignment, scoring and snapshot encoding on a model thread.
//! - `checkpoint`: the fenced writer of snapshots, alarms and evidence.
//! - `health`: state, stall detection and the operational status.

mod checkpoint;
mod health;
mod ingestion;
mod messages;
mod model;
mod startup;
mod view;

use std::sync::Arc;

use actix::prelude::*;
use radar::{
    graph::FailureDiagnostics,
    runtime::ExitReason,
    store::{FailureRecord, MonitorRow, RetriedFailure},
    telemetry::{MonitorTelemetry, events},
};
use tokio::sync::oneshot;
use uuid::Uuid;

pub use health::HealthBeats;
pub use messages::Stop;
pub use view::{CheckpointView, ModelView, Ownership};

use self::{
    checkpoint::CheckpointActor,
    health::{FinalReport, HealthActor},
    ingestion::{IngestionActor, StopIngestion},
    messages::{
        FailureOutcome, FailureSettled, Halt, InputDrained, LastSnapshotSettled, LostOwnership,
        Quarantined, RecordFailure,
    },
    model::ModelActor,
    startup::Started,
};
use crate::worker::WorkerContext;

/// Monitor -> supervisor: the monitor's actors are gone, for this reason.
#[derive(Message)]
#[rtype(result = "()")]
pub struct MonitorExited {
    pub id: Uuid,
    pub reason: ExitReason,
}

struct Parts {
    model: Addr<ModelActor>,
    /// Ends with the parts, after the model's `Halt` was sent.
    _model_thread: startup::ModelThread,
    checkpoint: Addr<CheckpointActor>,
    health: Addr<HealthActor>,
    ingestion: Addr<IngestionActor>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Starting,
    Running,
    Stopping,
    /// A graph node failed uncertainly; the failure record is in flight.
    Quarantined,
    Done,
}

pub struct MonitorActor {
    worker: Arc<WorkerContext>,
    row: MonitorRow,
    supervisor: Recipient<MonitorExited>,
    parts: Option<Parts>,
    stage: Stage,
    stop_requested: bool,
    /// The graph run this monitor executes, once started.
    run: Option<Uuid>,
    /// While quarantined: fires to end the failure record's retries.
    stop_retries: Option<oneshot::Sender<()>>,
    quarantine: Option<FailureDiagnostics>,
    metrics: MonitorTelemetry,
    /// Every log line of this monitor's actors runs inside it.
    span: tracing::Span,
}

impl MonitorActor {
    pub fn new(
        worker: Arc<WorkerContext>,
        row: MonitorRow,
        metrics: MonitorTelemetry,
        supervisor: Recipient<MonitorExited>,
    ) -> Self {
        Self {
            span: tracing::info_span!("monitor", monitor_id = %row.id),
            metrics,
            worker,
            row,
            supervisor,
            parts: None,
            stage: Stage::Starting,
            stop_requested: false,
            run: None,
            stop_retries: None,
            quarantine: None,
        }
    }

    fn id(&self) -> Uuid {
        self.row.id
    }

    fn begin_stop(&mut self, ctx: &mut Context<Self>) {
        let Some(parts) = &self.parts else {
            self.finish(ExitReason::Stopped, ctx);
            return;
        };
        self.stage = Stage::Stopping;
        tracing::info!(monitor_id = %self.id(), "Stopping: ingestion first, then the last snapshot.");
        // Once ingestion has stopped the queue closes; the model drains it,
        // seals the last snapshot and the checkpoint actor commits it.
        parts.ingestion.do_send(StopIngestion);
    }

    /// Ends the monitor: halts every actor and tells the supervisor.
    fn finish(&mut self, reason: ExitReason, ctx: &mut Context<Self>) {
        if self.stage == Stage::Done {
            return;
        }
        self.stage = Stage::Done;
        self.metrics.emit(events::MonitorExited { reason: &reason });
        let id = self.id();
        let supervisor = self.supervisor.clone();
        let parts = self.parts.take();
        let report = reason.clone();
        async move {
            if let Some(parts) = parts {
                parts.ingestion.do_send(StopIngestion);
                if !matches!(reason, ExitReason::OwnershipLost { .. }) {
                    // A final status row; after ownership loss the successor owns it.
                    let _ = parts
                        .health
                        .send(FinalReport {
                            reason: reason.clone(),
                        })
                        .await;
                }
                parts.health.do_send(Halt {
                    reason: reason.clone(),
                });
                parts.model.do_send(Halt {
                    reason: reason.clone(),
                });
                parts.checkpoint.do_send(Halt { reason });
            }
        }
        .into_actor(self)
        .map(move |_, _, ctx| {
            supervisor.do_send(MonitorExited { id, reason: report });
            ctx.stop();
        })
        .wait(ctx);
    }
}

impl Actor for MonitorActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        let _span = self.span.clone().entered();
        let worker = self.worker.clone();
        let row = self.row.clone();
        let me = ctx.address();
        let metrics = self.metrics.clone();
        startup::start(worker, row, me, metrics, self.span.clone())
            .into_actor(self)
            .map(|result, act, ctx| match result {
                Ok(Started {
                    model,
                    model_thread,
                    checkpoint,
                    health,
                    ingestion,
                    run,
                }) => {
                    act.run = run;
                    act.parts = Some(Parts {
                        model,
                        _model_thread: model_thread,
                        checkpoint,
                        health,
                        ingestion,
                    });
                    act.stage = Stage::Running;
                    if act.stop_requested {
                        act.begin_stop(ctx);
                    }
                }
                Err(reason) => act.finish(reason, ctx),
            })
            .wait(ctx);
    }
}

impl Handler<Stop> for MonitorActor {
    type Result = ();

    fn handle(&mut self, _: Stop, ctx: &mut Self::Context) {
        let _span = self.span.clone().entered();
        match self.stage {
            Stage::Starting => self.stop_requested = true,
            Stage::Running => self.begin_stop(ctx),
            Stage::Quarantined => {
                // An explicit stop ends the retries of the failure record.
                if let Some(stop) = self.stop_retries.take() {
                    tracing::warn!(monitor_id = %self.id(), "Stop requested while the failure record is still retrying; giving it up.");
                    let _ = stop.send(());
                }
            }
            Stage::Stopping | Stage::Done => {}
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
        if self.stage != Stage::Stopping {
            return;
        }
        if msg.committed {
            tracing::info!(monitor_id = %self.id(), "Committed the last snapshot.");
        }
        let (Some(run_id), Some(graphs)) = (self.run, self.worker.graphs.clone()) else {
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
        if matches!(self.stage, Stage::Quarantined | Stage::Done) {
            return;
        }
        let (Some(parts), Some(run_id), Some(graphs)) =
            (&self.parts, self.run, self.worker.graphs.clone())
        else {
            let detail = events::quarantine_detail(self.run.unwrap_or_default(), &msg.diagnostics);
            self.finish(ExitReason::Quarantined { detail }, ctx);
            return;
        };
        self.metrics.emit(events::GraphQuarantined {
            run_id,
            diagnostics: &msg.diagnostics,
        });
        self.stage = Stage::Quarantined;
        // No more input: the graph is never called again.
        parts.ingestion.do_send(StopIngestion);
        let (stop, stopped) = oneshot::channel();
        self.stop_retries = Some(stop);
        parts.checkpoint.do_send(RecordFailure {
            run_id,
            diagnostics: msg.diagnostics.clone(),
            graphs,
            stop: stopped,
        });
        self.quarantine = Some(msg.diagnostics);
    }
}

impl Handler<FailureSettled> for MonitorActor {
    type Result = ();

    fn handle(&mut self, msg: FailureSettled, ctx: &mut Self::Context) {
        let _span = self.span.clone().entered();
        if self.stage != Stage::Quarantined {
            return;
        }
        let run_id = self.run.unwrap_or_default();
        let summary = self
            .quarantine
            .as_ref()
            .map(|d| events::quarantine_detail(run_id, d))
            .unwrap_or_default();
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
