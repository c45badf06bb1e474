//! End-to-end ingest: K monitors, a stream of complete frames published as
//! fast as the broker takes them, consumed once by a real `radar worker`
//! (payload parsing, alignment, scoring, evidence, checkpoints) and once by
//! bare rumqttc subscribers that only count (the ceiling). Both consume the
//! same topics from the same private Mosquitto, one after the other, with
//! the order swapped every repetition, so the ratio compares like with like
//! under the same background load.
//!
//! The worker is stopped (SIGTERM, last snapshots committed) while the bare
//! subscribers run, so its idle work does not slow the ceiling, and started
//! again (restoring every snapshot) for its next run.
//!
//! # Layout
//! - `report`: the scenario's settings and what it measured.
//! - `product`: the radar worker's side: warmup, measured run, and its
//!   end read from scrapes or from the worker's CPU use.
//! - `bare`: the bare-rumqttc ceiling's measured run.
//! - `publish`: the publishing side: live or as a backlog to a paused
//!   consumer.
//! - `sample`: reading a consumer's count until the run completes.

mod bare;
mod product;
mod publish;
mod report;
mod sample;

use std::{path::PathBuf, time::Duration};

use anyhow::{Context, Result};
use rumqttc::QoS;

use crate::{
    broker::Mosquitto,
    db::BenchDb,
    mqtt::Publisher,
    stats,
    worker::{WorkerEnv, WorkerProcess},
    workload,
};

use self::{
    bare::bare_runs,
    product::{product_runs, warm_up},
};
pub use self::{
    product::QUIESCENCE_ABOVE,
    report::{Consumer, IngestParams, IngestReport, RunResult},
    sample::completion,
};

/// Mosquitto's per-client queue: large enough that a slow consumer makes
/// the broker queue, never drop (its default of 1000 drops silently).
const BROKER_QUEUE: u32 = 50_000_000;
/// Frames each monitor gets before the first measured run: training,
/// calibration and a few scored frames, so measured frames are scored.
const WARMUP_FRAMES: usize = workload::TRAINING_FRAMES + workload::CALIBRATION_FRAMES + 5;
/// Frames after a restart, to close the restart gap (a coverage change and
/// its checkpoint) before measuring.
const REWARM_FRAMES: usize = 2;

/// Where the harness finds what it drives.
#[derive(Debug, Clone)]
pub struct Env {
    pub radar_bin: PathBuf,
    /// This binary, started again as `radar-bench bare-subscribe`.
    pub bench_bin: PathBuf,
    /// PostgreSQL server URL without a database name.
    pub db_server: String,
    /// Worker logs go here.
    pub log_dir: PathBuf,
}

/// Runs the scenario for one K. Returns the database (with every
/// monitor's snapshot) so later scenarios can restore from it.
pub async fn run(env: &Env, p: &IngestParams) -> Result<(IngestReport, BenchDb)> {
    let db = BenchDb::create(&env.db_server, &format!("ingest{}", p.monitors)).await?;
    let monitors = db.create_monitors(p.monitors, p.readings).await?;
    let broker = Mosquitto::start(BROKER_QUEUE)
        .await
        .context("starting a private mosquitto")?;
    let mut publisher = Publisher::connect(broker.port, p.qos).await?;
    let mut report = IngestReport {
        params: p.clone(),
        runs: Vec::new(),
        startups: Vec::new(),
        settled_rss_kib: Vec::new(),
        scrape: None,
        interval: p.poll,
    };
    let worker_env = WorkerEnv {
        radar_bin: &env.radar_bin,
        database_url: &db.url,
        mqtt_url: &broker.url(),
        log_dir: &env.log_dir,
        tag: &format!("ingest{}", p.monitors),
    };
    let mut warmed = false;
    for rep in 0..p.reps {
        for consumer in order(rep) {
            let results = match consumer {
                Consumer::Product => {
                    let results = product_runs(
                        &worker_env,
                        &mut publisher,
                        &monitors,
                        p,
                        rep,
                        warmed,
                        &mut report,
                    )
                    .await?;
                    warmed = true;
                    results
                }
                Consumer::Bare => {
                    let interval = report.interval;
                    bare_runs(env, &broker, &mut publisher, &monitors, p, rep, interval).await?
                }
            };
            for result in results {
                print_progress(p, &result);
                report.runs.push(result);
            }
        }
    }
    if publisher.errors() > 0 {
        eprintln!("the publisher saw {} connection errors", publisher.errors());
    }
    Ok((report, db))
}

/// The consumers in the order repetition `rep` runs them: swapped every repetition.
fn order(rep: usize) -> [Consumer; 2] {
    if rep.is_multiple_of(2) {
        [Consumer::Product, Consumer::Bare]
    } else {
        [Consumer::Bare, Consumer::Product]
    }
}

/// Prints one measured run's progress line to stderr.
fn print_progress(p: &IngestParams, result: &RunResult) {
    eprintln!(
        "  K={} rep {} {:<13} {:<7} {:>9} obs/s {:>9} frames/s in {:.2} s (publish {:.2} s){} load {:.2}",
        p.monitors,
        result.rep + 1,
        result.consumer.label(),
        if result.backlog { "backlog" } else { "live" },
        stats::rate(result.observations_per_s()),
        stats::rate(result.frames_per_s()),
        result.elapsed.as_secs_f64(),
        result.publish_elapsed.as_secs_f64(),
        if result.complete { "" } else { " INCOMPLETE" },
        result.load_1m,
    );
}

/// A generous bound on one run: at least a minute, or 2,000 messages/s.
fn deadline_for(p: &IngestParams) -> Duration {
    Duration::from_secs((p.run_messages() / 2000).max(60))
}

/// A database of `monitors` monitors that all have snapshots past their fit,
/// made by one worker that warmed every monitor up and stopped gracefully.
pub async fn prepare_snapshots(env: &Env, monitors: usize, readings: usize) -> Result<BenchDb> {
    let db = BenchDb::create(&env.db_server, &format!("recovery{monitors}")).await?;
    let list = db.create_monitors(monitors, readings).await?;
    let broker = Mosquitto::start(BROKER_QUEUE)
        .await
        .context("starting a private mosquitto")?;
    let mut publisher = Publisher::connect(broker.port, QoS::AtLeastOnce).await?;
    let mut worker = WorkerProcess::spawn(&WorkerEnv {
        radar_bin: &env.radar_bin,
        database_url: &db.url,
        mqtt_url: &broker.url(),
        log_dir: &env.log_dir,
        tag: "prepare",
    })?;
    worker
        .wait_ready(monitors, Duration::from_secs(300))
        .await?;
    let p = IngestParams {
        monitors,
        readings,
        messages: 0,
        reps: 0,
        poll: Duration::from_millis(100),
        qos: QoS::AtLeastOnce,
    };
    warm_up(&worker, &mut publisher, &list, &p, WARMUP_FRAMES).await?;
    worker.stop(Duration::from_secs(120)).await?;
    Ok(db)
}
