//! Before the plant runs: the first lines, the worker started on the demo's
//! monitors, and the wait until each subscribed (or could not start), with
//! one line on what each starts from.

use std::{
    collections::HashSet,
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::Context as _;
use chrono::Utc;
use radar::{
    config::Settings,
    snapshot::CheckpointKey,
    telemetry::{Board, MonitorState, Telemetry},
};
use radar_demo::{CALIBRATION_FRAMES, EmbeddedBroker, TRAINING_FRAMES, detector_settings};
use uuid::Uuid;

use super::{DemoArgs, Ended, display::Console, report::Tracked, storage::Storage};
use crate::worker::{
    Observer, RunningWorker, Scope, WorkerSetup, backoff_from_env, shutdown_signal, start,
};

/// How long the monitors may take to subscribe before the plant starts.
const SUBSCRIBE_DEADLINE: Duration = Duration::from_secs(30);

/// Waits until every monitor subscribed or could not start, and prints what
/// each starts from. Returns how the run ended if it already did, and
/// whether any monitor runs.
pub(super) async fn until_subscribed(
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
pub(super) fn announce(
    console: &Console,
    args: &DemoArgs,
    broker: &EmbeddedBroker,
    storage: &Storage,
) {
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
pub(super) fn start_worker(
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
