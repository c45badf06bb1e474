//! `radar-chaos`: the fault-injection suite. Starts its own PostgreSQL
//! cluster and Mosquitto on free loopback ports, creates monitors with the
//! real `radar` CLI, drives sensor data, runs real `radar worker` processes
//! and shakes them (kill -9, SIGTERM, overlapping takeovers, broker restarts,
//! PostgreSQL restarts and pauses). Afterwards it checks the recovery
//! invariants over what it recorded and prints `N passed, N failed` for each;
//! the exit code is 1 when any failed, 2 when the run itself could not be
//! carried out.
//!
//! Layout: `radar_testkit::postgres` and `radar_testkit::broker` (the test
//! helpers that run a private PostgreSQL cluster and Mosquitto), `fleet` (worker processes and CLI calls),
//! `publisher` (sensor frames), `scenario` (the fault loop and healing),
//! `observe` (audit, samples, final reads), `check` (the invariants, pure),
//! `replay` (a monitor's row copied, written back and repaired), `monitors`
//! (created and calibrated before any fault), `summary` (what a run prints).

mod check;
mod fleet;
mod monitors;
mod observe;
mod publisher;
mod replay;
mod scenario;
mod summary;

use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    path::{Path, PathBuf},
    process::ExitCode,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};
use clap::Parser;
use uuid::Uuid;

use check::{Limits, Observations, ProcessLog};
use fleet::{WorkerEnv, radar_cli};
use monitors::{create_monitors, warm_up};
use publisher::Publisher;
use scenario::{Chaos, Plan};
use summary::{print_verdicts, report};

/// Fault-injection run against real radar workers, Mosquitto and PostgreSQL.
#[derive(Debug, Parser)]
#[command(name = "radar-chaos")]
struct Args {
    /// The CI run: 24 faults, 4 monitors, about two minutes.
    #[arg(long)]
    short: bool,
    /// How many faults to inject (default 24 with --short, else 200).
    #[arg(long)]
    faults: Option<u32>,
    /// Stop injecting after this many seconds, however many faults are done.
    #[arg(long)]
    max_seconds: Option<u64>,
    /// Monitors to create (default 4 with --short, else 6).
    #[arg(long)]
    monitors: Option<usize>,
    /// Worker shards (`RADAR_SHARD=i/N`); one live worker each.
    #[arg(long, default_value_t = 2)]
    shards: u32,
    /// Frames per second per monitor.
    #[arg(long, default_value_t = 10)]
    rate: u32,
    /// Seed of the fault schedule (default: from the clock; printed).
    #[arg(long)]
    seed: Option<u64>,
    /// The `radar` binary (default: next to this one).
    #[arg(long)]
    radar: Option<PathBuf>,
    /// Keep the run directory (logs, cluster) even when every invariant holds.
    #[arg(long)]
    keep: bool,
    /// Check the observations a run saved (`observations.json` in a kept
    /// run directory) again, without running anything.
    #[arg(long, value_name = "FILE")]
    recheck: Option<PathBuf>,
}

const CHECKPOINT_TIMEOUT_SECS: u64 = 5;
const DATABASE: &str = "radar_chaos";

