//! Idle cost of one `radar worker`: N monitors of `config/monitors/pump.toml`
//! on distinct topics, connected, with no data. Over a fixed window it
//! reads what PostgreSQL did for the worker's database (`pg_stat_database`:
//! commits and rows written per second), the CPU share of the PostgreSQL
//! backends serving the worker's connections and the worker's own, from
//! /proc; then the size and the worker CPU of `/metrics` scrapes.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use diesel::sql_types::{BigInt, Text};
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use radar::{config::MonitorConfig, store::Services};
use uuid::Uuid;

use crate::{
    broker::Mosquitto,
    db::BenchDb,
    ingest::Env,
    system,
    worker::{WorkerEnv, WorkerProcess},
};

const PUMP: &str = include_str!("../../config/monitors/pump.toml");

#[derive(Debug, Clone)]
pub struct IdleParams {
    pub monitors: usize,
    /// Time between ready and the start of the window: the first
    /// heartbeats and startup writes settle.
    pub settle: Duration,
    pub window: Duration,
    /// Scrapes measured together (the CPU clock ticks in 10 ms).
    pub scrapes: usize,
}

#[derive(Debug, Clone)]
pub struct IdleReport {
    pub params: IdleParams,
    pub ready_after: Duration,
    pub commits_per_s: f64,
    /// Rows inserted, updated and deleted per second.
    pub rows_per_s: f64,
    /// Worker CPU time over wall time (1.0 = one core).
    pub cpu_share: f64,
    /// CPU time of the PostgreSQL backends serving the worker's database
    /// over wall time, when the server runs on this machine (its processes
    /// readable in /proc); background processes (WAL writer, checkpointer)
    /// are not counted.
    pub db_cpu_share: Option<f64>,
    pub scrape: ScrapeCost,
    pub rss_kib: u64,
    /// Descriptors, threads and open-file limit at the end of the window.
    pub holdings: system::Holdings,
    /// Rows written per second, per table (from `pg_stat_user_tables`).
    pub by_table: Vec<(String, f64)>,
    pub load_before: String,
    pub load_after: String,
}

#[derive(Debug, Clone, Default)]
pub struct ScrapeCost {
    pub bytes: usize,
    pub lines: usize,
    /// Worker CPU per scrape above its idle rate.
    pub cpu: Duration,
    /// Wall time of one scrape (median-free mean over the scrapes).
    pub wall: Duration,
}

/// The pump monitor `i` of a run, on topics of its own.
pub fn pump_config(run: &str, i: usize) -> Result<MonitorConfig> {
    let toml = PUMP
        .replace(
            "name = \"pump-7\"",
            &format!("name = \"idle-{run}-{i:05}\""),
        )
        .replace("plant/hall-b/", &format!("radar-bench/idle/{run}/{i}/"));
    Ok(MonitorConfig::from_toml(&toml)?)
}

