//! The named steps of `start_once`, in the order it takes them.

use actix::prelude::*;
use radar::telemetry::MonitorTelemetry;
use radar::{
    config::MonitorConfig,
    graph::CompiledGraph,
    mqtt::{self, IngestOptions},
    runtime::{self, CheckpointPolicy, ExitReason, MonitorCore, Trigger},
    snapshot::{FencingToken, SnapshotBinding},
    store::{HealthReporter, MonitorRow},
};
use tokio::sync::{oneshot, watch};
use uuid::Uuid;

use super::load::{fresh, load};
use super::{ModelThread, StartError};
use crate::monitor::{
    MonitorActor,
    checkpoint::{CheckpointActor, CheckpointSetup, FirstOutcome, FirstWrite},
    health::{HealthActor, HealthInputs},
    messages::Halt,
    model::{CheckpointNow, ModelActor, ModelSetup},
    view::{CheckpointView, ModelView, Ownership},
};
use crate::worker::{MonitorWatch, WorkerContext};

/// The model and checkpoint actors of a start that got them running.
pub(super) struct Running {
    pub(super) model: Addr<ModelActor>,
    pub(super) checkpoint: Addr<CheckpointActor>,
}

impl Running {
    /// Ends a start that failed after both actors started.
    fn halt(&self, reason: &ExitReason) {
        self.model.do_send(Halt {
            reason: reason.clone(),
        });
        self.checkpoint.do_send(Halt {
            reason: reason.clone(),
        });
    }
}

/// The model to start from: restored from the stored snapshot, or fresh
/// (always fresh when database writes are disabled, with no snapshot read).
pub(super) async fn restore_or_start_fresh(
    worker: &WorkerContext,
    row: &MonitorRow,
    binding: &SnapshotBinding,
    config: MonitorConfig,
    graph: Option<CompiledGraph>,
    metrics: &MonitorTelemetry,
) -> Result<(MonitorCore, Option<FencingToken>), ExitReason> {
    match &worker.store {
        None => {
            tracing::info!(monitor_id = %row.id, "Database writes are disabled: starting fresh, no snapshot is read or written.");
            Ok((fresh(row.id, config, graph)?, None))
        }
        Some(store) => load(store, worker, row, binding, config, graph, metrics).await,
    }
}

/// The monitor's own model thread.
async fn spawn_model_thread() -> Result<ModelThread, ExitReason> {
    ModelThread::spawn()
        .await
        .map_err(|e| ExitReason::StartupFailed {
            reason: format!(
                "could not start the monitor's model thread: {e}; the worker may be out of threads or file descriptors (see its RLIMIT_NOFILE)"
            ),
        })
}

/// The actors a start got running, and the views they publish.
pub(super) struct Actors {
    pub(super) running: Running,
    pub(super) model_thread: ModelThread,
    pub(super) model_rx: watch::Receiver<ModelView>,
    pub(super) checkpoint_rx: watch::Receiver<CheckpointView>,
}

/// Starts the model actor on the monitor's own thread and the checkpoint
/// actor, each with the other's address; the checkpoint actor's first write
/// is `first`. Nothing runs if the model's thread cannot start.
pub(super) async fn start_actors(
    worker: &WorkerContext,
    core: MonitorCore,
    binding: SnapshotBinding,
    first: FirstWrite,
    monitor: &Addr<MonitorActor>,
    metrics: &MonitorTelemetry,
    span: &tracing::Span,
) -> Result<Actors, ExitReason> {
    // The checkpoint actor's address exists before it runs: the model
    // reports to it, and it reports commits to the model.
    let model_thread = spawn_model_thread().await?;
    let id = core.service_id();
    let checkpoint_ctx = Context::<CheckpointActor>::new();
    let checkpoint = checkpoint_ctx.address();
    let (model_view, model_rx) = watch::channel(ModelActor::initial_view(&core));
    let setup = ModelSetup {
        runtime: runtime::ModelSetup {
            core,
            binding,
            key: worker.key.clone(),
            max_payload_bytes: worker.settings.mqtt_max_message_bytes,
            policy: CheckpointPolicy::new(worker.checkpoint_limits()),
            metrics: metrics.clone(),
            observed: worker.observer.is_some(),
        },
        checkpoint: checkpoint.clone(),
        monitor: monitor.clone(),
        view: model_view,
        observer: worker.observer.clone(),
        ticks: worker.model_ticks.clone(),
        span: span.clone(),
    };
    // Built here, moved to the model thread as a small value (ModelActor::new).
    let actor = ModelActor::new(setup);
    let model = ModelActor::start_in_arbiter(&model_thread.0.handle(), move |_| actor);
    let (view, checkpoint_rx) = watch::channel(CheckpointView::new(match worker.store {
        Some(_) => Ownership::Pending,
        None => Ownership::Disabled,
    }));
    checkpoint_ctx.run(CheckpointActor::new(CheckpointSetup {
        service_id: id,
        timeout: worker.checkpoint_timeout(),
        first,
        model: model.clone(),
        monitor: monitor.clone(),
        view,
        metrics: metrics.clone(),
        span: span.clone(),
    }));
    Ok(Actors {
        running: Running { model, checkpoint },
        model_thread,
        model_rx,
        checkpoint_rx,
    })
}

