//! `radar demo`: the real worker runtime against an embedded MQTT broker and
//! a simulated plant, in one process.
//!
//! - this file: the flags and the run (broker, storage, worker, publisher,
//!   display, graceful stop, summary).
//! - `storage`: the demo database, or in-memory monitors without one.
//! - `report`: per-monitor tracking of views and alarms; the summary.
//! - `display`: progress bars and live table, or plain lines when piped.
//!
//! The worker is the one `radar worker` runs ([`crate::worker::start`]):
//! the same supervisor, monitor actors, checkpoints and recovery. The demo
//! only adds an [`Observer`] to read what the actors publish.

mod args;
mod display;
mod live;
mod report;
mod storage;

use std::{
    collections::HashSet,
    io::Write as _,
    process::ExitCode,
    sync::Arc,
    sync::atomic::{AtomicU64, Ordering},
    time::{Duration, Instant},
};

use anyhow::Context as _;
use chrono::Utc;
use radar::{
    config::Settings,
    demo::{
        CALIBRATION_FRAMES, EmbeddedBroker, Plant, PlantConfig, PublishOptions, PublishReport,
        READINGS, TRAINING_FRAMES, detector_settings, monitor_configs, publish_plant,
        start_embedded_broker,
    },
    snapshot::CheckpointKey,
    telemetry::{Board, MonitorState, Telemetry},
};
use tokio::sync::{oneshot, watch};
use uuid::Uuid;

pub use self::args::DemoArgs;
use self::{
    display::{Console, Display},
    live::Live,
    report::{MonitorSummary, Start, Summary, Tracked},
    storage::{Mode, Storage},
};
use crate::monitor::ModelView;
use crate::worker::{
    Observer, RunningWorker, Scope, WorkerOutcome, WorkerSetup, backoff_from_env, shutdown_signal,
    start,
};

/// Topic prefix of the plant: part of each monitor's definition, so it
/// never changes between runs (runs restore each other's snapshots).
pub const TOPIC_PREFIX: &str = "radar-demo";
/// How long the monitors may take to subscribe before the plant starts.
const SUBSCRIBE_DEADLINE: Duration = Duration::from_secs(30);
/// How long the worker may take to drain what was published before it stops.
const DRAIN_DEADLINE: Duration = Duration::from_secs(5);
/// How long the publisher may take to stop and flush.
const PUBLISHER_DEADLINE: Duration = Duration::from_secs(15);
/// How often the display refreshes.
const REFRESH: Duration = Duration::from_millis(200);
/// Runs the demo until `--duration` ends or SIGINT/SIGTERM.
pub fn run(args: DemoArgs, mut settings: Settings) -> anyhow::Result<ExitCode> {
    args.check()?;
    let plant = Plant::new(PlantConfig {
        seed: args.seed,
        machines: usize::from(args.monitors),
        topic_prefix: TOPIC_PREFIX.to_string(),
        ..PlantConfig::default()
    })?;
    let (_, broker) = start_embedded_broker()?;
    settings.mqtt_url = broker.url();
    let system = actix_rt::System::new();
    system.block_on(demo(args, settings, plant, broker))
}