fn main() -> ExitCode {
    let args = Args::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("radar-chaos: cannot start a runtime: {e}");
            return ExitCode::from(2);
        }
    };
    // Interrupted, the run is dropped: workers are killed, the broker and
    // the cluster stopped and the run directory removed.
    let outcome = runtime.block_on(async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            outcome = run(args) => outcome,
            _ = tokio::signal::ctrl_c() => bail!("interrupted (SIGINT)"),
            _ = term.recv() => bail!("interrupted (SIGTERM)"),
        }
    });
    match outcome {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("radar-chaos: the run could not be carried out: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn log(message: impl AsRef<str>) {
    eprintln!("[radar-chaos] {}", message.as_ref());
}

async fn run(args: Args) -> Result<bool> {
    if let Some(path) = &args.recheck {
        return recheck(path);
    }
    let started = Instant::now();
    let (plan, monitors_wanted, seed) = settings(&args);
    let radar = radar_binary(args.radar)?;
    let dir = tempfile::Builder::new().prefix("radar-chaos-").tempdir()?;
    log(format!(
        "seed {seed}, {} faults, {monitors_wanted} monitors on {} shards; run directory {}",
        plan.faults,
        args.shards,
        dir.path().display()
    ));

    let (cluster, db_url) = start_database().await?;
    let broker = radar_testkit::broker::Mosquitto::start(100_000).await?;
    let env = WorkerEnv {
        radar,
        dir: dir.path().to_path_buf(),
        mqtt_url: broker.url(),
        database: DATABASE.into(),
        pg_port: cluster.port,
        shards: args.shards,
        checkpoint_timeout_secs: CHECKPOINT_TIMEOUT_SECS,
    };
    migrate_and_audit(&env, &db_url).await?;
    let (monitors, feeds) = create_monitors(&env, monitors_wanted).await?;
    log(format!(
        "PostgreSQL on {}, Mosquitto on {}, {} monitors",
        cluster.port,
        broker.port,
        monitors.len()
    ));

    let publisher = Publisher::start(broker.port, feeds, args.rate);
    let sampler = observe::Sampler::start(env.clone(), db_url.clone());
    let mut chaos = Chaos::new(env.clone(), db_url.clone(), cluster, broker, monitors, seed);
    chaos.start_workers()?;
    warm_up(&db_url, &chaos.monitors, Duration::from_secs(90)).await?;
    log(format!(
        "monitors calibrated after {:.0} s; injecting faults",
        started.elapsed().as_secs_f64()
    ));

    let faults_started = Instant::now();
    chaos.run(&plan).await?;
    let fault_seconds = faults_started.elapsed().as_secs_f64();
    log("healing");
    let resumed = chaos.heal(plan.heal_deadline).await?;
    let published = publisher.stop().await;
    let samples = sampler.stop().await;
    let final_ends = chaos.stop_all().await;

    let obs = observations(&chaos, &env, &db_url, published, samples, resumed).await?;
    // What the checks saw, for `--recheck` and for people.
    fs::write(
        env.dir.join("observations.json"),
        serde_json::to_vec(&obs).context("serializing the observations")?,
    )?;
    let verdicts = check::check(&obs);
    let clean_stops = final_ends
        .iter()
        .filter(|(_, e)| *e == Some(fleet::Ended::Code(0)))
        .count();
    report(&chaos, &obs, &verdicts, fault_seconds, started.elapsed());
    print_final_stop(&final_ends, clean_stops);
    let passed = verdicts.iter().all(|v| v.failed == 0) && clean_stops == final_ends.len();
    close_run(chaos, dir, passed && !args.keep)?;
    Ok(passed)
}

/// Checks the observations a kept run saved again (`--recheck`).
fn recheck(path: &Path) -> Result<bool> {
    let text = fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let obs: Observations = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a run's observations", path.display()))?;
    let verdicts = check::check(&obs);
    print_verdicts(&verdicts);
    Ok(verdicts.iter().all(|v| v.failed == 0))
}

/// The fault plan, the number of monitors and the seed the arguments ask for.
fn settings(args: &Args) -> (Plan, usize, u64) {
    let faults = args.faults.unwrap_or(if args.short { 24 } else { 200 });
    let monitors_wanted = args.monitors.unwrap_or(if args.short { 4 } else { 6 });
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    });
    let plan = Plan {
        faults,
        deadline: Duration::from_secs(args.max_seconds.unwrap_or(if args.short {
            120
        } else {
            u64::from(faults) * 8
        })),
        gap_ms: (1000, 3500),
        outage_ms: (500, 12_000),
        heal_deadline: Duration::from_secs(120),
    };
    (plan, monitors_wanted, seed)
}

/// The absolute path of the `radar` binary: given, or next to this one.
fn radar_binary(given: Option<PathBuf>) -> Result<PathBuf> {
    let radar = match given {
        Some(path) => path,
        None => std::env::current_exe()?
            .parent()
            .context("the radar-chaos binary has no directory")?
            .join("radar"),
    };
    if !radar.exists() {
        bail!(
            "no radar binary at {} (build it: cargo build -p radar-actors)",
            radar.display()
        );
    }
    // Workers run with their own run directory as working directory, where a
    // relative path such as target/debug/radar would name nothing.
    std::fs::canonicalize(&radar)
        .with_context(|| format!("resolving the radar binary path {}", radar.display()))
}

