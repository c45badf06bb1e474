//! The named steps of `start_once`, in the order it takes them.

use actix::prelude::*;
use chrono::Utc;
use radar::telemetry::{MonitorTelemetry, events};
use radar::{
    config::MonitorConfig,
    graph::CompiledGraph,
    mqtt::{self, IngestOptions},
    runtime::{Attempt, CheckpointPolicy, ExitReason, MonitorCore, Trigger},
    snapshot::{FencingToken, SealedSnapshot, SnapshotBinding},
    store::{CheckpointWriter, HealthReporter, MonitorRow},
};
use tokio::sync::watch;
use uuid::Uuid;

use super::first_commit::first_commit;
use super::load::{fresh, load};
use super::{ModelThread, StartError};
use crate::monitor::{
    MonitorActor,
    checkpoint::{CheckpointActor, Claimed},
    health::{HealthActor, HealthInputs},
    messages::{CommitReport, ContinueAlarms, Halt, SealNow, SealedNow},
    model::{ModelActor, ModelSetup},
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

/// Starts the checkpoint actor, which owns the writer once the first
/// commit hands it over; returns its view for health and the observer.
pub(super) fn start_checkpoint_actor(
    worker: &WorkerContext,
    id: Uuid,
    monitor: &Addr<MonitorActor>,
    metrics: &MonitorTelemetry,
    span: &tracing::Span,
) -> (Addr<CheckpointActor>, watch::Receiver<CheckpointView>) {
    let (checkpoint_view, checkpoint_rx) =
        watch::channel(CheckpointView::new(match worker.store {
            Some(_) => Ownership::Owner,
            None => Ownership::Disabled,
        }));
    let checkpoint = CheckpointActor::new(
        id,
        worker.checkpoint_timeout(),
        monitor.clone(),
        checkpoint_view,
        metrics.clone(),
        span.clone(),
    )
    .start();
    (checkpoint, checkpoint_rx)
}

/// Starts the model actor on the monitor's own thread; returns its view for
/// health and the observer. If the thread cannot start, the checkpoint
/// actor is halted.
pub(super) fn start_model_actor(
    worker: &WorkerContext,
    core: MonitorCore,
    binding: SnapshotBinding,
    checkpoint: &Addr<CheckpointActor>,
    monitor: &Addr<MonitorActor>,
    metrics: &MonitorTelemetry,
    span: &tracing::Span,
) -> Result<(ModelThread, Addr<ModelActor>, watch::Receiver<ModelView>), ExitReason> {
    let (model_view, model_rx) = watch::channel(ModelActor::initial_view(&core));
    let setup = ModelSetup {
        core,
        binding,
        key: worker.key.clone(),
        max_payload_bytes: worker.settings.mqtt_max_message_bytes,
        policy: CheckpointPolicy::new(worker.checkpoint_limits()),
        checkpoint: checkpoint.clone(),
        monitor: monitor.clone(),
        view: model_view,
        observer: worker.observer.clone(),
        metrics: metrics.clone(),
        span: span.clone(),
    };
    let model_thread = match ModelThread::spawn() {
        Ok(thread) => thread,
        Err(e) => {
            let reason = ExitReason::StartupFailed {
                reason: format!(
                    "could not start the monitor's model thread: {e}; the worker may be out of threads or file descriptors (see its RLIMIT_NOFILE)"
                ),
            };
            checkpoint.do_send(Halt {
                reason: reason.clone(),
            });
            return Err(reason);
        }
    };
    let model =
        ModelActor::start_in_arbiter(&model_thread.0.handle(), move |_| ModelActor::new(setup));
    Ok((model_thread, model, model_rx))
}

/// Asks the model for the snapshot of the checkpoint before subscribing.
pub(super) async fn seal_before_subscribing(running: &Running) -> Result<SealedNow, StartError> {
    match running
        .model
        .send(SealNow {
            trigger: Trigger::BeforeSubscribing,
        })
        .await
    {
        Ok(Ok(sealed)) => Ok(sealed),
        Ok(Err(error)) => {
            let reason = ExitReason::Failed { error };
            running.halt(&reason);
            Err(reason.into())
        }
        Err(e) => {
            let reason = ExitReason::Failed {
                error: format!("model actor unavailable: {e}"),
            };
            running.halt(&reason);
            Err(reason.into())
        }
    }
}

/// The checkpoint before subscribing: a fresh monitor claims its row (one
/// winner among racing workers), a restored one replaces exactly the
/// snapshot it loaded. Returns no writer when database writes are disabled.
pub(super) async fn commit_before_subscribing(
    worker: &WorkerContext,
    running: &Running,
    sealed: &SealedSnapshot,
    loaded: Option<FencingToken>,
    keep_open: Option<chrono::DateTime<Utc>>,
    graph_run: bool,
    metrics: &MonitorTelemetry,
) -> Result<Option<CheckpointWriter>, StartError> {
    let commit_started = std::time::Instant::now();
    let Some(store) = &worker.store else {
        return Ok(None);
    };
    match first_commit(store, sealed, loaded, keep_open, graph_run).await {
        Ok((writer, alarms)) => {
            // Before any input reaches the model (messages keep their order).
            running.model.do_send(ContinueAlarms {
                after: alarms.highest_seq,
            });
            metrics.emit(events::CheckpointCommitted {
                trigger: Trigger::BeforeSubscribing,
                duration: commit_started.elapsed(),
                bytes: sealed.bytes.payload.len() as u64,
                saved_at: sealed.envelope.saved_at,
            });
            Ok(Some(writer))
        }
        Err(error) => {
            let (StartError::Superseded(reason) | StartError::Exit(reason)) = &error;
            running.halt(reason);
            Err(error)
        }
    }
}

/// Reports the first commit to the model and hands the writer (if any) to
/// the checkpoint actor; returns the health reporter that follows it.
pub(super) fn hand_over_the_writer(
    running: &Running,
    writer: Option<CheckpointWriter>,
    attempt: Attempt,
    metrics: &MonitorTelemetry,
) -> Option<HealthReporter> {
    let reporter = writer.as_ref().map(CheckpointWriter::health_reporter);
    if writer.is_some() {
        metrics.emit(events::OwnershipAcquired);
    }
    running.model.do_send(CommitReport {
        committed: true,
        attempt,
        trigger: Some(Trigger::BeforeSubscribing),
        wall: Utc::now(),
    });
    running.checkpoint.do_send(Claimed {
        writer,
        model: running.model.clone(),
    });
    reporter
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
