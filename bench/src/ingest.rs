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

use std::{
    path::PathBuf,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};
use rumqttc::QoS;

use crate::{
    broker::Mosquitto,
    db::{BenchDb, Monitor},
    mqtt::{BareProcess, Publisher},
    stats, system,
    worker::{WorkerEnv, WorkerProcess},
    workload,
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

#[derive(Debug, Clone)]
pub struct IngestParams {
    pub monitors: usize,
    pub readings: usize,
    /// Messages per measured run, over all monitors.
    pub messages: u64,
    pub reps: usize,
    /// How often the consumers' counts are read.
    pub poll: Duration,
    pub qos: QoS,
}

impl IngestParams {
    /// Frames each monitor receives in one measured run.
    pub fn frames_per_monitor(&self) -> usize {
        let per_frame = (self.monitors * self.readings).max(1) as u64;
        (self.messages / per_frame).max(1) as usize
    }

    /// Messages one measured run publishes.
    pub fn run_messages(&self) -> u64 {
        (self.frames_per_monitor() * self.monitors * self.readings) as u64
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Consumer {
    Product,
    Bare,
}

impl Consumer {
    pub fn label(self) -> &'static str {
        match self {
            Self::Product => "radar worker",
            Self::Bare => "bare rumqttc",
        }
    }
}

/// One measured run of one consumer.
#[derive(Debug, Clone)]
pub struct RunResult {
    pub consumer: Consumer,
    pub rep: usize,
    /// The consumer was paused (SIGSTOP) while the run was published and
    /// measured draining the broker's backlog after SIGCONT; otherwise it
    /// consumed while the publisher published.
    pub backlog: bool,
    /// Observations the consumer counted during the run.
    pub observations: u64,
    /// Frames the product emitted (the bare consumer: observations divided
    /// by readings, the frames it would have made).
    pub frames: u64,
    /// First publish to the first poll that found every message consumed.
    pub elapsed: Duration,
    /// First publish to the broker's acknowledgement of the last message.
    pub publish_elapsed: Duration,
    pub complete: bool,
    pub load_1m: f64,
    /// CPU the consuming process (worker or bare subscribers) used.
    pub consumer_cpu: Option<Duration>,
    /// Observations the product rejected during the run (should be 0).
    pub rejected: u64,
    pub flagged: u64,
    pub checkpoints: u64,
    /// Largest worker RSS seen during the run, KiB (product only).
    pub peak_rss_kib: Option<u64>,
}

impl RunResult {
    pub fn observations_per_s(&self) -> f64 {
        self.observations as f64 / self.elapsed.as_secs_f64()
    }

    pub fn frames_per_s(&self) -> f64 {
        self.frames as f64 / self.elapsed.as_secs_f64()
    }
}

/// Everything one `ingest` scenario measured for one K.
#[derive(Debug, Clone)]
pub struct IngestReport {
    pub params: IngestParams,
    pub runs: Vec<RunResult>,
    /// Worker start to ready (all monitors connected), per start.
    pub startups: Vec<Duration>,
    /// Worker RSS after warmup, before a measured run (KiB).
    pub settled_rss_kib: Vec<u64>,
    /// How long one `/metrics` scrape took with every monitor loaded.
    pub scrape: Option<Duration>,
    /// How often both consumers' counts were read in measured runs.
    pub interval: Duration,
}

impl IngestReport {
    /// Product over bare observations per second, per repetition.
    pub fn ratios(&self, backlog: bool) -> Vec<f64> {
        (0..self.params.reps)
            .filter_map(|rep| {
                let of = |c| {
                    self.runs.iter().find(|r| {
                        r.rep == rep && r.consumer == c && r.complete && r.backlog == backlog
                    })
                };
                Some(
                    of(Consumer::Product)?.observations_per_s()
                        / of(Consumer::Bare)?.observations_per_s(),
                )
            })
            .collect()
    }

    pub fn median_rate(&self, consumer: Consumer, backlog: bool) -> Option<f64> {
        let rates: Vec<f64> = self
            .runs
            .iter()
            .filter(|r| r.consumer == consumer && r.complete && r.backlog == backlog)
            .map(RunResult::observations_per_s)
            .collect();
        stats::median(&rates)
    }
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
        let order = if rep % 2 == 0 {
            [Consumer::Product, Consumer::Bare]
        } else {
            [Consumer::Bare, Consumer::Product]
        };
        for consumer in order {
            let results = match consumer {
                Consumer::Product => {
                    let mut worker = WorkerProcess::spawn(&worker_env)?;
                    let ready = worker
                        .wait_ready(p.monitors, Duration::from_secs(300))
                        .await?;
                    report.startups.push(ready);
                    let frames = if warmed { REWARM_FRAMES } else { WARMUP_FRAMES };
                    warm_up(&worker, &mut publisher, &monitors, p, frames).await?;
                    warmed = true;
                    if let Some((rss, _)) = worker.rss_kib() {
                        report.settled_rss_kib.push(rss);
                    }
                    if report.scrape.is_none() {
                        let t = Instant::now();
                        worker.metrics().await?;
                        let scrape = t.elapsed();
                        report.scrape = Some(scrape);
                        // Scrapes cost the worker CPU: keep them under a
                        // tenth of one core and interpolate the end.
                        report.interval = p.poll.max(scrape * 10);
                    }
                    let mut results = Vec::new();
                    for backlog in [false, true] {
                        let run = product_run(
                            &worker,
                            &mut publisher,
                            &monitors,
                            p,
                            rep,
                            report.interval,
                            backlog,
                        )
                        .await;
                        match run {
                            Ok(run) => results.push(run),
                            Err(e) => {
                                resume(worker.pid());
                                return Err(e);
                            }
                        }
                    }
                    let errors = worker.log_errors();
                    worker.stop(Duration::from_secs(120)).await?;
                    if !errors.is_empty() {
                        eprintln!("worker logged errors: {}", errors.join("\n"));
                    }
                    results
                }
                Consumer::Bare => {
                    let bare = BareProcess::start(
                        &env.bench_bin,
                        broker.port,
                        &monitors,
                        p.readings,
                        &env.log_dir,
                    )
                    .await?;
                    let mut results = Vec::new();
                    for backlog in [false, true] {
                        let run = bare_run(
                            &bare,
                            &mut publisher,
                            &monitors,
                            p,
                            rep,
                            report.interval,
                            backlog,
                        )
                        .await;
                        match run {
                            Ok(run) => results.push(run),
                            Err(e) => {
                                bare.stop().await;
                                return Err(e);
                            }
                        }
                    }
                    bare.stop().await;
                    results
                }
            };
            for result in results {
                eprintln!(
                    "  K={} rep {} {:<13} {:<7} {:>9} obs/s {:>9} frames/s in {:.2} s (publish {:.2} s){} load {:.2}",
                    p.monitors,
                    rep + 1,
                    result.consumer.label(),
                    if result.backlog { "backlog" } else { "live" },
                    stats::rate(result.observations_per_s()),
                    stats::rate(result.frames_per_s()),
                    result.elapsed.as_secs_f64(),
                    result.publish_elapsed.as_secs_f64(),
                    if result.complete { "" } else { " INCOMPLETE" },
                    result.load_1m,
                );
                report.runs.push(result);
            }
        }
    }
    if publisher.errors() > 0 {
        eprintln!("the publisher saw {} connection errors", publisher.errors());
    }
    Ok((report, db))
}

/// Counters of the worker, summed over monitors.
struct WorkerCounts {
    received: u64,
    frames: u64,
    rejected: u64,
    flagged: u64,
    checkpoints: u64,
    queued: u64,
}

async fn counts(worker: &WorkerProcess) -> Result<WorkerCounts> {
    let text = worker.metrics().await?;
    let sum = |name| crate::http::metric_sum(&text, name) as u64;
    Ok(WorkerCounts {
        received: sum("radar_observations_received_total"),
        frames: sum("radar_frames_emitted_total"),
        rejected: sum("radar_observations_rejected_total"),
        flagged: sum("radar_frames_flagged_total"),
        checkpoints: sum("radar_checkpoint_commits_total"),
        queued: sum("radar_ingress_queue_depth"),
    })
}

/// Publishes `frames` frames to every monitor and waits until the worker
/// has processed them and its checkpoints have settled.
async fn warm_up(
    worker: &WorkerProcess,
    publisher: &mut Publisher,
    monitors: &[Monitor],
    p: &IngestParams,
    frames: usize,
) -> Result<()> {
    let before = counts(worker).await?;
    let expected = before.received + (frames * monitors.len() * p.readings) as u64;
    publisher.frames(monitors, p.readings, frames).await?;
    publisher.flush(Duration::from_secs(300)).await?;
    let deadline = Instant::now() + Duration::from_secs(300);
    let mut quiet_since: Option<(Instant, u64)> = None;
    loop {
        let now = counts(worker).await?;
        let processed = now.received >= expected && now.queued == 0;
        // Settled: everything processed and no checkpoint committed for a
        // second (the warmup's phase-change and coverage checkpoints are
        // done and do not spill into the measured run).
        match quiet_since {
            Some((since, commits)) if processed && commits == now.checkpoints => {
                if since.elapsed() >= Duration::from_secs(1) {
                    return Ok(());
                }
            }
            _ => quiet_since = processed.then(|| (Instant::now(), now.checkpoints)),
        }
        if Instant::now() > deadline {
            bail!(
                "the warmup did not settle: {} of {expected} observations received, {} queued",
                now.received,
                now.queued
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The product's measured run.
async fn product_run(
    worker: &WorkerProcess,
    publisher: &mut Publisher,
    monitors: &[Monitor],
    p: &IngestParams,
    rep: usize,
    interval: Duration,
    backlog: bool,
) -> Result<RunResult> {
    let before = counts(worker).await?;
    let cpu_before = worker.cpu_time();
    let peak_rss = std::cell::Cell::new(worker.rss_kib().map(|(rss, _)| rss));
    // With many monitors a scrape costs the worker a large share of a
    // core; then the end of its busy period is read from /proc instead.
    let quiescence = interval > QUIESCENCE_ABOVE;
    let threshold = if quiescence {
        busy_threshold(worker, p.poll).await
    } else {
        0.0
    };
    let (started, publish_elapsed) =
        start_run(publisher, monitors, p, worker.pid(), backlog).await?;
    // The earliest the run can have ended: a backlog was published before
    // the clock started; a live run cannot end before its publishing.
    let publish_done = std::cell::Cell::new(publish_elapsed.map(|_| Duration::ZERO));
    let target = before.received + p.run_messages();
    let (published, consumed) = tokio::join!(
        async {
            let r = publish_if_live(publisher, monitors, p, started, publish_elapsed).await;
            if publish_elapsed.is_none() {
                // A live run ends no earlier than its publishing; a backlog
                // was published before the clock started (floor zero).
                publish_done.set(Some(r.as_ref().map_or(Duration::ZERO, |d| *d)));
            }
            r
        },
        async {
            if quiescence {
                until_quiet(
                    worker,
                    started,
                    p,
                    threshold,
                    target,
                    &publish_done,
                    &peak_rss,
                )
                .await
            } else {
                sample_until(started, interval, p, || async {
                    if let Some((rss, _)) = worker.rss_kib() {
                        peak_rss.set(peak_rss.get().max(Some(rss)));
                    }
                    Ok(counts(worker).await?.received - before.received)
                })
                .await
            }
        }
    );
    let publish_elapsed = published?;
    let (elapsed, complete) = consumed?;
    let after = counts(worker).await?;
    if after.rejected > before.rejected {
        let text = worker.metrics().await?;
        let reasons = crate::http::metric_by_label(
            &text,
            "radar_observations_rejected_by_reason_total",
            "reason",
        );
        eprintln!("  rejections since the worker started, by reason: {reasons:?}");
    }
    Ok(RunResult {
        consumer: Consumer::Product,
        rep,
        backlog,
        observations: after.received - before.received,
        frames: after.frames - before.frames,
        elapsed,
        publish_elapsed,
        complete,
        load_1m: system::load_1m(),
        consumer_cpu: cpu_before
            .zip(worker.cpu_time())
            .map(|(b, a)| a.saturating_sub(b)),
        rejected: after.rejected - before.rejected,
        flagged: after.flagged - before.flagged,
        checkpoints: after.checkpoints - before.checkpoints,
        peak_rss_kib: peak_rss.get(),
    })
}

/// The ceiling's measured run.
async fn bare_run(
    bare: &BareProcess,
    publisher: &mut Publisher,
    monitors: &[Monitor],
    p: &IngestParams,
    rep: usize,
    interval: Duration,
    backlog: bool,
) -> Result<RunResult> {
    let before = bare.received();
    let cpu_before = system::cpu_time(bare.pid());
    let (started, publish_elapsed) = start_run(publisher, monitors, p, bare.pid(), backlog).await?;
    let (published, consumed) = tokio::join!(
        publish_if_live(publisher, monitors, p, started, publish_elapsed),
        sample_until(started, interval.min(p.poll), p, || async {
            Ok(bare.received() - before)
        })
    );
    let cpu = cpu_before
        .zip(system::cpu_time(bare.pid()))
        .map(|(b, a)| a.saturating_sub(b));
    let observations = bare.received() - before;
    let publish_elapsed = published?;
    let (elapsed, complete) = consumed?;
    Ok(RunResult {
        consumer: Consumer::Bare,
        rep,
        backlog,
        observations,
        frames: observations / p.readings as u64,
        elapsed,
        publish_elapsed,
        complete,
        load_1m: system::load_1m(),
        consumer_cpu: cpu,
        rejected: 0,
        flagged: 0,
        checkpoints: 0,
        peak_rss_kib: None,
    })
}

/// Starts a measured run. Live: the clock starts now and publishing runs
/// beside the consumer. Backlog: the consumer is paused while the whole run
/// is published and acknowledged by the broker, then resumed, and the clock
/// starts at the resume; returns how long publishing took.
async fn start_run(
    publisher: &mut Publisher,
    monitors: &[Monitor],
    p: &IngestParams,
    consumer: u32,
    backlog: bool,
) -> Result<(Instant, Option<Duration>)> {
    if !backlog {
        return Ok((Instant::now(), None));
    }
    pause(consumer);
    let t = Instant::now();
    let published = publish(publisher, monitors, p, t).await;
    let started = Instant::now();
    resume(consumer);
    Ok((started, Some(published?)))
}

/// Publishes the run unless the backlog was published already.
async fn publish_if_live(
    publisher: &mut Publisher,
    monitors: &[Monitor],
    p: &IngestParams,
    started: Instant,
    published: Option<Duration>,
) -> Result<Duration> {
    match published {
        Some(took) => Ok(took),
        None => publish(publisher, monitors, p, started).await,
    }
}

fn pause(pid: u32) {
    // SAFETY: kill only sends a signal to our own child.
    unsafe {
        libc::kill(pid as libc::pid_t, libc::SIGSTOP);
    }
}

fn resume(pid: u32) {
    // SAFETY: as above.
    unsafe {
        libc::kill(pid as libc::pid_t, libc::SIGCONT);
    }
}

/// Scrape intervals above this switch the product's runs to quiescence.
pub const QUIESCENCE_ABOVE: Duration = Duration::from_secs(1);

/// CPU use (in cores) above which the worker counts as busy: three times
/// its idle use over one `window`, between a quarter and half a core.
async fn busy_threshold(worker: &WorkerProcess, window: Duration) -> f64 {
    let mut rates = Vec::new();
    for _ in 0..10 {
        let (c0, t0) = (worker.cpu_time(), Instant::now());
        tokio::time::sleep(window).await;
        if let Some((c0, c1)) = c0.zip(worker.cpu_time()) {
            rates.push((c1 - c0).as_secs_f64() / t0.elapsed().as_secs_f64());
        }
    }
    // Capped: measured while leftover work (e.g. the checkpoints of the
    // previous run) still runs, "idle" could otherwise look busy.
    (stats::median(&rates).unwrap_or(0.0) * 3.0).clamp(0.25, 0.5)
}

/// The product's end when scrapes are expensive: the worker's CPU time is
/// read every `p.poll` (cheap, from /proc); the run ended at the last
/// window in which the worker was busy, confirmed by one scrape once it is
/// quiet and publishing is done (a scrape that finds the run unfinished is
/// left out of the busy accounting, since it made the worker busy itself).
async fn until_quiet(
    worker: &WorkerProcess,
    started: Instant,
    p: &IngestParams,
    threshold: f64,
    target: u64,
    floor: &std::cell::Cell<Option<Duration>>,
    peak_rss: &std::cell::Cell<Option<u64>>,
) -> Result<(Duration, bool)> {
    let deadline = deadline_for(p);
    let mut last_busy = Duration::ZERO;
    let (mut prev_cpu, mut prev_t) = (worker.cpu_time(), Instant::now());
    loop {
        tokio::time::sleep(p.poll).await;
        let (cpu, now) = (worker.cpu_time(), Instant::now());
        if let Some((rss, _)) = worker.rss_kib() {
            peak_rss.set(peak_rss.get().max(Some(rss)));
        }
        let rate = prev_cpu.zip(cpu).map_or(f64::INFINITY, |(a, b)| {
            b.saturating_sub(a).as_secs_f64() / now.duration_since(prev_t).as_secs_f64()
        });
        (prev_cpu, prev_t) = (cpu, now);
        if rate >= threshold {
            last_busy = now.duration_since(started);
        } else if let Some(floor) = floor.get() {
            let checked_at = now.duration_since(started);
            if counts(worker).await?.received >= target {
                if last_busy.is_zero() {
                    // Never seen busy: all that is known is that it was done.
                    return Ok((checked_at, true));
                }
                // Nothing is consumed before it is published: a worker that
                // kept up and idled between messages ends with the publisher.
                return Ok((last_busy.max(floor), true));
            }
            (prev_cpu, prev_t) = (worker.cpu_time(), Instant::now());
        }
        if started.elapsed() > deadline {
            return Ok((started.elapsed(), false));
        }
    }
}

/// Reads a consumer's count every `interval` until it reaches the run's
/// messages (or the deadline); returns the estimated time of completion
/// and whether the run completed.
async fn sample_until<F, Fut>(
    started: Instant,
    interval: Duration,
    p: &IngestParams,
    mut count: F,
) -> Result<(Duration, bool)>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<u64>>,
{
    let target = p.run_messages();
    let deadline = deadline_for(p);
    let mut samples = Vec::new();
    loop {
        tokio::time::sleep(interval).await;
        let consumed = count().await?;
        samples.push((started.elapsed(), consumed));
        if let Some(at) = completion(&samples, target) {
            return Ok((at, true));
        }
        if started.elapsed() > deadline {
            return Ok((started.elapsed(), false));
        }
    }
}

/// When the count reached `target`, from `(time, count)` samples: between
/// the last sample below it and the first at it, at the rate the samples
/// before showed (a sample interval long enough to keep scrapes cheap
/// would otherwise round every run up to a whole interval).
pub fn completion(samples: &[(Duration, u64)], target: u64) -> Option<Duration> {
    let n = samples.iter().position(|&(_, c)| c >= target)?;
    let (t_n, _) = samples[n];
    if n < 2 {
        return Some(t_n);
    }
    let (t_first, c_first) = samples[0];
    let (t_last, c_last) = samples[n - 1];
    if c_last <= c_first {
        return Some(t_n);
    }
    let rate = (c_last - c_first) as f64 / (t_last - t_first).as_secs_f64();
    let rest = Duration::from_secs_f64((target - c_last) as f64 / rate);
    Some((t_last + rest).min(t_n))
}

/// Publishes one run's frames; returns when the broker has them all.
async fn publish(
    publisher: &mut Publisher,
    monitors: &[Monitor],
    p: &IngestParams,
    started: Instant,
) -> Result<Duration> {
    publisher
        .frames(monitors, p.readings, p.frames_per_monitor())
        .await?;
    publisher.flush(deadline_for(p)).await?;
    Ok(started.elapsed())
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

#[cfg(test)]
mod tests {
    use super::*;

    fn params(monitors: usize, messages: u64) -> IngestParams {
        IngestParams {
            monitors,
            readings: 2,
            messages,
            reps: 2,
            poll: Duration::from_millis(100),
            qos: QoS::AtLeastOnce,
        }
    }

    #[test]
    fn a_run_sends_whole_frames_to_every_monitor() {
        let p = params(1000, 200_000);
        assert_eq!(p.frames_per_monitor(), 100);
        assert_eq!(p.run_messages(), 200_000);
        let p = params(3, 100);
        assert_eq!(p.frames_per_monitor(), 16);
        assert_eq!(p.run_messages(), 96);
        assert_eq!(params(1000, 10).frames_per_monitor(), 1);
    }

    fn run(
        consumer: Consumer,
        rep: usize,
        observations: u64,
        secs: u64,
        complete: bool,
    ) -> RunResult {
        RunResult {
            consumer,
            rep,
            backlog: false,
            observations,
            frames: observations / 2,
            elapsed: Duration::from_secs(secs),
            publish_elapsed: Duration::from_secs(secs),
            complete,
            load_1m: 0.0,
            consumer_cpu: None,
            rejected: 0,
            flagged: 0,
            checkpoints: 0,
            peak_rss_kib: None,
        }
    }

    fn at(ms: u64, count: u64) -> (Duration, u64) {
        (Duration::from_millis(ms), count)
    }

    #[test]
    fn completion_is_interpolated_at_the_rate_seen_before() {
        // 1000 per second, target reached 250 ms after the last sample below.
        let samples = [
            at(1000, 1000),
            at(2000, 2000),
            at(3000, 3000),
            at(4000, 3250),
        ];
        assert_eq!(
            completion(&samples, 3250),
            Some(Duration::from_millis(3250))
        );
        // Never later than the sample that saw it done.
        let samples = [at(1000, 100), at(2000, 200), at(3000, 1000)];
        assert_eq!(
            completion(&samples, 1000),
            Some(Duration::from_millis(3000))
        );
        // Too few samples: the sample that saw it done.
        assert_eq!(
            completion(&[at(500, 10)], 10),
            Some(Duration::from_millis(500))
        );
        assert_eq!(completion(&[at(500, 9)], 10), None);
    }

    #[test]
    fn ratios_pair_the_runs_of_one_repetition_and_skip_incomplete_ones() {
        let report = IngestReport {
            params: params(1, 100),
            runs: vec![
                run(Consumer::Product, 0, 100, 2, true),
                run(Consumer::Bare, 0, 100, 1, true),
                run(Consumer::Bare, 1, 100, 1, true),
                run(Consumer::Product, 1, 50, 10, false),
            ],
            startups: vec![],
            settled_rss_kib: vec![],
            scrape: None,
            interval: Duration::from_millis(100),
        };
        assert_eq!(report.ratios(false), vec![0.5]);
        assert!(report.ratios(true).is_empty());
        assert_eq!(report.median_rate(Consumer::Bare, false), Some(100.0));
        assert_eq!(report.median_rate(Consumer::Product, false), Some(50.0));
    }
}