/// The checkpoint before subscribing: the model seals it and hands it to
/// the checkpoint actor, whose first write claims a fresh monitor's row
/// (one winner among racing workers) or replaces exactly the snapshot the
/// start loaded, and reports the commit to the model like every other.
/// Returns the health reporter that follows the writer (none when database
/// writes are disabled); a failure halts both actors.
pub(super) async fn checkpoint_before_subscribing(
    running: &Running,
    outcome: oneshot::Receiver<FirstOutcome>,
) -> Result<Option<HealthReporter>, StartError> {
    let sealed = running
        .model
        .send(CheckpointNow {
            trigger: Trigger::BeforeSubscribing,
        })
        .await;
    let result = match sealed {
        Ok(Ok(())) => match outcome.await {
            Ok(first) => first.map_err(StartError::from),
            Err(_) => Err(ExitReason::Failed {
                error: "the checkpoint actor stopped before the first checkpoint committed".into(),
            }
            .into()),
        },
        Ok(Err(error)) => Err(ExitReason::Failed { error }.into()),
        Err(e) => Err(ExitReason::Failed {
            error: format!("model actor unavailable: {e}"),
        }
        .into()),
    };
    if let Err(StartError::Superseded(reason) | StartError::Exit(reason)) = &result {
        running.halt(reason);
    }
    result
}

/// Spawns the monitor's MQTT connection, which subscribes to its readings.
pub(super) fn subscribe(
    worker: &WorkerContext,
    id: Uuid,
    config: &MonitorConfig,
    running: &Running,
) -> Result<mqtt::Ingestion, ExitReason> {
    let options = IngestOptions::from_settings(&worker.settings, &worker.worker_id, id)
        .map(|mut o| {
            o.backoff = worker.backoff;
            o
        })
        .map_err(|e| ExitReason::StartupFailed {
            reason: e.to_string(),
        });
    options
        .and_then(|o| {
            mqtt::spawn(o, &config.readings).map_err(|e| ExitReason::StartupFailed {
                reason: e.to_string(),
            })
        })
        .inspect_err(|reason| running.halt(reason))
}

/// Lets the worker's observer (if any) watch the monitor's views.
pub(super) fn attach_observer(
    worker: &WorkerContext,
    id: Uuid,
    config: &MonitorConfig,
    model_rx: &watch::Receiver<ModelView>,
    checkpoint_rx: &watch::Receiver<CheckpointView>,
) {
    if let Some(observer) = &worker.observer {
        observer.attach(MonitorWatch {
            id,
            readings: config.required_readings().map(|r| r.name.clone()).collect(),
            model: model_rx.clone(),
            checkpoint: checkpoint_rx.clone(),
        });
    }
}

/// Starts the health actor, which reports the monitor's status and
/// heartbeats through `reporter` (none when database writes are disabled).
pub(super) fn start_health_actor(
    worker: &WorkerContext,
    id: Uuid,
    inputs: HealthInputs,
    reporter: Option<HealthReporter>,
    monitor: &Addr<MonitorActor>,
    metrics: &MonitorTelemetry,
    span: &tracing::Span,
) -> Addr<HealthActor> {
    metrics.set_queue_capacity(worker.settings.ingress_queue_capacity);
    HealthActor::new(
        id,
        inputs,
        reporter,
        worker.heartbeats.clone(),
        monitor.clone(),
        metrics.clone(),
        span.clone(),
    )
    .start()
}
