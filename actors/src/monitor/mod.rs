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
//! - `model`: alignment, scoring and snapshot encoding on a model thread;
//!   the interpreter of `radar::runtime::ModelRuntime`, which decides.
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
pub use health::{HealthBeats, REFRESH_EVERY};
pub use model::ModelTicks;
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

/// The parts of a started monitor and the graph run it executes, if any.
struct Live {
    parts: Parts,
    run: Option<Uuid>,
}

/// Where the monitor is in its life; each stage holds what only it needs,
/// so a stage without actors cannot reach them.
enum Stage {
    /// The actors are being started; a stop that arrives waits for them.
    Starting {
        stop_requested: bool,
    },
    Running(Live),
    /// Ingestion was asked to stop; the last snapshot is on its way.
    Stopping(Live),
    /// A graph node failed uncertainly; the failure record is in flight.
    Quarantined {
        parts: Parts,
        run_id: Uuid,
        diagnostics: FailureDiagnostics,
        /// Fires to end the failure record's retries (an explicit stop).
        stop_retries: Option<oneshot::Sender<()>>,
    },
    Done,
}

pub struct MonitorActor {
    worker: Arc<WorkerContext>,
    id: Uuid,
    /// The stored definition until the start takes it: a running monitor
    /// keeps its parsed config, not the row's JSON (about 8 KiB for a
    /// five-reading monitor).
    row: Option<MonitorRow>,
    supervisor: Recipient<MonitorExited>,
    stage: Stage,
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
            id: row.id,
            row: Some(row),
            supervisor,
            stage: Stage::Starting {
                stop_requested: false,
            },
        }
    }

    fn id(&self) -> Uuid {
        self.id
    }

    /// Running -> stopping; any other stage stays as it is.
    fn begin_stop(&mut self) {
        self.stage = match std::mem::replace(&mut self.stage, Stage::Done) {
            Stage::Running(live) => {
                tracing::info!(monitor_id = %self.id(), "Stopping: ingestion first, then the last snapshot.");
                // Once ingestion has stopped the queue closes; the model
                // drains it, seals the last snapshot and the checkpoint
                // actor commits it.
                live.parts.ingestion.do_send(StopIngestion);
                Stage::Stopping(live)
            }
            other => other,
        };
    }

    /// Ends the monitor: halts every actor and tells the supervisor.
    fn finish(&mut self, reason: ExitReason, ctx: &mut Context<Self>) {
        // A failure record still retrying keeps its sender until the
        // monitor has stopped, as before (dropping it would end them).
        let (parts, stop_retries) = match std::mem::replace(&mut self.stage, Stage::Done) {
            Stage::Done => return,
            Stage::Starting { .. } => (None, None),
            Stage::Running(live) | Stage::Stopping(live) => (Some(live.parts), None),
            Stage::Quarantined {
                parts,
                stop_retries,
                ..
            } => (Some(parts), stop_retries),
        };
        self.metrics.emit(events::MonitorExited { reason: &reason });
        let id = self.id();
        let supervisor = self.supervisor.clone();
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
            drop(stop_retries);
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
        // An actor starts once; the row is gone only if that ever changed.
        let Some(row) = self.row.take() else {
            self.finish(
                ExitReason::StartupFailed {
                    reason: "the monitor was started twice; its definition was already used"
                        .to_owned(),
                },
                ctx,
            );
            return;
        };
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
                    let parts = Parts {
                        model,
                        _model_thread: model_thread,
                        checkpoint,
                        health,
                        ingestion,
                    };
                    let stop_requested = matches!(
                        act.stage,
                        Stage::Starting {
                            stop_requested: true
                        }
                    );
                    act.stage = Stage::Running(Live { parts, run });
                    if stop_requested {
                        act.begin_stop();
                    }
                }
                Err(reason) => act.finish(reason, ctx),
            })
            .wait(ctx);
    }
}