/// Starts the private PostgreSQL cluster and creates the chaos database in it;
/// returns the cluster and the database's URL.
async fn start_database() -> Result<(radar_testkit::postgres::PrivatePostgres, String)> {
    let cluster = tokio::task::block_in_place(radar_testkit::postgres::PrivatePostgres::start)?;
    let admin = format!("{}/postgres?application_name=radar-chaos", cluster.url());
    {
        use diesel_async::RunQueryDsl;
        let mut conn = observe::connect(&admin).await?;
        diesel::sql_query(format!("CREATE DATABASE {DATABASE}"))
            .execute(&mut conn)
            .await
            .context("creating the chaos database")?;
    }
    let db_url = format!("{}/{DATABASE}?application_name=radar-chaos", cluster.url());
    Ok((cluster, db_url))
}

/// Runs `radar migrate` and installs the audit of writes.
async fn migrate_and_audit(env: &WorkerEnv, db_url: &str) -> Result<()> {
    let (ok, _) = radar_cli(env, &["migrate"], Duration::from_secs(60)).await?;
    if !ok {
        bail!(
            "radar migrate failed; see {}",
            env.dir.join(fleet::CLI_LOG).display()
        );
    }
    observe::install_audit(db_url).await
}

/// Gathers what the checks need: the final reads, the samples, what the
/// scenario recorded, each monitor's coverage and every process's log.
async fn observations(
    chaos: &Chaos,
    env: &WorkerEnv,
    db_url: &str,
    published: BTreeMap<Uuid, BTreeSet<i64>>,
    samples: observe::Samples,
    resumed: BTreeMap<Uuid, bool>,
) -> Result<Observations> {
    let mut obs = Observations {
        monitors: chaos.monitors.keys().copied().collect(),
        writes: observe::audited_writes(db_url).await?,
        final_evidence: observe::evidence_rows(db_url).await?,
        final_alarms: observe::alarm_rows(db_url).await?,
        alarm_rows: observe::alarm_table(db_url).await?,
        sampled_evidence: samples.evidence,
        published,
        status: samples.status,
        outages: chaos.outages.clone(),
        resumed,
        offset_workers: chaos.offset_workers.clone(),
        replays: chaos.replays.clone(),
        limits: Limits {
            checkpoint_timeout: Duration::from_secs(CHECKPOINT_TIMEOUT_SECS),
            reconnect: fleet::MQTT_BACKOFF.1,
            ..Limits::default()
        },
        ..Observations::default()
    };
    for m in &obs.monitors {
        match observe::coverage(env, *m).await {
            Ok(c) => {
                obs.coverage.insert(*m, c);
            }
            Err(e) => log(format!("monitor {m}: {e:#}")),
        }
    }
    for w in &chaos.finished {
        let text = w.log_text();
        obs.restores.extend(observe::restores(&w.name, &text));
        obs.logs.push(ProcessLog {
            name: w.name.clone(),
            text,
            exit_code: w.ended.and_then(|e| e.code()),
        });
    }
    obs.logs.push(ProcessLog {
        name: fleet::CLI_LOG.into(),
        text: fs::read_to_string(env.dir.join(fleet::CLI_LOG)).unwrap_or_default(),
        exit_code: None,
    });
    Ok(obs)
}

/// Prints how many workers exited 0 at the final stop, naming the others.
fn print_final_stop(final_ends: &[(String, Option<fleet::Ended>)], clean_stops: usize) {
    println!(
        "final stop: {clean_stops} of {} workers exited 0{}",
        final_ends.len(),
        final_ends
            .iter()
            .filter(|(_, e)| *e != Some(fleet::Ended::Code(0)))
            .map(|(n, e)| format!(
                "; {n}: {}",
                e.map_or("killed after the grace time".into(), |e| e.to_string())
            ))
            .collect::<String>()
    );
}

/// Stops what is left of the run, then removes the run directory or keeps it.
fn close_run(chaos: Chaos, dir: tempfile::TempDir, remove: bool) -> Result<()> {
    if remove {
        drop(chaos);
        dir.close()?;
    } else {
        drop(chaos);
        let kept = dir.keep();
        println!("run directory kept: {}", kept.display());
    }
    Ok(())
}
