//! The radar worker's side of a measured run: its counters, the warmup
//! that brings every monitor past its fit, the measured run, and the end of
//! a run read from the worker's CPU use when scrapes are expensive.

use std::{
    cell::Cell,
    time::{Duration, Instant},
};

use anyhow::{Result, bail};

use crate::{
    db::Monitor,
    mqtt::Publisher,
    stats, system,
    worker::{WorkerEnv, WorkerProcess},
};

use super::{
    Consumer, IngestParams, IngestReport, REWARM_FRAMES, RunResult, WARMUP_FRAMES, deadline_for,
    publish::{publish_if_live, resume, start_run},
    sample::sample_until,
};

/// One repetition of the product: starts a worker, warms it up, measures
/// its live and backlog runs and stops it (committing its snapshots).
pub(super) async fn product_runs(
    worker_env: &WorkerEnv<'_>,
    publisher: &mut Publisher,
    monitors: &[Monitor],
    p: &IngestParams,
    rep: usize,
    warmed: bool,
    report: &mut IngestReport,
) -> Result<Vec<RunResult>> {
    let mut worker = WorkerProcess::spawn(worker_env)?;
    let ready = worker
        .wait_ready(p.monitors, Duration::from_secs(300))
        .await?;
    report.startups.push(ready);
    let frames = if warmed { REWARM_FRAMES } else { WARMUP_FRAMES };
    warm_up(&worker, publisher, monitors, p, frames).await?;
    if let Some((rss, _)) = worker.rss_kib() {
        report.settled_rss_kib.push(rss);
    }
    if report.scrape.is_none() {
        time_scrape(&worker, p, report).await?;
    }
    let mut results = Vec::new();
    for backlog in [false, true] {
        let run = product_run(
            &worker,
            publisher,
            monitors,
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
    Ok(results)
}

/// Times one `/metrics` scrape with every monitor loaded and sets the
/// interval of the measured runs' samples from it.
async fn time_scrape(
    worker: &WorkerProcess,
    p: &IngestParams,
    report: &mut IngestReport,
) -> Result<()> {
    let t = Instant::now();
    worker.metrics().await?;
    let scrape = t.elapsed();
    report.scrape = Some(scrape);
    // Scrapes cost the worker CPU: keep them under a
    // tenth of one core and interpolate the end.
    report.interval = p.poll.max(scrape * 10);
    Ok(())
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
pub(super) async fn warm_up(
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
    let sleeps_before = worker.model_sleeps();
    let peak_rss = Cell::new(worker.rss_kib().map(|(rss, _)| rss));
    let end = end_by(worker, p, interval).await;
    let (started, publish_elapsed) =
        start_run(publisher, monitors, p, worker.pid(), backlog).await?;
    // The earliest the run can have ended: a backlog was published before
    // the clock started; a live run cannot end before its publishing.
    let publish_done = Cell::new(publish_elapsed.map(|_| Duration::ZERO));
    let (published, consumed) = tokio::join!(
        publish_noting_floor(
            publisher,
            monitors,
            p,
            started,
            publish_elapsed,
            &publish_done
        ),
        product_end(
            worker,
            started,
            p,
            end,
            before.received,
            &publish_done,
            &peak_rss
        )
    );
    let publish_elapsed = published?;
    let (elapsed, complete) = consumed?;
    let after = counts(worker).await?;
    if after.rejected > before.rejected {
        log_rejections(worker).await?;
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
        model_sleeps: sleeps_before
            .zip(worker.model_sleeps())
            .map(|(b, a)| a.saturating_sub(b)),
    })
}

/// How the end of the product's run is read.
enum EndBy {
    /// Scraping the worker's counters every interval.
    Scrapes(Duration),
    /// The worker's CPU use falling below this many cores, confirmed by one scrape.
    Quiet(f64),
}

/// Chooses how the run's end is read: CPU quiescence when scrapes are expensive.
async fn end_by(worker: &WorkerProcess, p: &IngestParams, interval: Duration) -> EndBy {
    // With many monitors a scrape costs the worker a large share of a
    // core; then the end of its busy period is read from /proc instead.
    if interval > QUIESCENCE_ABOVE {
        EndBy::Quiet(busy_threshold(worker, p.poll).await)
    } else {
        EndBy::Scrapes(interval)
    }
}

/// Publishes a live run and sets `floor` to when publishing finished.
async fn publish_noting_floor(
    publisher: &mut Publisher,
    monitors: &[Monitor],
    p: &IngestParams,
    started: Instant,
    published: Option<Duration>,
    floor: &Cell<Option<Duration>>,
) -> Result<Duration> {
    let r = publish_if_live(publisher, monitors, p, started, published).await;
    if published.is_none() {
        // A live run ends no earlier than its publishing; a backlog
        // was published before the clock started (floor zero).
        floor.set(Some(r.as_ref().map_or(Duration::ZERO, |d| *d)));
    }
    r
}

/// Waits for the end of the product's run; returns when it ended and whether it completed.
async fn product_end(
    worker: &WorkerProcess,
    started: Instant,
    p: &IngestParams,
    end: EndBy,
    received_before: u64,
    floor: &Cell<Option<Duration>>,
    peak_rss: &Cell<Option<u64>>,
) -> Result<(Duration, bool)> {
    match end {
        EndBy::Quiet(threshold) => {
            let target = received_before + p.run_messages();
            until_quiet(worker, started, p, threshold, target, floor, peak_rss).await
        }
        EndBy::Scrapes(interval) => {
            sample_until(started, interval, p, || async {
                if let Some((rss, _)) = worker.rss_kib() {
                    peak_rss.set(peak_rss.get().max(Some(rss)));
                }
                Ok(counts(worker).await?.received - received_before)
            })
            .await
        }
    }
}

/// Prints the worker's rejections so far, by reason.
async fn log_rejections(worker: &WorkerProcess) -> Result<()> {
    let text = worker.metrics().await?;
    let reasons = crate::http::metric_by_label(
        &text,
        "radar_observations_rejected_by_reason_total",
        "reason",
    );
    eprintln!("  rejections since the worker started, by reason: {reasons:?}");
    Ok(())
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
    floor: &Cell<Option<Duration>>,
    peak_rss: &Cell<Option<u64>>,
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
