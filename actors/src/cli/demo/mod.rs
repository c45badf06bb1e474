//! `radar demo`: the real worker runtime against an embedded MQTT broker and
//! a simulated plant, in one process.
//!
//! - this file: the run (broker, storage, worker, publisher, display,
//!   graceful stop, summary) in order.
//! - `args`: the flags.
//! - `storage`: the demo database, or in-memory monitors without one.
//! - `start`: the worker started on the demo's monitors; the wait until
//!   each subscribed, and what each starts from.
//! - `publisher`: the plant on its own thread, gated and stopped.
//! - `live`: the run while the plant publishes; the wind-down.
//! - `report`: per-monitor tracking of views and alarms; the summary.
//! - `finish`: why the run ended, the summary printed, the exit code.
//! - `display`: progress bars and live table, or plain lines when piped.
//!
//! The worker is the one `radar worker` runs ([`crate::worker::start`]):
//! the same supervisor, monitor actors, checkpoints and recovery. The demo
//! only adds an [`Observer`] to read what the actors publish.

mod args;
mod display;
mod finish;
mod live;
mod publisher;
mod report;
mod start;
mod storage;

use std::{io::Write as _, process::ExitCode, time::Duration};

use anyhow::Context as _;
use radar::{config::Settings, telemetry::Telemetry};
use radar_demo::{
    EmbeddedBroker, Plant, PlantConfig, PublishReport, monitor_configs, start_embedded_broker,
};
use tokio::sync::watch;

pub use self::args::DemoArgs;
use self::{
    display::Console,
    finish::{Ran, exit_code, print_summary, say_why_it_ended},
    live::Live,
    publisher::{ReportReceiver, count_ticks_taken_in, spawn_publisher, stop_publisher},
    start::{announce, start_worker, until_subscribed},
};
use crate::worker::{Observer, WorkerOutcome};

/// Topic prefix of the plant: part of each monitor's definition, so it
/// never changes between runs (runs restore each other's snapshots).
pub const TOPIC_PREFIX: &str = "radar-demo";
/// How long the worker may take to drain what was published before it stops.
const DRAIN_DEADLINE: Duration = Duration::from_secs(5);
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
