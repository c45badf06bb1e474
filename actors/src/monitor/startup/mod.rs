//! Starting one monitor, in the order recovery requires: read and verify
//! the snapshot before decoding it, restore or start fresh, commit a
//! checkpoint before subscribing, then subscribe. That checkpoint takes the
//! path of every other: the model seals it, the checkpoint actor commits it
//! (its first write claims or resumes the row) and reports the commit; the
//! start only waits for the outcome. A graph run is admitted
//! first (its run must be this monitor's, not finished and not asked to
//! stop) and its bound revision compiled; a refused run ends the monitor
//! without touching its snapshot.

mod admit;
mod load;
mod steps;

use std::sync::Arc;

use actix::prelude::*;
use radar::telemetry::{MonitorTelemetry, events};
use radar::{
    runtime::{CoreError, ExitReason, retry_overtaken_start},
    snapshot::SnapshotBinding,
    store::MonitorRow,
};
use tracing::Instrument;
use uuid::Uuid;

use self::admit::admit;
use self::steps::{
    Actors, Running, attach_observer, checkpoint_before_subscribing, restore_or_start_fresh,
    start_actors, start_health_actor, subscribe,
};
use super::{
    MonitorActor,
    checkpoint::{CheckpointActor, FirstCommitError, FirstWrite},
    health::{HealthActor, HealthInputs},
    ingestion::IngestionActor,
    model::{AttachInput, ModelActor},
};
use crate::worker::WorkerContext;

/// A monitor's own model thread, ended when the monitor's parts are
/// dropped (or its start fails): a slow or stuck model delays only its own
/// monitor, never another one's.
pub struct ModelThread(Arbiter);

impl ModelThread {
    /// Spawns the thread with a runtime without drivers: the model does no
    /// IO (Tokio's IO driver would cost each monitor an epoll instance, an
    /// eventfd and a copy of the signal socket, four of its five
    /// descriptors; the fifth is its MQTT connection), and its ticks come
    /// from the worker's one timer (`ModelTicks`; a time driver would cost
    /// each monitor a timer wheel).
    ///
    /// Actix blocks the spawning thread until the new one runs; the spawn
    /// is made from the runtime's blocking pool, so that wait never holds
    /// up the worker's thread, which drives every other monitor's start
    /// (BENCHMARKS.md section 6, round 19).
    async fn spawn() -> std::io::Result<Self> {
        let system = actix::System::current();
        tokio::task::spawn_blocking(move || {
            actix::System::set_current(system);
            Arbiter::try_with_tokio_rt(|| tokio::runtime::Builder::new_current_thread().build())
                .map(Self)
        })
        .await
        .map_err(std::io::Error::other)?
    }
}

impl Drop for ModelThread {
    fn drop(&mut self) {
        // A thread blocked in a model operation ends when that returns.
        self.0.stop();
    }
}

pub struct Started {
    pub model: Addr<ModelActor>,
    pub model_thread: ModelThread,
    pub checkpoint: Addr<CheckpointActor>,
    pub health: Addr<HealthActor>,
    pub ingestion: Addr<IngestionActor>,
    /// The graph run this monitor executes, once admitted.
    pub run: Option<Uuid>,
}

fn core_error(e: CoreError) -> ExitReason {
    ExitReason::StartupFailed {
        reason: e.to_string(),
    }
}

/// Why one start attempt did not get the monitor running.
enum StartError {
    /// Another worker committed after the load: reload and try again.
    Superseded(ExitReason),
    Exit(ExitReason),
}

impl From<ExitReason> for StartError {
    fn from(reason: ExitReason) -> Self {
        Self::Exit(reason)
    }
}

impl From<FirstCommitError> for StartError {
    fn from(error: FirstCommitError) -> Self {
        match error {
            FirstCommitError::Superseded(reason) => Self::Superseded(reason),
            FirstCommitError::Failed(reason) => Self::Exit(reason),
        }
    }
}

/// Loads, restores and starts a monitor's actors; each attempt holds one
/// of the worker's start permits (released before a retry's pause).
pub async fn start(
    worker: Arc<WorkerContext>,
    row: MonitorRow,
    monitor: Addr<MonitorActor>,
    metrics: MonitorTelemetry,
    span: tracing::Span,
) -> Result<Started, ExitReason> {
    let mut attempt = 1;
    loop {
        metrics.emit(events::StartQueued {
            slots: worker.start_slots,
        });
        // A closed semaphore (shutdown) lets the start go ahead as before.
        let permit = worker.starts.acquire().await.ok();
        metrics.emit(events::StartBegun);
        let once = start_once(
            worker.clone(),
            row.clone(),
            monitor.clone(),
            metrics.clone(),
            span.clone(),
        );
        let result = once.instrument(span.clone()).await;
        drop(permit);
        match result {
            Ok(started) => return Ok(started),
            Err(StartError::Superseded(reason)) => match retry_overtaken_start(attempt) {
                Some(pause) => {
                    tracing::info!(monitor_id = %row.id, attempt, "{reason}");
                    attempt += 1;
                    tokio::time::sleep(pause).await;
                }
                None => return Err(reason),
            },
            Err(StartError::Exit(reason)) => return Err(reason),
        }
    }
}

/// One start attempt, in the order the module doc gives. Once the model
/// and checkpoint actors run, a step that fails halts them both.
async fn start_once(
    worker: Arc<WorkerContext>,
    row: MonitorRow,
    monitor: Addr<MonitorActor>,
    metrics: MonitorTelemetry,
    span: tracing::Span,
) -> Result<Started, StartError> {
    let id = row.id;
    let config = row
        .monitor_config()
        .map_err(|e| ExitReason::StartupFailed {
            reason: e.to_string(),
        })?;
    let graph = match &config.graph {
        Some(binding) => Some(admit(&worker, &row, binding).await?),
        None => None,
    };
    let run = config.graph.as_ref().map(|g| g.run_id);
    let binding = SnapshotBinding::for_monitor(id, &config);
    let (core, loaded) =
        restore_or_start_fresh(&worker, &row, &binding, config.clone(), graph, &metrics).await?;
    metrics.emit(events::DetectorPhaseChanged {
        phase: core.phase().into(),
    });
    let (reply, outcome) = tokio::sync::oneshot::channel();
    let first = FirstWrite {
        store: worker.store.clone(),
        firsts: worker.first_checkpoints.clone(),
        loaded,
        keep_open: core.open_alarm_opened_at(),
        graph_run: config.graph.is_some(),
        outcome: reply,
    };
    let Actors {
        running,
        model_thread,
        model_rx,
        checkpoint_rx,
    } = start_actors(&worker, core, binding, first, &monitor, &metrics, &span).await?;
    let reporter = checkpoint_before_subscribing(&running, outcome).await?;
    let ingestion = subscribe(&worker, id, &config, &running)?;
    running.model.do_send(AttachInput {
        messages: ingestion.messages,
    });
    attach_observer(&worker, id, &config, &model_rx, &checkpoint_rx);
    let inputs = HealthInputs {
        model: model_rx,
        checkpoint: checkpoint_rx,
        link: ingestion.status,
        ingress: ingestion.counters,
    };
    let health = start_health_actor(&worker, id, inputs, reporter, &monitor, &metrics, &span);
    let Running { model, checkpoint } = running;
    let ingestion = IngestionActor::new(
        id,
        ingestion.control,
        ingestion.events,
        model.clone(),
        metrics,
        span,
    )
    .start();
    tracing::info!(monitor_id = %id, name = %row.name, "Monitor started; subscribing.");
    Ok(Started {
        model,
        model_thread,
        checkpoint,
        health,
        ingestion,
        run,
    })
}
