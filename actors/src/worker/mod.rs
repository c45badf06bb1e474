//! `radar worker`: one process, one supervisor, many monitors.
//!
//! - this file: the worker's shared context, [`start`] and [`RunningWorker`]
//!   (used by `radar worker` and `radar demo`), and the `radar worker` command.
//! - `serve`: the steps of `radar worker`, from start-up to shutdown.
//! - `supervisor`: admits monitors, starts and restarts their actors.
//! - `observer`: an optional window onto running monitors for `radar demo`.

mod limits;
mod observer;
mod serve;
mod supervisor;

use std::{process::ExitCode, sync::Arc, time::Duration};

use actix::prelude::*;
use anyhow::Context as _;
use radar::{
    config::Settings,
    mqtt::Backoff,
    runtime::{CheckpointLimits, RetryBackoff},
    snapshot::CheckpointKey,
    store::{
        self, CheckpointStore, FirstCheckpoints, GraphStore, Heartbeats, MonitorHead, MonitorRow,
        Services, SnapshotReads, StoreError,
    },
    telemetry::Telemetry,
};
use tokio::sync::{Semaphore, oneshot};
use uuid::Uuid;

use crate::monitor::{HealthBeats, ModelTicks};

pub use observer::{MonitorWatch, Notice, Observer};
pub use supervisor::{Scope, Shutdown, Supervisor, WorkerOutcome};

/// Connections per process; monitors write one at a time each.
pub const POOL_SIZE: usize = 16;
/// Monitors starting at once (load, restore, first checkpoint, subscribe).
/// Enough to keep the pool busy while others seal their first snapshot;
/// thousands at once would only queue on the pool and share the cores, so
/// every one of them would finish late (10,000 took 40 s).
pub const START_CONCURRENCY: usize = 4 * POOL_SIZE;
/// How long a graceful stop may take beyond the checkpoint timeout.
const STOP_GRACE: Duration = Duration::from_secs(15);

/// What every monitor of this process shares.
pub struct WorkerContext {
    pub settings: Settings,
    pub worker_id: String,
    pub key: Arc<CheckpointKey>,
    /// `None` when database writes are disabled.
    pub store: Option<CheckpointStore>,
    /// Where starting monitors read their snapshots, gathered (with `store`).
    pub snapshots: Option<SnapshotReads>,
    /// Where restarting monitors write their first checkpoints, gathered
    /// (with `store`).
    pub first_checkpoints: Option<FirstCheckpoints>,
    /// Every monitor's health beat, driven together, and its periodic
    /// status written together (with `store`).
    pub heartbeats: HealthBeats,
    /// The one timer of every model's clock-driven checks.
    pub model_ticks: ModelTicks,
    pub monitors: MonitorSource,
    /// Graph runs: admission, the bound revision, failure records, stops.
    /// `None` without a database (`radar demo` with writes disabled).
    pub graphs: Option<GraphStore>,
    pub backoff: Backoff,
    pub telemetry: Telemetry,
    /// Set by `radar demo`: it reads the monitors' views and notices.
    pub observer: Option<Observer>,
    /// Start permits ([`start_concurrency`] of them); closed at shutdown,
    /// after which starts no longer wait for one.
    pub starts: Semaphore,
    /// How many permits `starts` was made with.
    pub start_slots: usize,
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
    /// Every monitor's id, name and retirement, retired ones included;
    /// no configs (the supervisor polls this every few seconds).
    pub async fn heads(&self) -> Result<Vec<MonitorHead>, StoreError> {
        match self {
            Self::Database(services) => services.heads().await,
            Self::Fixed(rows) => Ok(rows.iter().map(MonitorHead::from).collect()),
        }
    }

    /// The current stored rows, configs included, of these monitors.
    pub async fn rows(&self, ids: &[Uuid]) -> Result<Vec<MonitorRow>, StoreError> {
        match self {
            Self::Database(services) => services.rows(ids).await,
            Self::Fixed(rows) => Ok(rows
                .iter()
                .filter(|r| ids.contains(&r.id))
                .cloned()
                .collect()),
        }
    }
}

impl WorkerContext {
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
    system.block_on(serve::serve(args, settings))
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
    stop_after: Duration,
}

