//! Starting one monitor, in the order recovery requires: read and verify
//! the snapshot before decoding it, restore or start fresh, commit a
//! checkpoint before subscribing, then subscribe. A graph run is admitted
//! first (its run must be this monitor's, not finished and not asked to
//! stop) and its bound revision compiled; a refused run ends the monitor
//! without touching its snapshot.

use std::sync::Arc;

use actix::prelude::*;
use chrono::Utc;
use radar::telemetry::{MonitorTelemetry, events};
use radar::{
    config::MonitorConfig,
    graph::{CompiledGraph, GraphBinding},
    mqtt::{self, IngestOptions},
    runtime::{
        Attempt, CheckpointPolicy, CoreError, ExitReason, MonitorCore, RefusedRun, StartPlan,
        Trigger, retry_overtaken_start,
    },
    snapshot::{FencingToken, SealedSnapshot, SnapshotBinding},
    store::{
        Admission, AlarmReconciliation, CheckpointStore, CheckpointWriter, Claim, GraphStoreError,
        HealthRecord, HealthReporter, MonitorRow, PendingResults, ReconcileError, WriteOutcome,
    },
};
use tokio::sync::watch;
use tracing::Instrument;
use uuid::Uuid;

use super::{
    MonitorActor,
    checkpoint::{CheckpointActor, Claimed},
    health::{HealthActor, HealthInputs},
    ingestion::IngestionActor,
    messages::{AttachInput, CommitReport, ContinueAlarms, Halt, SealNow, SealedNow},
    model::{ModelActor, ModelSetup},
    view::{CheckpointView, ModelView, Ownership},
};
use crate::worker::{MonitorWatch, WorkerContext};

/// A monitor's own model thread, ended when the monitor's parts are
/// dropped (or its start fails): a slow or stuck model delays only its own
/// monitor, never another one's.
pub struct ModelThread(Arbiter);

