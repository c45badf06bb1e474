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

mod display;
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
        CALIBRATION_FRAMES, DEFAULT_DEMO_DATABASE, EmbeddedBroker, MAX_SPEED, Plant, PlantConfig,
        PublishOptions, PublishReport, READINGS, TRAINING_FRAMES, check_database_name,
        detector_settings, monitor_configs, publish_plant, start_embedded_broker,
    },
    snapshot::CheckpointKey,
    telemetry::{Board, MonitorState, Telemetry},
};
use tokio::sync::{broadcast, oneshot, watch};
use uuid::Uuid;

use self::{
    display::{Console, Display, Frame, Label},
    report::{MonitorSummary, Start, Summary, Tracked},
    storage::Mode,
};
use crate::monitor::ModelView;
use crate::worker::{
    Notice, Observer, RunningWorker, Scope, WorkerOutcome, WorkerSetup, backoff_from_env,
    shutdown_signal, start,
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
/// Published messages per second above which the demo refuses to start
/// (about what one loopback broker delivers at QoS 1 on a small machine).
const MAX_MESSAGE_RATE: f64 = 20_000.0;

/// Runs the demo plant through a real radar worker.
///
/// Starts an MQTT broker inside the process on a free loopback port, a
/// simulated plant of pumps (pump n gets fault (n-1) mod 4: stuck flow
/// sensor, step in the motor current, slow pressure leak, none) and a
/// worker with one monitor per pump. With PostgreSQL at DATABASE_URL the
/// demo creates and migrates its own database there (see
/// --demo-database), so a second run restores every monitor's snapshot and
/// reports the coverage gap; without it, database writes are disabled.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Stop after this long of plant time in wall-clock terms (e.g. 20,
    /// 90s, 5m), counted from the first published tick; default: until
    /// Ctrl-C.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    duration: Option<Duration>,

    /// How many simulated pumps, one monitor each (1-64). Four or more
    /// include every fault and a fault-free pump.
    #[arg(long, value_name = "N", default_value_t = 4,
          value_parser = clap::value_parser!(u16).range(1..=64))]
    monitors: u16,

    /// Simulated seconds per wall-clock second (above 0, at most 1000).
    /// Training and calibration take 400 simulated seconds; the first
    /// faults begin 50-160 simulated seconds later.
    #[arg(long, value_name = "X", default_value_t = 10.0, value_parser = parse_speed)]
    speed: f64,

    /// Seed of the simulated plant (noise, load, drift).
    #[arg(long, value_name = "N", default_value_t = 2026)]
    seed: u64,

    /// The database the demo creates (if missing) and migrates on the
    /// DATABASE_URL server; the database DATABASE_URL names is not touched.
    #[arg(long, value_name = "NAME", default_value = DEFAULT_DEMO_DATABASE,
          value_parser = parse_database_name)]
    demo_database: String,

    /// Delete the demo's monitors (with their snapshots, alarms and
    /// evidence) first, so every monitor calibrates afresh.
    #[arg(long)]
    fresh: bool,

    /// Print the final summary as JSON on stdout; progress goes to stderr.
    #[arg(long)]
    json: bool,
}

fn parse_speed(text: &str) -> Result<f64, String> {
    let speed: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a number"))?;
    if speed.is_finite() && speed > 0.0 && speed <= MAX_SPEED {
        Ok(speed)
    } else {
        Err(format!("use a value above 0 and at most {MAX_SPEED}"))
    }
}

/// Seconds (`20`, `2.5`) or a number with `s`, `m` or `h`.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let (number, unit) = match text.char_indices().last() {
        Some((i, 's')) => (&text[..i], 1.0),
        Some((i, 'm')) => (&text[..i], 60.0),
        Some((i, 'h')) => (&text[..i], 3600.0),
        _ => (text, 1.0),
    };
    let value: f64 = number
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a duration; use seconds (20) or 90s, 5m, 1h"))?;
    let seconds = value * unit;
    if seconds.is_finite() && seconds > 0.0 && seconds <= 30.0 * 86_400.0 {
        Ok(Duration::from_secs_f64(seconds))
    } else {
        Err("use a duration above 0 and at most 30 days".to_string())
    }
}