/// Starts the supervisor (on the current actix system); each monitor starts
/// its own model thread. Call inside a running `actix_rt::System`.
pub fn start(setup: WorkerSetup, scope: Scope) -> RunningWorker {
    let stop_after = setup.settings.checkpoint_timeout() + STOP_GRACE;
    let start_slots = start_concurrency();
    let batch = setup.store.clone().map(|store| {
        let (heartbeats, flusher) = Heartbeats::new(store, store::FLUSH_EVERY);
        actix_rt::spawn(flusher.run());
        heartbeats
    });
    let snapshots = setup.store.clone().map(|store| {
        let (reads, reader) = SnapshotReads::new(store);
        actix_rt::spawn(reader.run());
        reads
    });
    let first_checkpoints = setup.store.clone().map(|store| {
        let (firsts, writer) = FirstCheckpoints::new(store);
        actix_rt::spawn(writer.run());
        firsts
    });
    let (heartbeats, driver) = HealthBeats::new(batch);
    actix_rt::spawn(driver);
    let (model_ticks, ticker) = ModelTicks::new();
    actix_rt::spawn(ticker);
    let context = Arc::new(WorkerContext {
        settings: setup.settings,
        worker_id: setup.worker_id,
        key: setup.key,
        store: setup.store,
        snapshots,
        first_checkpoints,
        heartbeats,
        model_ticks,
        monitors: setup.monitors,
        graphs: setup.graphs,
        backoff: setup.backoff,
        telemetry: setup.telemetry,
        observer: setup.observer,
        starts: Semaphore::new(start_slots),
        start_slots,
    });
    let (done_tx, done_rx) = oneshot::channel();
    let supervisor = Supervisor::new(context, scope, done_tx).start();
    RunningWorker {
        supervisor,
        done: Some(done_rx),
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
}

/// Why the worker is not ready while it waits for the database.
const DATABASE_UNAVAILABLE: &str = "database_unavailable";

/// Checks the schema and builds the pool, waiting (not ready, retrying
/// with pauses that double up to 30 s) while PostgreSQL cannot be reached:
/// a worker started during a database outage starts when it answers. A
/// schema this binary cannot run on is an error at once.
async fn wait_for_database(
    settings: &Settings,
    board: &radar::telemetry::Board,
) -> anyhow::Result<store::Pool> {
    let timeout = settings.checkpoint_timeout();
    let mut backoff = RetryBackoff::new(Duration::from_secs(30));
    loop {
        let attempt = async {
            tokio::time::timeout(timeout, store::check_schema(&settings.database_url))
                .await
                .unwrap_or(Err(StoreError::Timeout {
                    seconds: timeout.as_secs(),
                }))?;
            store::connect(&settings.database_url, POOL_SIZE, timeout).await
        };
        match attempt.await {
            Ok(pool) => {
                if board.release(DATABASE_UNAVAILABLE) {
                    tracing::info!("PostgreSQL answers; starting the monitors.");
                }
                return Ok(pool);
            }
            Err(
                e @ (StoreError::Connect(_) | StoreError::Timeout { .. } | StoreError::Pool(_)),
            ) => {
                let pause = backoff.failed(std::time::Instant::now());
                let detail = format!("PostgreSQL cannot be reached: {e}");
                tracing::warn!(error = %e, retry_in_seconds = pause.as_secs(), "PostgreSQL cannot be reached; the worker is not ready and starts no monitor until it answers.");
                board.hold(DATABASE_UNAVAILABLE, detail);
                tokio::time::sleep(pause).await;
            }
            Err(e) => return Err(e).context("checking the database schema"),
        }
    }
}

/// Why the worker is not ready while its clock disagrees with the database's.
const CLOCK_SKEW: &str = "clock_skew";
/// How far this worker's clock may be from the database's. Source times
/// are judged on this clock (freshness, age, future tolerance), so an
/// offset beyond a few seconds rejects or admits input wrongly.
const CLOCK_TOLERANCE: chrono::TimeDelta = chrono::TimeDelta::seconds(2);
const CLOCK_CHECK_EVERY: Duration = Duration::from_secs(10);

/// Refreshes this worker's row in `radar_workers`; a failure is logged
/// once until a heartbeat lands again (the database being away is
/// reported by the monitors).
async fn worker_heartbeats(pool: store::Pool, advert: store::fleet::WorkerAdvert) {
    let mut failing = false;
    loop {
        tokio::time::sleep(store::fleet::WORKER_HEARTBEAT_EVERY).await;
        match store::fleet::worker_heartbeat(&pool, &advert).await {
            Ok(()) => failing = false,
            Err(e) if !failing => {
                failing = true;
                tracing::warn!(error = %e, "Could not refresh this worker's heartbeat in radar_workers; retrying.");
            }
            Err(_) => {}
        }
    }
}

/// Compares this worker's clock with the database's every 10 s (see
/// [`clock_agrees`]).
async fn watch_clock(pool: store::Pool, board: radar::telemetry::Board) {
    loop {
        tokio::time::sleep(CLOCK_CHECK_EVERY).await;
        clock_agrees(&pool, &board).await;
    }
}

/// Compares this worker's clock with the database's: while they disagree
/// by more than the tolerance (beyond what the round trip leaves uncertain)
/// the worker is not ready and says so once. A clock that cannot be read
/// counts as agreeing (the database being away is reported elsewhere).
async fn clock_agrees(pool: &store::Pool, board: &radar::telemetry::Board) -> bool {
    let reading = match store::read_clock(pool).await {
        Ok(reading) => reading,
        Err(e) => {
            tracing::debug!(error = %e, "Could not read the database's clock.");
            return true;
        }
    };
    if reading.offset.abs() - reading.uncertainty <= CLOCK_TOLERANCE {
        if board.release(CLOCK_SKEW) {
            tracing::info!("This worker's clock agrees with PostgreSQL's again.");
        }
        return true;
    }
    let seconds = reading.offset.num_milliseconds() as f64 / 1000.0;
    let (how, by) = if seconds < 0.0 {
        ("ahead of", -seconds)
    } else {
        ("behind", seconds)
    };
    let detail = format!(
        "this worker's clock is {by:.1} s {how} PostgreSQL's; source times are judged on it, \
         so fix the host's time synchronization (NTP)"
    );
    if !board.release(CLOCK_SKEW) {
        tracing::error!(
            offset_seconds = seconds,
            "{detail}; the worker reports not ready (and starts no monitor) until the clocks agree."
        );
    }
    board.hold(CLOCK_SKEW, detail);
    false
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

/// [`START_CONCURRENCY`], unless the test-only
/// `RADAR_TEST_START_CONCURRENCY` lowers it (1 up to the default), so that
/// a test can watch starts wait for a slot.
fn start_concurrency() -> usize {
    std::env::var("RADAR_TEST_START_CONCURRENCY")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .filter(|n| (1..=START_CONCURRENCY).contains(n))
        .unwrap_or(START_CONCURRENCY)
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