/// Creates `count` pump monitors, four at a time.
async fn create_pumps(db: &BenchDb, count: usize) -> Result<()> {
    let services = Services::new(db.pool(4).await?);
    let run = Uuid::new_v4().simple().to_string()[..8].to_string();
    let mut tasks = Vec::new();
    for lane in 0..4 {
        let services = services.clone();
        let run = run.clone();
        tasks.push(tokio::spawn(async move {
            for i in (lane..count).step_by(4) {
                services.create(&pump_config(&run, i)?).await?;
            }
            anyhow::Ok(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    Ok(())
}

#[derive(diesel::QueryableByName, Debug, Clone, Copy)]
struct DbStats {
    #[diesel(sql_type = BigInt)]
    commits: i64,
    #[diesel(sql_type = BigInt)]
    rows: i64,
}

/// Commits and written rows of database `name`, read from another database
/// so that reading them adds nothing.
async fn db_stats(admin: &mut AsyncPgConnection, name: &str) -> Result<DbStats> {
    // A fresh statistics snapshot each time.
    diesel::sql_query("SELECT pg_stat_clear_snapshot()")
        .execute(admin)
        .await?;
    Ok(diesel::sql_query(
        "SELECT xact_commit AS commits, tup_inserted + tup_updated + tup_deleted AS rows \
         FROM pg_stat_database WHERE datname = $1",
    )
    .bind::<Text, _>(name)
    .get_result(admin)
    .await?)
}

#[derive(diesel::QueryableByName)]
struct Backend {
    #[diesel(sql_type = diesel::sql_types::Integer)]
    pid: i32,
}

/// CPU time so far of each PostgreSQL backend serving database `name`,
/// by process id; empty when none of them is readable here.
async fn backend_cpu(admin: &mut AsyncPgConnection, name: &str) -> Result<Vec<(i32, Duration)>> {
    let backends: Vec<Backend> = diesel::sql_query(
        "SELECT pid FROM pg_stat_activity \
         WHERE datname = $1 AND backend_type = 'client backend'",
    )
    .bind::<Text, _>(name)
    .load(admin)
    .await?;
    Ok(backends
        .into_iter()
        .filter_map(|b| {
            let pid = u32::try_from(b.pid).ok()?;
            Some((b.pid, system::cpu_time(pid)?))
        })
        .collect())
}

/// The backends' CPU share over `wall` seconds, counting those that served
/// the worker at both readings (its pool keeps its connections).
fn backend_share(before: &[(i32, Duration)], after: &[(i32, Duration)], wall: f64) -> Option<f64> {
    let spent: Vec<f64> = after
        .iter()
        .filter_map(|(pid, cpu)| {
            let (_, earlier) = before.iter().find(|(p, _)| p == pid)?;
            Some(cpu.saturating_sub(*earlier).as_secs_f64())
        })
        .collect();
    (!spent.is_empty()).then(|| spent.iter().sum::<f64>() / wall)
}

#[derive(diesel::QueryableByName, Debug, Clone)]
struct TableWrites {
    #[diesel(sql_type = Text)]
    table: String,
    #[diesel(sql_type = BigInt)]
    rows: i64,
}

/// Rows written so far per table of the worker's database.
async fn table_writes(db: &BenchDb) -> Result<Vec<TableWrites>> {
    let mut conn = db.connect().await?;
    Ok(diesel::sql_query(
        "SELECT relname::text AS table, (n_tup_ins + n_tup_upd + n_tup_del)::int8 AS rows \
         FROM pg_stat_user_tables ORDER BY relname",
    )
    .load(&mut conn)
    .await?)
}

pub async fn run(env: &Env, p: &IdleParams) -> Result<IdleReport> {
    eprintln!("idle: creating {} pump monitors", p.monitors);
    let db = BenchDb::create(&env.db_server, "idle").await?;
    let result = measure(env, &db, p).await;
    db.drop_db().await?;
    result
}

async fn measure(env: &Env, db: &BenchDb, p: &IdleParams) -> Result<IdleReport> {
    create_pumps(db, p.monitors).await?;
    let broker = Mosquitto::start(1000)
        .await
        .context("starting a private mosquitto")?;
    let mqtt_url = broker.url();
    let mut worker = WorkerProcess::spawn(&WorkerEnv {
        radar_bin: &env.radar_bin,
        database_url: &db.url,
        mqtt_url: &mqtt_url,
        log_dir: &env.log_dir,
        tag: "idle",
    })?;
    let ready_after = worker
        .wait_ready(p.monitors, Duration::from_secs(900))
        .await?;
    eprintln!(
        "idle: {} monitors ready after {:.1} s; settling {:?}",
        p.monitors,
        ready_after.as_secs_f64(),
        p.settle
    );
    // The settle time is part of the measurement's definition, not a wait
    // for a condition.
    tokio::time::sleep(p.settle).await;
    let server = env.db_server.trim_end_matches('/');
    let mut admin = AsyncPgConnection::establish(&format!("{server}/postgres")).await?;
    let tables_before = table_writes(db).await?;
    let load_before = system::load_average();
    let before = db_stats(&mut admin, &db.name).await?;
    let db_cpu_before = backend_cpu(&mut admin, &db.name).await?;
    let cpu_before = worker.cpu_time().context("reading the worker's CPU time")?;
    let started = Instant::now();
    tokio::time::sleep(p.window).await;
    let after = db_stats(&mut admin, &db.name).await?;
    let db_cpu_after = backend_cpu(&mut admin, &db.name).await?;
    let cpu_after = worker.cpu_time().context("reading the worker's CPU time")?;
    let wall = started.elapsed().as_secs_f64();
    let load_after = system::load_average();
    let tables_after = table_writes(db).await?;
    let by_table = tables_after
        .iter()
        .filter_map(|after| {
            let before = tables_before
                .iter()
                .find(|b| b.table == after.table)
                .map_or(0, |b| b.rows);
            let rate = (after.rows - before) as f64 / wall;
            (rate > 0.0).then(|| (after.table.clone(), rate))
        })
        .collect();
    let cpu_share = (cpu_after - cpu_before).as_secs_f64() / wall;
    let db_cpu_share = backend_share(&db_cpu_before, &db_cpu_after, wall);
    let rss_kib = worker.rss_kib().map_or(0, |(rss, _)| rss);
    let holdings = worker.holdings().unwrap_or_default();

    let scrape = scrape_cost(&worker, p.scrapes, cpu_share).await?;
    let errors = worker.log_errors();
    worker.stop(Duration::from_secs(300)).await?;
    if !errors.is_empty() {
        bail!(
            "the worker logged errors while idle:\n{}",
            errors[..errors.len().min(10)].join("\n")
        );
    }
    Ok(IdleReport {
        params: p.clone(),
        ready_after,
        commits_per_s: (after.commits - before.commits) as f64 / wall,
        rows_per_s: (after.rows - before.rows) as f64 / wall,
        cpu_share,
        db_cpu_share,
        scrape,
        rss_kib,
        holdings,
        by_table,
        load_before,
        load_after,
    })
}

/// `scrapes` scrapes back to back: the size of one, and the worker CPU
/// they took above its idle rate, per scrape.
pub async fn scrape_cost(
    worker: &WorkerProcess,
    scrapes: usize,
    idle_share: f64,
) -> Result<ScrapeCost> {
    let scrapes = scrapes.max(1);
    let mut cost = ScrapeCost::default();
    let cpu_before = worker.cpu_time().context("reading the worker's CPU time")?;
    let started = Instant::now();
    let mut last = String::new();
    for _ in 0..scrapes {
        last = worker.metrics().await?;
        cost.bytes = last.len();
        cost.lines = last.lines().count();
    }
    let wall = started.elapsed();
    // For reading the exposition afterwards (which families, overflow).
    if let Some(path) = std::env::var_os("RADAR_BENCH_SCRAPE_OUT") {
        std::fs::write(&path, &last)
            .with_context(|| format!("writing the last scrape to {}", path.to_string_lossy()))?;
    }
    let cpu = worker.cpu_time().context("reading the worker's CPU time")? - cpu_before;
    let above_idle = (cpu.as_secs_f64() - idle_share * wall.as_secs_f64()).max(0.0);
    cost.cpu = Duration::from_secs_f64(above_idle / scrapes as f64);
    cost.wall = wall / scrapes as u32;
    Ok(cost)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backend_share_counts_only_backends_seen_at_both_readings() {
        let s = Duration::from_secs;
        let before = [(1, s(10)), (2, s(20)), (3, s(5))];
        let after = [(1, s(13)), (2, s(21)), (4, s(50))];
        assert_eq!(backend_share(&before, &after, 2.0), Some(2.0));
        assert_eq!(backend_share(&before, &[(4, s(50))], 2.0), None);
        assert_eq!(backend_share(&[], &[], 2.0), None);
    }
}
