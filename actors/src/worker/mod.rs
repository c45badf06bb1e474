//! `radar worker`: one process, one supervisor, many monitors.
//!
//! - this file: the worker's shared context, [`start`] and [`RunningWorker`]
//!   (used by `radar worker` and `radar demo`), and the `radar worker` command.
//! - `supervisor`: admits monitors, starts and restarts their actors.
//! - `observer`: an optional window onto running monitors for `radar demo`.

mod observer;
mod supervisor;

use std::{
    process::ExitCode,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use actix::prelude::*;
use anyhow::Context as _;
use radar::{
    config::Settings,
    mqtt::Backoff,
    runtime::CheckpointLimits,
    snapshot::CheckpointKey,
    store::{self, CheckpointStore, GraphStore, MonitorRow, Services, StoreError},
    telemetry::Telemetry,
};
use tokio::sync::oneshot;
use uuid::Uuid;

pub use observer::{MonitorWatch, Notice, Observer};
pub use supervisor::{Scope, Shutdown, Supervisor, WorkerOutcome};

/// Connections per process; monitors write one at a time each.
pub const POOL_SIZE: usize = 16;
/// How long a graceful stop may take beyond the checkpoint timeout.
const STOP_GRACE: Duration = Duration::from_secs(15);

/// What every monitor of this process shares.
pub struct WorkerContext {
    pub settings: Settings,
    pub worker_id: String,
    pub key: Arc<CheckpointKey>,
    /// `None` when database writes are disabled.
    pub store: Option<CheckpointStore>,
    pub monitors: MonitorSource,
    /// Graph runs: admission, the bound revision, failure records, stops.
    /// `None` without a database (`radar demo` with writes disabled).
    pub graphs: Option<GraphStore>,
    pub backoff: Backoff,
    pub telemetry: Telemetry,
    /// Set by `radar demo`: it reads the monitors' views and notices.
    pub observer: Option<Observer>,
    model_arbiters: Vec<ArbiterHandle>,
    next_arbiter: AtomicUsize,
}

/// Where the supervisor finds the monitors to run.
#[derive(Clone)]
pub enum MonitorSource {
    /// The `services` table, polled for new and retired monitors.
    Database(Services),
    /// Monitors that exist only in this process: `radar demo` without
    /// PostgreSQL (database writes disabled, nothing to poll).
    Fixed(Arc<[MonitorRow]>),
}

impl MonitorSource {
    /// Every monitor, retired ones included.
    pub async fn list(&self) -> Result<Vec<MonitorRow>, StoreError> {
        match self {
            Self::Database(services) => services.list(true).await,
            Self::Fixed(rows) => Ok(rows.to_vec()),
        }
    }
}

impl WorkerContext {
    /// The model arbiter for the next monitor, round robin: models never run
    /// on the IO arbiter.
    pub fn model_arbiter(&self) -> ArbiterHandle {
        let n = self.next_arbiter.fetch_add(1, Ordering::Relaxed);
        self.model_arbiters[n % self.model_arbiters.len()].clone()
    }

    pub fn checkpoint_limits(&self) -> CheckpointLimits {
        CheckpointLimits {
            interval_frames: self.settings.checkpoint_interval,
            max_interval: Duration::from_secs(self.settings.checkpoint_max_interval_seconds),
            timeout: self.checkpoint_timeout(),
        }
    }

    pub fn checkpoint_timeout(&self) -> Duration {
        self.settings.checkpoint_timeout()
    }
}

#[derive(Debug, clap::Args)]
pub struct WorkerArgs {
    /// Run exactly this monitor (ignores RADAR_SHARD); the process exits
    /// non-zero if it cannot start.
    #[arg(long, value_name = "ID")]
    monitor: Option<Uuid>,
}

/// Runs the worker until SIGTERM/SIGINT, then stops every monitor gracefully.
pub fn run(args: WorkerArgs, settings: Settings) -> anyhow::Result<ExitCode> {
    let system = actix_rt::System::new();
    system.block_on(serve(args, settings))
}

async fn serve(args: WorkerArgs, settings: Settings) -> anyhow::Result<ExitCode> {
    let worker_id = settings.worker_id();
    store::check_schema(&settings.database_url)
        .await
        .context("checking the database schema")?;
    let (secret, source) = settings.checkpoint_key()?;
    let key = Arc::new(CheckpointKey::new(secret.expose().to_vec()));
    // Every monitor's client uses this login: refuse a bad one before any starts.
    let mqtt_login = settings
        .mqtt_credentials()
        .context("reading the MQTT credentials")?;
    tracing::info!(
        worker_id = %worker_id,
        env = ?settings.env,
        key_source = %source,
        database = %settings.database_url,
        database_url_file = ?settings.database_url_file,
        mqtt_username = ?mqtt_login.as_ref().map(|l| l.username.as_str()),
        mqtt_password_source = ?mqtt_login.as_ref().and_then(|l| l.password_source.as_deref()),
        key_id = %key.key_id(),
        shard = %settings.shard,
        db_writes = settings.db_write_enabled,
        "Starting the radar worker."
    );
    let (meter_provider, registry) = crate::http::init_meter_provider(&worker_id)?;
    let telemetry = Telemetry::global();
    let server = crate::http::start(settings.metrics_addr, registry, telemetry.board().clone())
        .with_context(|| {
            format!(
                "listening for metrics and health on {}",
                settings.metrics_addr
            )
        })?;
    let server_handle = server.handle();
    actix_rt::spawn(server);
    tracing::info!(addr = %settings.metrics_addr, "Serving /metrics, /healthz and /readyz.");
    let pool = store::connect(
        &settings.database_url,
        POOL_SIZE,
        settings.checkpoint_timeout(),
    )
    .await
    .context("connecting to PostgreSQL")?;
    let store = settings
        .db_write_enabled
        .then(|| CheckpointStore::new(pool.clone(), worker_id.clone()));
    if store.is_none() {
        tracing::warn!(
            "RADAR_DB_WRITE_ENABLED=false: no snapshot is read or written; every monitor starts fresh."
        );
    }
    let mut worker = start(
        WorkerSetup {
            backoff: backoff_from_env(),
            telemetry,
            graphs: Some(GraphStore::new(pool.clone())),
            monitors: MonitorSource::Database(store::Services::new(pool)),
            observer: None,
            settings,
            worker_id,
            key,
            store,
        },
        args.monitor.map_or(Scope::Shard, Scope::Monitor),
    );
    let outcome = tokio::select! {
        outcome = worker.ended() => outcome,
        signal = shutdown_signal() => {
            tracing::info!(signal, "Stopping gracefully: ingestion first, then every monitor's last snapshot.");
            worker.stop().await
        }
    };
    worker.release();
    server_handle.stop(true).await;
    if let Err(e) = meter_provider.shutdown() {
        tracing::warn!(error = %e, "Could not flush metrics at shutdown.");
    }
    Ok(outcome.exit_code())
}

/// Everything a worker starts with.
pub struct WorkerSetup {
    pub settings: Settings,
    pub worker_id: String,
    pub key: Arc<CheckpointKey>,
    /// `None` when database writes are disabled.
    pub store: Option<CheckpointStore>,
    pub monitors: MonitorSource,
    pub graphs: Option<GraphStore>,
    pub backoff: Backoff,
    pub telemetry: Telemetry,
    pub observer: Option<Observer>,
}

/// A started worker: its supervisor and model threads.
pub struct RunningWorker {
    supervisor: Addr<Supervisor>,
    done: Option<oneshot::Receiver<WorkerOutcome>>,
    arbiters: Vec<Arbiter>,
    stop_after: Duration,
}

/// Starts the supervisor (on the current actix system) and one model thread
/// per core. Call inside a running `actix_rt::System`.
pub fn start(setup: WorkerSetup, scope: Scope) -> RunningWorker {
    let parallelism = std::thread::available_parallelism().map_or(1, usize::from);
    let arbiters: Vec<Arbiter> = (0..parallelism).map(|_| Arbiter::new()).collect();
    let stop_after = setup.settings.checkpoint_timeout() + STOP_GRACE;
    let context = Arc::new(WorkerContext {
        model_arbiters: arbiters.iter().map(Arbiter::handle).collect(),
        next_arbiter: AtomicUsize::new(0),
        settings: setup.settings,
        worker_id: setup.worker_id,
        key: setup.key,
        store: setup.store,
        monitors: setup.monitors,
        graphs: setup.graphs,
        backoff: setup.backoff,
        telemetry: setup.telemetry,
        observer: setup.observer,
    });
    let (done_tx, done_rx) = oneshot::channel();
    let supervisor = Supervisor::new(context, scope, done_tx).start();
    RunningWorker {
        supervisor,
        done: Some(done_rx),
        arbiters,
        stop_after,
    }
}

impl RunningWorker {
    /// Resolves when the worker ends by itself (`--monitor ID` that cannot
    /// run); otherwise never.
    pub async fn ended(&mut self) -> WorkerOutcome {
        match self.done.as_mut() {
            Some(done) => {
                let outcome = done.await.unwrap_or(WorkerOutcome::Stopped);
                self.done = None;
                outcome
            }
            None => std::future::pending().await,
        }
    }

    /// Stops every monitor gracefully (ingestion first, then each one's last
    /// snapshot) within the checkpoint timeout plus a grace period; a second
    /// SIGTERM/SIGINT gives up waiting.
    pub async fn stop(&self) -> WorkerOutcome {
        self.supervisor.do_send(Shutdown);
        stop_within(self.stop_after, self.supervisor.clone()).await
    }

    /// Ends the model threads once every monitor has stopped.
    pub fn release(self) {
        for arbiter in &self.arbiters {
            arbiter.stop();
        }
    }
}

/// The MQTT reconnect schedule: production values unless the test-only
/// variables shrink it (`RADAR_TEST_MQTT_BACKOFF_MS`, initial,max in ms).
pub(crate) fn backoff_from_env() -> Backoff {
    std::env::var("RADAR_TEST_MQTT_BACKOFF_MS")
        .ok()
        .and_then(|v| {
            let (initial, max) = v.split_once(',')?;
            Some(Backoff {
                initial: Duration::from_millis(initial.trim().parse().ok()?),
                max: Duration::from_millis(max.trim().parse().ok()?),
            })
        })
        .unwrap_or(Backoff::PRODUCTION)
}

async fn stop_within(limit: Duration, supervisor: Addr<Supervisor>) -> WorkerOutcome {
    let wait = supervisor.send(supervisor::WhenStopped);
    tokio::select! {
        done = tokio::time::timeout(limit, wait) => match done {
            Ok(Ok(outcome)) => outcome,
            _ => {
                tracing::error!(seconds = limit.as_secs(), "Monitors did not stop in time; exiting anyway.");
                WorkerOutcome::StopTimedOut
            }
        },
        _ = shutdown_signal() => {
            tracing::error!("Second stop signal: exiting without waiting for the last snapshots.");
            WorkerOutcome::StopTimedOut
        }
    }
}

/// Resolves on SIGTERM or SIGINT, naming which.
pub(crate) async fn shutdown_signal() -> &'static str {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(term) => term,
        Err(e) => {
            tracing::error!(error = %e, "Cannot listen for SIGTERM; only SIGINT stops the worker.");
            let _ = tokio::signal::ctrl_c().await;
            return "SIGINT";
        }
    };
    tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = tokio::signal::ctrl_c() => "SIGINT",
    }
}
