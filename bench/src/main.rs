//! `radar-bench`: measures radar against its ceiling on the same machine,
//! each scenario in one run, and prints Markdown tables for BENCHMARKS.md.
//! Progress goes to stderr, the tables to stdout.
//!
//! The binary's own modules: `cli` (the flags) and `tables` (the printed
//! tables); the scenarios themselves are in the `radar_bench` library.

mod cli;
mod tables;

use std::{
    path::{Path, PathBuf},
    process::ExitCode,
    time::Duration,
};

use anyhow::{Context, Result};
use clap::Parser;
use radar_bench::{
    checkpoint::{self, CheckpointParams},
    idle::{self, IdleParams},
    ingest::{self, Env, IngestParams, IngestReport},
    recovery::{self, RecoveryReport},
};
use rumqttc::QoS;

use self::cli::{CheckpointArgs, Cli, Command, IdleArgs, IngestArgs, RecoveryArgs};
use self::tables::{print_checkpoint, print_idle, print_ingest, print_machine, print_recovery};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("radar-bench: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("radar-bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> Result<()> {
    if let Command::BareSubscribe {
        port,
        readings,
        prefixes,
    } = &cli.command
    {
        return bare_subscribe(*port, *readings, prefixes).await;
    }
    let radar_bin = radar_bin(cli.radar_bin)?;
    let scratch = tempdir()?;
    let env = Env {
        radar_bin,
        bench_bin: std::env::current_exe()?,
        db_server: cli.database_server,
        log_dir: cli.log_dir.unwrap_or_else(|| scratch.clone()),
    };
    std::fs::create_dir_all(&env.log_dir)?;
    print_machine(&env);
    match cli.command {
        Command::Ingest(args) => {
            for report in ingest_all(&env, &args, false).await?.0 {
                print_ingest(&report);
            }
        }
        Command::Checkpoint(args) => {
            print_checkpoint(&checkpoint::run(&env, &params(&args)).await?)
        }
        Command::Recovery(args) => recovery_alone(&env, &args).await?,
        Command::Idle(args) => idle_all(&env, &args).await?,
        // Served before the machine report, above.
        Command::BareSubscribe { .. } => {}
        Command::All {
            ingest: ingest_args,
            checkpoint: checkpoint_args,
            recovery: recovery_args,
        } => all(&env, &ingest_args, &checkpoint_args, &recovery_args).await?,
    }
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(())
}

/// Serves as the ceiling's consumer process that `ingest` starts.
async fn bare_subscribe(port: u16, readings: usize, prefixes: &Path) -> Result<()> {
    let text = std::fs::read_to_string(prefixes)
        .with_context(|| format!("reading {}", prefixes.display()))?;
    let prefixes: Vec<String> = text.lines().map(str::to_string).collect();
    radar_bench::mqtt::serve_bare(port, &prefixes, readings).await
}

/// The `radar` binary to drive: the flag's, or the one beside this binary.
fn radar_bin(flag: Option<PathBuf>) -> Result<PathBuf> {
    let radar_bin = match flag {
        Some(path) => path,
        None => std::env::current_exe()?
            .parent()
            .context("this binary has no directory")?
            .join("radar"),
    };
    anyhow::ensure!(
        radar_bin.is_file(),
        "no radar binary at {}; build it with `cargo build --release -p radar-actors` or pass --radar-bin",
        radar_bin.display()
    );
    Ok(radar_bin)
}

/// The recovery scenario alone, on a database of snapshots it prepares and drops.
async fn recovery_alone(env: &Env, args: &RecoveryArgs) -> Result<()> {
    if let Some(name) = &args.reuse_db {
        let db = radar_bench::db::BenchDb::existing(&env.db_server, name, args.recovery_monitors)
            .await?;
        eprintln!(
            "reusing database {name} ({} snapshots)",
            args.recovery_monitors
        );
        print_recovery(&recovery_run(env, &db, args).await?, None);
        return Ok(());
    }
    eprintln!(
        "preparing {} monitors with snapshots",
        args.recovery_monitors
    );
    let db = ingest::prepare_snapshots(env, args.recovery_monitors, 2).await?;
    let report = recovery_run(env, &db, args).await;
    done_with(db, args).await?;
    print_recovery(&report?, None);
    Ok(())
}

/// Drops the recovery scenario's database of snapshots, or keeps it (and
/// names it) with `--keep-db`.
async fn done_with(db: radar_bench::db::BenchDb, args: &RecoveryArgs) -> Result<()> {
    if args.keep_db {
        eprintln!(
            "kept database {} ({})",
            db.name,
            radar::config::redact_url(&db.url)
        );
        return Ok(());
    }
    db.drop_db().await
}

/// The idle scenario for every K, one table each.
async fn idle_all(env: &Env, args: &IdleArgs) -> Result<()> {
    for &monitors in &args.idle_monitors {
        let report = idle::run(
            env,
            &IdleParams {
                monitors,
                settle: Duration::from_secs(args.settle_secs),
                window: Duration::from_secs(args.window_secs),
                scrapes: args.scrapes,
            },
        )
        .await?;
        print_idle(&report);
    }
    Ok(())
}

/// Every scenario in turn; recovery reuses the largest ingest database when its K matches.
async fn all(
    env: &Env,
    ingest_args: &IngestArgs,
    checkpoint_args: &CheckpointArgs,
    recovery_args: &RecoveryArgs,
) -> Result<()> {
    let (reports, db) = ingest_all(env, ingest_args, true).await?;
    for report in &reports {
        print_ingest(report);
    }
    print_checkpoint(&checkpoint::run(env, &params(checkpoint_args)).await?);
    let largest = reports.iter().max_by_key(|r| r.params.monitors);
    let recovery = match (db, largest) {
        (Some(db), Some(largest)) if largest.params.monitors == recovery_args.recovery_monitors => {
            let report = recovery_run(env, &db, recovery_args).await;
            done_with(db, recovery_args).await?;
            report?
        }
        (db, _) => {
            if let Some(db) = db {
                db.drop_db().await?;
            }
            let db = ingest::prepare_snapshots(env, recovery_args.recovery_monitors, 2).await?;
            let report = recovery_run(env, &db, recovery_args).await;
            done_with(db, recovery_args).await?;
            report?
        }
    };
    print_recovery(&recovery, largest);
    Ok(())
}

/// Runs ingest for every K; keeps the largest K's database when asked.
async fn ingest_all(
    env: &Env,
    args: &IngestArgs,
    keep_largest: bool,
) -> Result<(Vec<IngestReport>, Option<radar_bench::db::BenchDb>)> {
    let largest = args.monitors.iter().copied().max().unwrap_or(0);
    let mut reports = Vec::new();
    let mut kept = None;
    for &monitors in &args.monitors {
        eprintln!("ingest: K = {monitors}");
        let p = IngestParams {
            monitors,
            readings: args.readings,
            messages: args.messages,
            reps: args.reps,
            poll: Duration::from_millis(args.poll_ms),
            qos: if args.qos == 0 {
                QoS::AtMostOnce
            } else {
                QoS::AtLeastOnce
            },
        };
        let (report, db) = ingest::run(env, &p).await?;
        if keep_largest && monitors == largest && kept.is_none() {
            kept = Some(db);
        } else {
            db.drop_db().await?;
        }
        reports.push(report);
    }
    Ok((reports, kept))
}

async fn recovery_run(
    env: &Env,
    db: &radar_bench::db::BenchDb,
    args: &RecoveryArgs,
) -> Result<RecoveryReport> {
    eprintln!("recovery: {} monitors", args.recovery_monitors);
    recovery::run(
        env,
        db,
        args.recovery_monitors,
        args.recovery_reps,
        Duration::from_secs(args.idle_secs),
    )
    .await
}

fn params(args: &CheckpointArgs) -> CheckpointParams {
    CheckpointParams {
        sizes: args.sizes.clone(),
        concurrency: args.concurrency.clone(),
        rounds: args.rounds,
        block: args.block,
    }
}

fn tempdir() -> Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("radar-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}