/// Why the main loop ended.
enum Ended {
    /// The plant stopped by itself: `--duration` reached, or it failed.
    Published(Result<PublishReport, String>),
    Signal(&'static str),
    Worker(WorkerOutcome),
    /// No monitor could start, so the plant never ran.
    NothingRunning,
}

type ReportReceiver = oneshot::Receiver<Result<PublishReport, String>>;

async fn demo(
    args: DemoArgs,
    settings: Settings,
    plant: Plant,
    broker: EmbeddedBroker,
) -> anyhow::Result<ExitCode> {
    let console = Console::new(args.json);
    let configs = monitor_configs(&plant)?;
    let worker_id = settings.worker_id();
    let storage = storage::prepare(
        &settings,
        &args.demo_database,
        args.fresh,
        &configs,
        &worker_id,
    )
    .await?;
    announce(&console, &args, &broker, &storage);
    let observer = Observer::new();
    let notices = observer.subscribe();
    // The worker's telemetry: the board it publishes on is the one read here.
    let telemetry = Telemetry::global();
    let board = telemetry.board().clone();
    let (mut worker, mut tracked) =
        start_worker(settings, worker_id, telemetry, &storage, &observer)?;

    // The plant starts once every monitor subscribed (or could not start),
    // so training begins with the first tick.
    let (early, running) =
        until_subscribed(&console, &board, &observer, &mut tracked, &mut worker).await;
    let mut live = Live::new(console, tracked, board, notices, worker);
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut report_rx: Option<ReportReceiver> = None;
    let ended = match early {
        Some(ended) => ended,
        None if !running => Ended::NothingRunning,
        None => {
            let (taken_tx, taken_rx) = watch::channel(0);
            count_ticks_taken_in(&live.tracked, taken_tx);
            let rx = report_rx.insert(spawn_publisher(
                &plant,
                &args,
                broker.port(),
                stop_rx,
                taken_rx,
            )?);
            live.main_loop(rx, args.speed).await
        }
    };
    say_why_it_ended(&live.display, &ended);
    let (report, outcome, stop_requested_at) = live.wind_down(ended, &stop_tx, report_rx).await;
    let Live {
        mut tracked,
        board,
        published_at,
        ..
    } = live;
    let ran = Ran {
        args: &args,
        storage: &storage,
        board: &board,
        report: report.as_ref(),
        published_at,
        stop_requested_at,
        outcome: &outcome,
    };
    let summary = ran.summarize(&mut tracked);
    print_summary(console, &summary);
    if args.json {
        let json = serde_json::to_string_pretty(&summary).context("encoding the JSON summary")?;
        writeln!(std::io::stdout(), "{json}").context("writing the JSON summary to stdout")?;
    }
    Ok(exit_code(&summary, outcome, report.is_some()))
}

/// Waits until every monitor subscribed or could not start, and prints what
/// each starts from. Returns how the run ended if it already did, and
/// whether any monitor runs.
async fn until_subscribed(
    console: &Console,
    board: &Board,
    observer: &Observer,
    tracked: &mut [Tracked],
    worker: &mut RunningWorker,
) -> (Option<Ended>, bool) {
    let early = wait_until_subscribed(board, tracked, worker).await;
    for t in tracked.iter_mut() {
        if let Some(watch) = observer.monitors().into_iter().find(|w| w.id == t.id) {
            t.baseline = watch.model.borrow().processed;
            t.watch = Some(watch);
        }
        console.line(&start_line(t, board));
    }
    let running = tracked.iter().any(|t| {
        board
            .view(t.id, Utc::now())
            .is_some_and(|v| v.state == MonitorState::Connected)
    });
    (early, running)
}

/// The first lines: what runs, how fast, for how long, and on what storage.
fn announce(console: &Console, args: &DemoArgs, broker: &EmbeddedBroker, storage: &Storage) {
    console.line(&format!(
        "radar demo: {} simulated pump(s), one monitor each, at {}x ({}); embedded MQTT broker on {}.",
        args.monitors,
        args.speed,
        match args.duration {
            Some(d) => format!("for {:.0} s", d.as_secs_f64()),
            None => "until Ctrl-C".to_string(),
        },
        broker.url()
    ));
    console.line(&storage.mode_line());
    for note in &storage.notes {
        console.line(note);
    }
}

/// Starts the worker `radar worker` runs on the demo's monitors, with
/// `observer` reading what the actors publish; one tracker per monitor.
fn start_worker(
    settings: Settings,
    worker_id: String,
    telemetry: Telemetry,
    storage: &Storage,
    observer: &Observer,
) -> anyhow::Result<(RunningWorker, Vec<Tracked>)> {
    let (secret, _) = settings
        .checkpoint_key()
        .context("reading the checkpoint key")?;
    let key = Arc::new(CheckpointKey::new(secret.expose().to_vec()));
    let window = detector_settings().alarm.open_n;
    let tracked: Vec<Tracked> = storage
        .monitors
        .iter()
        .enumerate()
        .map(|(machine, (row, _))| Tracked::new(row.id, row.name.clone(), machine, window))
        .collect();
    let ids: HashSet<Uuid> = tracked.iter().map(|t| t.id).collect();
    let worker = start(
        WorkerSetup {
            settings,
            worker_id,
            key,
            store: storage.store.clone(),
            monitors: storage.source.clone(),
            // The demo's monitors are plain monitors, never graph runs.
            graphs: None,
            backoff: backoff_from_env(),
            telemetry,
            observer: Some(observer.clone()),
        },
        Scope::Monitors(Arc::new(ids)),
    );
    Ok((worker, tracked))
}

/// One line on why the run stopped before the plant finished, if it did.
fn say_why_it_ended(display: &Display, ended: &Ended) {
    match ended {
        Ended::Signal(signal) => display.line(&format!(
            "{signal}: stopping gracefully (plant first, then each monitor's last snapshot)."
        )),
        Ended::Published(Err(error)) => display.line(&format!("The plant stopped: {error}")),
        Ended::NothingRunning => display.line("No monitor could start; see the reasons above."),
        Ended::Worker(outcome) => display.line(&format!("The worker ended early: {outcome:?}.")),
        Ended::Published(Ok(_)) => {}
    }
}

/// What a finished run leaves for its summary.
struct Ran<'a> {
    args: &'a DemoArgs,
    storage: &'a Storage,
    board: &'a Board,
    report: Option<&'a PublishReport>,
    published_at: Instant,
    stop_requested_at: chrono::DateTime<Utc>,
    outcome: &'a WorkerOutcome,
}

