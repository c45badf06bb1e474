//! One monitor's actors and its lifecycle.
//!
//! - [`MonitorActor`] (this file): starts the others in order (load and
//!   verify the snapshot, restore or start fresh, checkpoint before
//!   subscribing, subscribe), stops them gracefully, and turns terminal
//!   states into an [`ExitReason`] for the supervisor. A graph run's
//!   quarantine ends here too: ingestion stops, the checkpoint actor records
//!   the failure (until it commits or an explicit stop), then the monitor exits.
//!   `handlers` holds the messages it takes and what it does with them.
//! - `ingestion`: the MQTT reconnect owner and its connection events.
//! - `model`: alignment, scoring and snapshot encoding on a model thread.
//! - `checkpoint`: the fenced writer of snapshots, alarms and evidence.
//! - `health`: state, stall detection and the operational status.

mod checkpoint;
mod handlers;
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
    store::MonitorRow,
    telemetry::{MonitorTelemetry, events},
};
use tokio::sync::oneshot;
use uuid::Uuid;

pub use handlers::Stop;
pub use health::HealthBeats;
pub use view::{CheckpointView, ModelView, Ownership};

use self::{
    checkpoint::CheckpointActor,
    health::{FinalReport, HealthActor},
    ingestion::{IngestionActor, StopIngestion},
    messages::Halt,
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
