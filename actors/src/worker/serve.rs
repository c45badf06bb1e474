//! The steps of `radar worker`: log the start, serve HTTP, wait for the
//! database and the clock, register in the fleet, run until a signal.

use std::{process::ExitCode, sync::Arc};

use anyhow::Context as _;
use radar::{
    config::{KeySource, MqttCredentials, Settings},
    snapshot::CheckpointKey,
    store::{self, CheckpointStore, GraphStore},
    telemetry::Telemetry,
};

use super::supervisor::MONITORS_NOT_LISTED;
use super::{
    CLOCK_CHECK_EVERY, MonitorSource, Scope, WorkerArgs, WorkerSetup, backoff_from_env,
    clock_agrees, limits, shutdown_signal, start, wait_for_database, watch_clock,
    worker_heartbeats,
};

pub(super) async fn serve(args: WorkerArgs, settings: Settings) -> anyhow::Result<ExitCode> {
    let worker_id = settings.worker_id();
    let (secret, source) = settings.checkpoint_key()?;
    let key = Arc::new(CheckpointKey::new(secret.expose().to_vec()));
    // Every monitor's client uses this login: refuse a bad one before any starts.
    let mqtt_login = settings
        .mqtt_credentials()
        .context("reading the MQTT credentials")?;
    log_start(&settings, &worker_id, &source, &key, mqtt_login.as_ref());
    // Before any monitor opens its connection.
    limits::raise_and_log();
    limits::widen_futex_hash_and_log();
    let (meter_provider, registry) = crate::http::init_meter_provider(&worker_id)?;
    let telemetry = Telemetry::global();
    // Not ready until the monitors of this worker are known: a worker that
    // answered ready with none admitted yet would let an orchestrator stop
    // the task it replaces before this one runs anything.
    telemetry.board().hold(
        MONITORS_NOT_LISTED,
        "the worker has not listed its monitors in PostgreSQL yet",
    );
    let server_handle = serve_http(&settings, registry, &telemetry)?;
    let Some(pool) = wait_until_ready(&settings, telemetry.board(), &server_handle).await? else {
        return Ok(ExitCode::SUCCESS);
    };
    actix_rt::spawn(watch_clock(pool.clone(), telemetry.board().clone()));
    let registry = register_in_fleet(&pool, &worker_id).await;
    let registry_pool = pool.clone();
    let registry_id = worker_id.clone();
    let store = checkpoint_store(&settings, &pool, &worker_id);
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
    registry.abort();
    if let Err(e) = store::fleet::worker_stopped(&registry_pool, &registry_id).await {
        tracing::warn!(error = %e, "Could not record this worker as stopped in radar_workers; it counts as live until its heartbeat ages out.");
    }
    server_handle.stop(true).await;
    if let Err(e) = meter_provider.shutdown() {
        tracing::warn!(error = %e, "Could not flush metrics at shutdown.");
    }
    Ok(outcome.exit_code())
}

/// Logs what the worker starts with (never a secret: only where each came
/// from).
fn log_start(
    settings: &Settings,
    worker_id: &str,
    source: &KeySource,
    key: &CheckpointKey,
    mqtt_login: Option<&MqttCredentials>,
) {
    tracing::info!(
        worker_id = %worker_id,
        env = ?settings.env,
        key_source = %source,
        database = %settings.database_url,
        database_url_file = ?settings.database_url_file,
        mqtt_username = ?mqtt_login.map(|l| l.username.as_str()),
        mqtt_password_source = ?mqtt_login.and_then(|l| l.password_source.as_deref()),
        key_id = %key.key_id(),
        shard = %settings.shard,
        db_writes = settings.db_write_enabled,
        "Starting the radar worker."
    );
}

/// Starts serving /metrics, /healthz and /readyz; returns the handle that
/// stops the server.
fn serve_http(
    settings: &Settings,
    registry: prometheus::Registry,
    telemetry: &Telemetry,
) -> anyhow::Result<actix_web::dev::ServerHandle> {
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
    Ok(server_handle)
}

/// Waits for PostgreSQL, then for this worker's clock to agree with it.
/// `None` when a stop signal came first: the HTTP server is stopped and
/// nothing was started.
async fn wait_until_ready(
    settings: &Settings,
    board: &radar::telemetry::Board,
    server_handle: &actix_web::dev::ServerHandle,
) -> anyhow::Result<Option<store::Pool>> {
    let pool = {
        let stop = shutdown_signal();
        tokio::pin!(stop);
        tokio::select! {
            pool = wait_for_database(settings, board) => pool?,
            signal = &mut stop => {
                tracing::info!(signal, "Stopped while waiting for PostgreSQL; nothing was started.");
                server_handle.stop(true).await;
                return Ok(None);
            }
        }
    };
    // A worker whose clock is off would judge every source time wrongly and
    // stamp its snapshots with wrong save times: it starts no monitor until
    // the clocks agree.
    let stop = shutdown_signal();
    tokio::pin!(stop);
    while !clock_agrees(&pool, board).await {
        tokio::select! {
            _ = tokio::time::sleep(CLOCK_CHECK_EVERY) => {}
            signal = &mut stop => {
                tracing::info!(signal, "Stopped while the clock disagreed with PostgreSQL's; nothing was started.");
                server_handle.stop(true).await;
                return Ok(None);
            }
        }
    }
    Ok(Some(pool))
}

/// Registers this worker (with what this binary supports) in
/// `radar_workers` and keeps its row fresh; returns the heartbeat task.
/// Done before any monitor starts, so that graph authoring can only be
/// enabled for a fleet that runs graphs. Written also with database writes
/// disabled: it is the fleet's record of live workers, not monitor state.
async fn register_in_fleet(pool: &store::Pool, worker_id: &str) -> actix_rt::task::JoinHandle<()> {
    let advert = store::fleet::WorkerAdvert::this_binary(worker_id.to_owned());
    if let Err(e) = store::fleet::worker_heartbeat(pool, &advert).await {
        tracing::warn!(error = %e, "Could not register this worker in radar_workers; retrying with the heartbeat.");
    }
    actix_rt::spawn(worker_heartbeats(pool.clone(), advert))
}

/// The monitors' snapshot store, or `None` when database writes are
/// disabled (said once, as a warning).
fn checkpoint_store(
    settings: &Settings,
    pool: &store::Pool,
    worker_id: &str,
) -> Option<CheckpointStore> {
    let store = settings
        .db_write_enabled
        .then(|| CheckpointStore::new(pool.clone(), worker_id.to_owned()));
    if store.is_none() {
        tracing::warn!(
            "RADAR_DB_WRITE_ENABLED=false: no snapshot is read or written; every monitor starts fresh."
        );
    }
    store
}