impl Ran<'_> {
    fn summarize(&self, tracked: &mut [Tracked]) -> Summary {
        let mode = &self.storage.mode;
        Summary {
            database_mode: match mode {
                Mode::Postgres { .. } => "postgres",
                Mode::Disabled { .. } => "disabled",
            },
            database: match mode {
                Mode::Postgres { database, .. } => Some(database.clone()),
                Mode::Disabled { .. } => None,
            },
            database_disabled_reason: match mode {
                Mode::Disabled { reason } => Some(reason.clone()),
                Mode::Postgres { .. } => None,
            },
            seed: self.args.seed,
            speed: self.args.speed,
            wall_seconds: self.published_at.elapsed().as_secs_f64(),
            simulated_seconds: self.report.map_or(0, |r| r.ticks),
            monitors: tracked
                .iter_mut()
                .map(|t| t.summarize(self.board, self.report, self.stop_requested_at))
                .collect(),
            outcome: match self.outcome {
                WorkerOutcome::Stopped => "stopped".to_string(),
                other => format!("{other:?}"),
            },
        }
    }
}

/// Success only when the worker stopped cleanly after every monitor started
/// and the plant published to the end.
fn exit_code(summary: &Summary, outcome: WorkerOutcome, published: bool) -> ExitCode {
    let all_started = summary
        .monitors
        .iter()
        .all(|m| m.start != Start::NotStarted);
    match outcome {
        WorkerOutcome::Stopped if all_started && published => ExitCode::SUCCESS,
        WorkerOutcome::Stopped => ExitCode::FAILURE,
        other => other.exit_code(),
    }
}

/// Asks a running publisher to stop and waits for its report.
async fn stop_publisher(
    stop: &watch::Sender<bool>,
    report_rx: Option<ReportReceiver>,
) -> Option<Result<PublishReport, String>> {
    let report_rx = report_rx?;
    let _ = stop.send(true);
    match tokio::time::timeout(PUBLISHER_DEADLINE, report_rx).await {
        Ok(Ok(result)) => Some(result),
        Ok(Err(_)) => Some(Err(
            "the publisher thread ended without a report".to_string()
        )),
        Err(_) => Some(Err(format!(
            "the publisher did not stop within {} s",
            PUBLISHER_DEADLINE.as_secs()
        ))),
    }
}

/// Waits until every monitor is connected or ended; a stop signal or a
/// worker that ends first cuts the wait short.
async fn wait_until_subscribed(
    board: &Board,
    tracked: &[Tracked],
    worker: &mut RunningWorker,
) -> Option<Ended> {
    let settled = async {
        let deadline = Instant::now() + SUBSCRIBE_DEADLINE;
        let mut poll = tokio::time::interval(Duration::from_millis(50));
        loop {
            poll.tick().await;
            let now = Utc::now();
            let all = tracked.iter().all(|t| {
                board.view(t.id, now).is_some_and(|v| {
                    v.state == MonitorState::Connected
                        || v.state.is_terminal()
                        || v.state == MonitorState::Failed
                })
            });
            if all || Instant::now() >= deadline {
                return;
            }
        }
    };
    tokio::select! {
        () = settled => None,
        signal = shutdown_signal() => Some(Ended::Signal(signal)),
        outcome = worker.ended() => Some(Ended::Worker(outcome)),
    }
}

/// What a monitor starts from, in one line.
fn start_line(t: &Tracked, board: &Board) -> String {
    let view = board.view(t.id, Utc::now());
    let Some(watch) = &t.watch else {
        let why = view
            .map(|v| format!("{}: {}", v.state, v.detail))
            .unwrap_or_else(|| "not admitted".to_string());
        return format!(
            "{} did not start ({why}). If its snapshot is incompatible, run again with --fresh.",
            t.name
        );
    };
    let model = watch.model.borrow();
    match model.recovery.restored_processed_count {
        Some(processed) => {
            let saved = model
                .coverage
                .last_restore()
                .map(|m| {
                    format!(
                        ", saved {:.1} s ago",
                        (Utc::now() - m.saved_at).num_milliseconds() as f64 / 1e3
                    )
                })
                .unwrap_or_default();
            format!(
                "{} restored from its snapshot: {} frames processed before, phase {}{saved}.",
                t.name,
                processed,
                model.phase.as_str()
            )
        }
        None => format!(
            "{} starts fresh: {TRAINING_FRAMES} training frames, then {CALIBRATION_FRAMES} calibration frames.",
            t.name
        ),
    }
}