fn parse_database_name(text: &str) -> Result<String, String> {
    check_database_name(text)
        .map(|()| text.to_string())
        .map_err(|e| e.to_string())
}

impl DemoArgs {
    fn check(&self) -> anyhow::Result<()> {
        let rate = f64::from(self.monitors) * READINGS.len() as f64 * self.speed;
        if rate > MAX_MESSAGE_RATE {
            anyhow::bail!(
                "--monitors {} at --speed {} publishes {rate:.0} MQTT messages per second; \
                 keep monitors x {} readings x speed at most {MAX_MESSAGE_RATE:.0}",
                self.monitors,
                self.speed,
                READINGS.len()
            );
        }
        if let Some(duration) = self.duration
            && duration.as_secs_f64() * self.speed < 1.0
        {
            anyhow::bail!(
                "--duration {:?} at --speed {} is less than one simulated second",
                duration,
                self.speed
            );
        }
        Ok(())
    }

    /// Plant ticks to publish; `None` until stopped.
    fn max_ticks(&self) -> Option<u64> {
        self.duration
            .map(|d| (d.as_secs_f64() * self.speed).round().max(1.0) as u64)
    }
}

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
    let (secret, _) = settings
        .checkpoint_key()
        .context("reading the checkpoint key")?;
    let key = Arc::new(CheckpointKey::new(secret.expose().to_vec()));
    let observer = Observer::new();
    let mut notices = observer.subscribe();
    let telemetry = Telemetry::global();
    let board = telemetry.board().clone();
    let window = detector_settings().alarm.open_n;
    let mut tracked: Vec<Tracked> = storage
        .monitors
        .iter()
        .enumerate()
        .map(|(machine, (row, _))| Tracked::new(row.id, row.name.clone(), machine, window))
        .collect();
    let ids: HashSet<Uuid> = tracked.iter().map(|t| t.id).collect();
    let mut worker = start(
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

    // The plant starts once every monitor subscribed (or could not start),
    // so training begins with the first tick.
    let early = wait_until_subscribed(&board, &tracked, &mut worker).await;
    for t in &mut tracked {
        if let Some(watch) = observer.monitors().into_iter().find(|w| w.id == t.id) {
            t.baseline = watch.model.borrow().processed;
            t.watch = Some(watch);
        }
        console.line(&start_line(t, &board));
    }
    let running = tracked.iter().any(|t| {
        board
            .view(t.id, Utc::now())
            .is_some_and(|v| v.state == MonitorState::Connected)
    });
    let labels = tracked
        .iter()
        .map(|t| Label {
            name: t.name.clone(),
            fault: t.fault_text(),
        })
        .collect();
    let mut display = Display::new(console, labels, TRAINING_FRAMES, CALIBRATION_FRAMES);

    let published_at = Instant::now();
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut report_rx: Option<ReportReceiver> = None;
    let ended = match early {
        Some(ended) => ended,
        None if !running => Ended::NothingRunning,
        None => {
            let (taken_tx, taken_rx) = watch::channel(0);
            count_ticks_taken_in(&tracked, taken_tx);
            let rx = report_rx.insert(spawn_publisher(
                &plant,
                &args,
                broker.port(),
                stop_rx,
                taken_rx,
            )?);
            main_loop(
                &mut display,
                &mut tracked,
                &board,
                &mut notices,
                &mut worker,
                rx,
                published_at,
                args.speed,
            )
            .await
        }
    };
    match &ended {
        Ended::Signal(signal) => display.line(&format!(
            "{signal}: stopping gracefully (plant first, then each monitor's last snapshot)."
        )),
        Ended::Published(Err(error)) => display.line(&format!("The plant stopped: {error}")),
        Ended::NothingRunning => display.line("No monitor could start; see the reasons above."),
        Ended::Worker(outcome) => display.line(&format!("The worker ended early: {outcome:?}.")),
        Ended::Published(Ok(_)) => {}
    }

    // Stop the plant, let the worker take in what was published, then stop
    // the worker gracefully: each monitor commits its last snapshot.
    let (published, worker_ended) = match ended {
        Ended::Published(result) => (Some(result), None),
        Ended::Worker(outcome) => (stop_publisher(&stop_tx, report_rx).await, Some(outcome)),
        Ended::Signal(_) | Ended::NothingRunning => {
            (stop_publisher(&stop_tx, report_rx).await, None)
        }
    };
    let report = match published {
        Some(Ok(report)) => Some(report),
        Some(Err(e)) => {
            display.line(&format!("The plant publisher failed: {e}"));
            None
        }
        None => None,
    };
    if let Some(report) = &report {
        drain(&mut tracked, report, &mut notices, &display).await;
    }
    let stop_requested_at = Utc::now();
    let outcome = match worker_ended {
        Some(outcome) => outcome,
        None => worker.stop().await,
    };
    take_notices(&mut notices, &mut tracked, &display, published_at, 0.0);
    let now = Utc::now();
    let rows: Vec<_> = tracked.iter().map(|t| t.row(&board, now)).collect();
    display.finish(&Frame {
        now,
        elapsed: published_at.elapsed(),
        simulated: report.as_ref().map_or(0, |r| r.ticks),
        rows: &rows,
    });

    let summary = Summary {
        database_mode: match storage.mode {
            Mode::Postgres { .. } => "postgres",
            Mode::Disabled { .. } => "disabled",
        },
        database: match &storage.mode {
            Mode::Postgres { database, .. } => Some(database.clone()),
            Mode::Disabled { .. } => None,
        },
        database_disabled_reason: match &storage.mode {
            Mode::Disabled { reason } => Some(reason.clone()),
            Mode::Postgres { .. } => None,
        },
        seed: args.seed,
        speed: args.speed,
        wall_seconds: published_at.elapsed().as_secs_f64(),
        simulated_seconds: report.as_ref().map_or(0, |r| r.ticks),
        monitors: tracked
            .iter_mut()
            .map(|t| t.summarize(&board, report.as_ref(), stop_requested_at))
            .collect(),
        outcome: match &outcome {
            WorkerOutcome::Stopped => "stopped".to_string(),
            other => format!("{other:?}"),
        },
    };
    print_summary(console, &summary);
    if args.json {
        let json = serde_json::to_string_pretty(&summary).context("encoding the JSON summary")?;
        writeln!(std::io::stdout(), "{json}").context("writing the JSON summary to stdout")?;
    }
    let all_started = summary
        .monitors
        .iter()
        .all(|m| m.start != Start::NotStarted);
    Ok(match outcome {
        WorkerOutcome::Stopped if all_started && report.is_some() => ExitCode::SUCCESS,
        WorkerOutcome::Stopped => ExitCode::FAILURE,
        other => other.exit_code(),
    })
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

#[allow(clippy::too_many_arguments)]
async fn main_loop(
    display: &mut Display,
    tracked: &mut [Tracked],
    board: &Board,
    notices: &mut broadcast::Receiver<Notice>,
    worker: &mut RunningWorker,
    report_rx: &mut ReportReceiver,
    published_at: Instant,
    speed: f64,
) -> Ended {
    let mut refresh = tokio::time::interval(REFRESH);
    let signal = shutdown_signal();
    tokio::pin!(signal);
    loop {
        tokio::select! {
            _ = refresh.tick() => {
                let now = Utc::now();
                let rows: Vec<_> = tracked.iter().map(|t| t.row(board, now)).collect();
                display.update(&Frame {
                    now,
                    elapsed: published_at.elapsed(),
                    simulated: (published_at.elapsed().as_secs_f64() * speed) as u64,
                    rows: &rows,
                });
            }
            notice = notices.recv() => match notice {
                Ok(notice) => take_notice(&notice, tracked, display, published_at, speed),
                Err(broadcast::error::RecvError::Lagged(missed)) => {
                    display.line(&format!("(the display fell behind and missed {missed} notices)"));
                }
                Err(broadcast::error::RecvError::Closed) => {}
            },
            report = &mut *report_rx => {
                return Ended::Published(report.unwrap_or_else(|_| {
                    Err("the publisher thread ended without a report".to_string())
                }));
            }
            signal = &mut signal => return Ended::Signal(signal),
            outcome = worker.ended() => return Ended::Worker(outcome),
        }
    }
}

/// Waits (briefly) until every running monitor has taken in every message
/// the plant published, so the summary covers the whole run.
async fn drain(
    tracked: &mut [Tracked],
    report: &PublishReport,
    notices: &mut broadcast::Receiver<Notice>,
    display: &Display,
) {
    let per_monitor = report.ticks * READINGS.len() as u64;
    let deadline = Instant::now() + DRAIN_DEADLINE;
    let mut poll = tokio::time::interval(Duration::from_millis(50));
    loop {
        poll.tick().await;
        let done = tracked.iter().all(|t| {
            t.watch
                .as_ref()
                .is_none_or(|w| w.model.borrow().consumed >= per_monitor)
        });
        take_notices(notices, tracked, display, Instant::now(), 0.0);
        if done || Instant::now() >= deadline {
            return;
        }
    }
}

fn take_notices(
    notices: &mut broadcast::Receiver<Notice>,
    tracked: &mut [Tracked],
    display: &Display,
    published_at: Instant,
    speed: f64,
) {
    loop {
        match notices.try_recv() {
            Ok(notice) => take_notice(&notice, tracked, display, published_at, speed),
            Err(broadcast::error::TryRecvError::Lagged(_)) => continue,
            Err(_) => return,
        }
    }
}

fn take_notice(
    notice: &Notice,
    tracked: &mut [Tracked],
    display: &Display,
    published_at: Instant,
    speed: f64,
) {
    let id = match notice {
        Notice::Flagged { monitor_id, .. }
        | Notice::AlarmOpened { monitor_id, .. }
        | Notice::AlarmClosed { monitor_id, .. } => *monitor_id,
    };
    let Some(t) = tracked.iter_mut().find(|t| t.id == id) else {
        return;
    };
    let name = t.name.clone();
    let fault = t.fault_text();
    let simulated = if speed > 0.0 {
        format!(
            " (simulated {:.0} s)",
            published_at.elapsed().as_secs_f64() * speed
        )
    } else {
        String::new()
    };
    if let Some(alarm) = t.take(notice) {
        display.line(&format!(
            "ALARM {name} [fault: {fault}] #{} opened at {}{simulated}, peak score {:.1}; top readings: {}",
            alarm.seq,
            alarm.opened_at.format("%H:%M:%S%.3f"),
            alarm.peak_score,
            alarm.readings_text()
        ));
    } else if let Notice::AlarmClosed {
        seq, peak_score, ..
    } = notice
    {
        display.line(&format!(
            "{name}: alarm #{seq} closed{simulated}, peak score {peak_score:.1}"
        ));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_seconds_or_a_unit_and_refuse_nonsense() {
        assert_eq!(parse_duration("20"), Ok(Duration::from_secs(20)));
        assert_eq!(parse_duration("2.5"), Ok(Duration::from_millis(2500)));
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        for bad in ["", "0", "-3", "abc", "5d", "nan", "1e12"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn speeds_above_zero_up_to_the_publisher_limit_are_accepted() {
        assert_eq!(parse_speed("50"), Ok(50.0));
        assert_eq!(parse_speed("0.5"), Ok(0.5));
        assert_eq!(parse_speed("1000"), Ok(1000.0));
        for bad in ["0", "-1", "1000.5", "inf", "fast"] {
            assert!(parse_speed(bad).is_err(), "{bad}");
        }
    }
}
