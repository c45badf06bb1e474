//! Recovery and memory of one `radar worker` process with many monitors
//! that all have snapshots: time from process start until `/readyz` reports
//! every monitor connected (each snapshot loaded, verified, decoded,
//! re-committed before subscribing, and every subscription acknowledged),
//! then the resident set while idle, against a worker with no monitor.

use std::time::Duration;

use anyhow::{Context, Result, bail};

use crate::{
    broker::Mosquitto,
    db::BenchDb,
    ingest::Env,
    stats, system,
    worker::{WorkerEnv, WorkerProcess},
};

#[derive(Debug, Clone)]
pub struct RecoveryReport {
    pub monitors: usize,
    /// Process start to ready, per start.
    pub startups: Vec<Duration>,
    /// Sum of every monitor's restored processed count, per start (proves
    /// the monitors restored rather than started fresh).
    pub restored_processed: Vec<u64>,
    /// RSS after `idle` with every monitor ready, KiB.
    pub idle_rss_kib: Vec<u64>,
    /// RSS of a worker with no monitor after the same idle time, KiB.
    pub baseline_rss_kib: Vec<u64>,
    pub idle: Duration,
    pub load_1m: Vec<f64>,
}

impl RecoveryReport {
    /// Median idle RSS above the empty worker's, per monitor, in KiB.
    pub fn idle_kib_per_monitor(&self) -> Option<f64> {
        let idle = stats::median(
            &self
                .idle_rss_kib
                .iter()
                .map(|&k| k as f64)
                .collect::<Vec<_>>(),
        )?;
        let base = stats::median(
            &self
                .baseline_rss_kib
                .iter()
                .map(|&k| k as f64)
                .collect::<Vec<_>>(),
        )?;
        Some((idle - base) / self.monitors.max(1) as f64)
    }
}

/// Starts the worker `reps` times against `db` (whose `monitors` monitors
/// all have snapshots), interleaved with an empty worker for the baseline.
pub async fn run(
    env: &Env,
    db: &BenchDb,
    monitors: usize,
    reps: usize,
    idle: Duration,
) -> Result<RecoveryReport> {
    let broker = Mosquitto::start(1000)
        .await
        .context("starting a private mosquitto")?;
    let empty = BenchDb::create(&env.db_server, "empty").await?;
    let mut report = RecoveryReport {
        monitors,
        startups: Vec::new(),
        restored_processed: Vec::new(),
        idle_rss_kib: Vec::new(),
        baseline_rss_kib: Vec::new(),
        idle,
        load_1m: Vec::new(),
    };
    let mqtt_url = broker.url();
    for rep in 0..reps {
        let full = WorkerEnv {
            radar_bin: &env.radar_bin,
            database_url: &db.url,
            mqtt_url: &mqtt_url,
            log_dir: &env.log_dir,
            tag: "recovery",
        };
        // Every start reads the same rows, not the versions earlier starts left.
        db.vacuum().await?;
        report.load_1m.push(system::load_1m());
        let mut worker = WorkerProcess::spawn(&full)?;
        let ready = worker
            .wait_ready(monitors, Duration::from_secs(300))
            .await?;
        let restored = worker
            .metric_sum("radar_recovery_restored_processed")
            .await? as u64;
        if restored == 0 {
            bail!("the worker restored no processed frames: the monitors started fresh");
        }
        // The idle period is what is measured here, not a wait for a condition.
        tokio::time::sleep(idle).await;
        let rss = worker.rss_kib().map(|(rss, _)| rss).unwrap_or(0);
        worker.stop(Duration::from_secs(120)).await?;
        eprintln!(
            "  recovery rep {}: {monitors} monitors ready after {:.2} s (restored {restored} frames); idle RSS {} MiB",
            rep + 1,
            ready.as_secs_f64(),
            rss / 1024
        );
        report.startups.push(ready);
        report.restored_processed.push(restored);
        report.idle_rss_kib.push(rss);

        let bare = WorkerEnv {
            database_url: &empty.url,
            tag: "empty",
            ..full
        };
        let mut worker = WorkerProcess::spawn(&bare)?;
        worker.wait_ready(0, Duration::from_secs(60)).await?;
        tokio::time::sleep(idle).await;
        let rss = worker.rss_kib().map(|(rss, _)| rss).unwrap_or(0);
        worker.stop(Duration::from_secs(60)).await?;
        eprintln!("  empty worker idle RSS {} MiB", rss / 1024);
        report.baseline_rss_kib.push(rss);
    }
    empty.drop_db().await?;
    Ok(report)
}