/// Plays the plant on its own thread (its own timer, unaffected by the
/// worker's load); the report arrives when it stops.
fn spawn_publisher(
    plant: &Plant,
    args: &DemoArgs,
    port: u16,
    stop: watch::Receiver<bool>,
    taken_in: watch::Receiver<u64>,
) -> anyhow::Result<ReportReceiver> {
    let (report_tx, report_rx) = oneshot::channel();
    let mut plant = plant.clone();
    let options = PublishOptions {
        host: "127.0.0.1".to_string(),
        port,
        client_id: format!("radar-demo-plant-{}", std::process::id()),
        speed: args.speed,
        max_ticks: args.max_ticks(),
        taken_in: Some(taken_in),
    };
    std::thread::Builder::new()
        .name("demo-plant".to_string())
        .spawn(move || {
            let result = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| format!("cannot start the publisher's runtime: {e}"))
                .and_then(|runtime| {
                    runtime
                        .block_on(publish_plant(&mut plant, &options, stop))
                        .map_err(|e| e.to_string())
                });
            let _ = report_tx.send(result);
        })
        .context("starting the plant thread")?;
    Ok(report_rx)
}

/// Keeps `taken` at the number of ticks every running monitor has taken
/// from its queue since now, for the publisher's gate. A monitor whose model
/// stops (its view's sender is gone) no longer holds the plant back.
fn count_ticks_taken_in(tracked: &[Tracked], taken: watch::Sender<u64>) {
    let models: Vec<watch::Receiver<ModelView>> = tracked
        .iter()
        .filter_map(|t| t.watch.as_ref().map(|w| w.model.clone()))
        .collect();
    let slots: Arc<[AtomicU64]> = models.iter().map(|_| AtomicU64::new(0)).collect();
    let taken = Arc::new(taken);
    let per_tick = READINGS.len() as u64;
    for (i, mut model) in models.into_iter().enumerate() {
        let base = model.borrow().consumed;
        let slots = slots.clone();
        let taken = taken.clone();
        actix_rt::spawn(async move {
            let publish = |ticks: u64| {
                slots[i].store(ticks, Ordering::Relaxed);
                let all = slots
                    .iter()
                    .map(|s| s.load(Ordering::Relaxed))
                    .min()
                    .unwrap_or(u64::MAX);
                taken.send_if_modified(|v| std::mem::replace(v, all) != all);
            };
            loop {
                let consumed = model.borrow_and_update().consumed;
                publish(consumed.saturating_sub(base) / per_tick);
                if model.changed().await.is_err() {
                    publish(u64::MAX);
                    return;
                }
            }
        });
    }
}

fn print_summary(console: Console, summary: &Summary) {
    let database = match (&summary.database, &summary.database_disabled_reason) {
        (Some(db), _) => format!("PostgreSQL database {db}"),
        (None, _) => "database writes disabled".to_string(),
    };
    console.line("");
    console.line(&format!(
        "Summary: {:.1} s wall, {} simulated seconds at {}x, {database}; worker {}.",
        summary.wall_seconds, summary.simulated_seconds, summary.speed, summary.outcome
    ));
    console.line(
        "monitor      fault                start      frames  alarms  faults caught  restore gap  last snapshot",
    );
    for m in &summary.monitors {
        console.line(&summary_row(m));
    }
    for m in &summary.monitors {
        if let Some(error) = &m.error {
            console.line(&format!("{}: {error}", m.name));
        }
        if let (Start::Restored, Some(processed)) = (m.start, m.restored_processed) {
            let gap = m
                .possible_gap_seconds
                .map_or("not measured (no new frame)".to_string(), |s| {
                    format!("{s:.1} s")
                });
            console.line(&format!(
                "{} restored {processed} processed frames from its snapshot; possible coverage gap {gap} \
                 (restart_rollback: input between the last snapshot and the first new frame was not seen; the live stream is not replayed).",
                m.name
            ));
        }
    }
}

fn summary_row(m: &MonitorSummary) -> String {
    let fault = match m.fault {
        Some(kind) => format!("{} ({})", kind.as_str(), READINGS[kind.reading()].name),
        None => "none".to_string(),
    };
    let caught = if m.faults.is_empty() {
        if m.fault.is_some() {
            "not yet".to_string()
        } else {
            "-".to_string()
        }
    } else {
        format!(
            "{} of {}",
            m.faults.iter().filter(|f| f.detected).count(),
            m.faults.len()
        )
    };
    let start = match m.start {
        Start::Fresh => "fresh",
        Start::Restored => "restored",
        Start::NotStarted => "not started",
    };
    let gap = m
        .possible_gap_seconds
        .map_or("-".to_string(), |s| format!("{s:.1} s"));
    let snapshot = match m.final_checkpoint {
        Some(true) => "committed at stop",
        Some(false) => "NOT committed at stop",
        None => "off (no database)",
    };
    format!(
        "{:<12} {:<20} {:<10} {:>6}  {:>6}  {:<13}  {:<11}  {snapshot}",
        m.name, fault, start, m.frames, m.alarms, caught, gap
    )
}