impl ModelThread {
    /// Spawns the thread with a runtime that has only a timer: the model
    /// does no IO, and Tokio's IO driver would cost each monitor an epoll
    /// instance, an eventfd and a copy of the signal socket (four of its
    /// five descriptors; the fifth is its MQTT connection).
    fn spawn() -> std::io::Result<Self> {
        Arbiter::try_with_tokio_rt(|| {
            tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()
        })
        .map(Self)
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

/// Loads, restores and starts a monitor's actors.
pub async fn start(
    worker: Arc<WorkerContext>,
    row: MonitorRow,
    monitor: Addr<MonitorActor>,
    metrics: MonitorTelemetry,
    span: tracing::Span,
) -> Result<Started, ExitReason> {
    let mut attempt = 1;
    loop {
        let once = start_once(
            worker.clone(),
            row.clone(),
            monitor.clone(),
            metrics.clone(),
            span.clone(),
        );
        match once.instrument(span.clone()).await {
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
    let (checkpoint, checkpoint_rx) =
        start_checkpoint_actor(&worker, id, &monitor, &metrics, &span);
    let keep_open = core.open_alarm_opened_at();
    let (model_thread, model, model_rx) = start_model_actor(
        &worker,
        core,
        binding,
        &checkpoint,
        &monitor,
        &metrics,
        &span,
    )?;
    let running = Running { model, checkpoint };
    let SealedNow { sealed, attempt } = seal_before_subscribing(&running).await?;
    let graph_run = config.graph.is_some();
    let writer = commit_before_subscribing(
        &worker, &running, &sealed, loaded, keep_open, graph_run, &metrics,
    )
    .await?;
    let reporter = hand_over_the_writer(&running, writer, attempt, &metrics);
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

/// The model and checkpoint actors of a start that got them running.
struct Running {
    model: Addr<ModelActor>,
    checkpoint: Addr<CheckpointActor>,
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
async fn restore_or_start_fresh(
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
fn start_checkpoint_actor(
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
fn start_model_actor(
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
async fn seal_before_subscribing(running: &Running) -> Result<SealedNow, StartError> {
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
async fn commit_before_subscribing(
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
fn hand_over_the_writer(
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
fn subscribe(
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
fn attach_observer(
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
fn start_health_actor(
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

/// A new model: the built-in detector, or the graph run's nodes.
fn fresh(
    id: Uuid,
    config: MonitorConfig,
    graph: Option<CompiledGraph>,
) -> Result<MonitorCore, ExitReason> {
    let now = Utc::now();
    match graph {
        Some(graph) => MonitorCore::fresh_graph(id, config, graph, now),
        None => MonitorCore::fresh(id, config, now),
    }
    .map_err(core_error)
}

/// Compiles a graph run's bound revision and admits the run. Admission is
/// checked in the database with the claim itself: the run must belong to
/// this monitor, carry this binary's launch contract, be neither failed nor
/// stopped, and its lifecycle intent must be `running`. A refusal ends the
/// monitor without touching its snapshot; only its status says why.
async fn admit(
    worker: &WorkerContext,
    row: &MonitorRow,
    binding: &GraphBinding,
) -> Result<CompiledGraph, ExitReason> {
    let id = row.id;
    let (Some(store), Some(graphs)) = (&worker.store, &worker.graphs) else {
        return Err(ExitReason::StartupFailed {
            reason: format!(
                "monitor {id} runs graph run {}, which needs database writes \
                 (RADAR_DB_WRITE_ENABLED=false): its failures must be recorded under the \
                 snapshot row lock; enable database writes for this worker",
                binding.run_id
            ),
        });
    };
    let compiled = match graphs.compiled_for(binding).await {
        Ok(compiled) => compiled,
        Err(GraphStoreError::Store(e)) => {
            return Err(ExitReason::Failed {
                error: format!(
                    "reading graph {:?} revision {} for monitor {id}: {e}",
                    binding.graph, binding.revision
                ),
            });
        }
        Err(e) => {
            return Err(ExitReason::StartupFailed {
                reason: format!("monitor {id} cannot run graph run {}: {e}", binding.run_id),
            });
        }
    };
    let refusal = match graphs.admit(binding.run_id, id).await {
        Ok(Admission::Admitted(run)) => {
            tracing::info!(
                monitor_id = %id,
                run_id = %run.id,
                graph = %binding.graph,
                revision = run.revision,
                generation = run.generation,
                "Admitted graph run."
            );
            return Ok(compiled);
        }
        Ok(Admission::Refused(refusal)) => refusal,
        Err(e) => {
            return Err(ExitReason::Failed {
                error: format!(
                    "admitting graph run {} of monitor {id}: {e}",
                    binding.run_id
                ),
            });
        }
    };
    let refused = RefusedRun::new(binding.run_id, &refusal);
    let is_error = refused.is_error();
    let RefusedRun { exit, reason } = refused;
    if is_error {
        tracing::error!(monitor_id = %id, run_id = %binding.run_id, %reason, "Graph run not admitted; the monitor ends here and its snapshot is left as it is.")
    } else {
        tracing::info!(monitor_id = %id, run_id = %binding.run_id, %reason, "Graph run not admitted; the monitor ends here and its snapshot is left as it is.")
    }
    // The status row says why; the snapshot row is only read, for the
    // signature that fences this status write.
    let seen = match store.load_snapshot(id).await {
        Ok(stored) => stored.map(|s| s.signature().to_vec()),
        Err(e) => {
            tracing::warn!(monitor_id = %id, error = %e, "Could not read the snapshot row to persist the refusal.");
            return Err(exit);
        }
    };
    persist_unowned(store, id, seen.as_deref(), exit.state(), &reason).await;
    Err(exit)
}

/// Writes the status of a monitor that did not start, unless another worker
/// committed its snapshot since `seen` was read.
async fn persist_unowned(
    store: &CheckpointStore,
    id: Uuid,
    seen: Option<&[u8]>,
    state: &str,
    reason: &str,
) {
    let record = HealthRecord {
        state: state.into(),
        phase: None,
        connected: false,
        processed_count: 0,
        last_checkpoint_at: None,
        recovery: None,
        coverage: None,
        last_error: Some(reason.to_string()),
        readings_seen: Vec::new(),
        heartbeat_at: Utc::now(),
    };
    if let Err(e) = store.report_unowned(id, seen, &record).await {
        tracing::warn!(monitor_id = %id, error = %e, "Could not persist why the monitor did not start.");
    }
}

/// Reads and opens the snapshot. Corrupted or incompatible snapshots fail
/// the start with the reason persisted in the operational status.
async fn load(
    store: &CheckpointStore,
    worker: &WorkerContext,
    row: &MonitorRow,
    binding: &SnapshotBinding,
    config: MonitorConfig,
    graph: Option<CompiledGraph>,
    metrics: &MonitorTelemetry,
) -> Result<(MonitorCore, Option<FencingToken>), ExitReason> {
    let id = row.id;
    let now = Utc::now();
    let stored = store
        .load_snapshot(id)
        .await
        .map_err(|e| ExitReason::Failed {
            error: format!("reading the snapshot of monitor {id}: {e}"),
        })?;
    let opened = stored.as_ref().map(|s| s.open(binding, &worker.key));
    let reason = match StartPlan::from_load(opened) {
        StartPlan::Fresh => {
            tracing::info!(monitor_id = %id, "No snapshot: starting a new detector.");
            return Ok((fresh(id, config, graph)?, None));
        }
        StartPlan::Restore(restored) => {
            let saved_at = restored.envelope.saved_at;
            let processed = restored.envelope.processed_count;
            let core = match graph {
                Some(graph) => {
                    MonitorCore::restore_graph(id, config, graph, restored.state, saved_at, now)
                }
                None => MonitorCore::restore(
                    id,
                    config,
                    restored.state,
                    restored.detector,
                    saved_at,
                    now,
                ),
            }
            .map_err(core_error)?;
            metrics.emit(events::SnapshotRestored {
                restored_processed: processed,
                saved_at,
                partial_frames_cleared: core.recovery().cleared_partial_observations,
            });
            return Ok((core, Some(restored.token)));
        }
        StartPlan::Refuse { reason } => reason,
    };
    tracing::error!(monitor_id = %id, %reason, "Refusing to start the monitor.");
    let exit = StartPlan::refusal_exit(reason.clone());
    let seen = stored.as_ref().map(|s| s.signature());
    persist_unowned(store, id, seen, exit.state(), &reason).await;
    Err(exit)
}

/// The checkpoint before subscribing, then the alarm reconciliation: a
/// detector restored after a hard crash does not know alarms that a
/// background batch committed after its snapshot. They are closed (it would
/// never close them) and new alarms are numbered after every stored one.
async fn first_commit(
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
