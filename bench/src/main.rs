//! `radar-bench`: measures radar against its ceiling on the same machine,
//! each scenario in one run, and prints Markdown tables for BENCHMARKS.md.
//! Progress goes to stderr, the tables to stdout.

use std::{path::PathBuf, process::ExitCode, time::Duration};

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use radar_bench::{
    checkpoint::{self, CheckpointParams, CheckpointResult},
    idle::{self, IdleParams, IdleReport},
    ingest::{self, Consumer, Env, IngestParams, IngestReport},
    recovery::{self, RecoveryReport},
    stats, system,
};
use rumqttc::QoS;

#[derive(Debug, Parser)]
#[command(
    version,
    about = "Benchmarks radar against its physical limits on this machine"
)]
struct Cli {
    /// The release `radar` binary (default: beside this one).
    #[arg(long, env = "RADAR_BENCH_RADAR_BIN")]
    radar_bin: Option<PathBuf>,
    /// PostgreSQL server, without a database name; each scenario creates
    /// and drops its own `radar_bench_*` database.
    #[arg(
        long,
        env = "RADAR_BENCH_DATABASE_SERVER",
        default_value = "postgres://postgres@127.0.0.1:5432"
    )]
    database_server: String,
    /// Where worker logs go (default: a temporary directory).
    #[arg(long)]
    log_dir: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// End-to-end ingest, radar worker against bare rumqttc subscribers.
    Ingest(IngestArgs),
    /// Checkpoint commits, the product's store against a bare conditional UPDATE.
    Checkpoint(CheckpointArgs),
    /// Start-to-ready time and idle memory of a worker whose monitors all have snapshots.
    Recovery(RecoveryArgs),
    /// Idle cost: PostgreSQL commits/s and rows/s, worker CPU share, and
    /// the size and CPU of a /metrics scrape, with idle pump monitors.
    Idle(IdleArgs),
    /// The ceiling's consumer process (started by `ingest`).
    #[command(hide = true)]
    BareSubscribe {
        #[arg(long)]
        port: u16,
        #[arg(long)]
        readings: usize,
        /// A file with one topic prefix per line.
        #[arg(long)]
        prefixes: PathBuf,
    },
    /// Every scenario in turn (recovery reuses the largest ingest database).
    All {
        #[command(flatten)]
        ingest: IngestArgs,
        #[command(flatten)]
        checkpoint: CheckpointArgs,
        #[command(flatten)]
        recovery: RecoveryArgs,
    },
}

#[derive(Debug, clap::Args)]
struct IngestArgs {
    /// Monitor counts (K) to measure, one worker process each.
    #[arg(long, value_delimiter = ',', default_value = "1,100,1000")]
    monitors: Vec<usize>,
    /// Messages per measured run, over all monitors.
    #[arg(long, default_value_t = 300_000)]
    messages: u64,
    /// Readings per monitor (messages per frame).
    #[arg(long, default_value_t = 2)]
    readings: usize,
    /// Measured runs of each consumer per K.
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// How often consumed counts are read, in milliseconds.
    #[arg(long, default_value_t = 100)]
    poll_ms: u64,
    /// QoS of the publisher (the worker subscribes at QoS 1).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(0..=1))]
    qos: u8,
}

#[derive(Debug, clap::Args)]
struct CheckpointArgs {
    /// Snapshot payload sizes in bytes.
    #[arg(long, value_delimiter = ',', default_value = "4096,65536")]
    sizes: Vec<usize>,
    /// Monitors committing side by side.
    #[arg(long, value_delimiter = ',', default_value = "1,8")]
    concurrency: Vec<usize>,
    /// Rounds of one product block and one bare block.
    #[arg(long, default_value_t = 6)]
    rounds: usize,
    /// Commits per monitor per block.
    #[arg(long, default_value_t = 200)]
    block: usize,
}

#[derive(Debug, clap::Args)]
struct IdleArgs {
    /// Monitor counts to measure, one worker process each.
    #[arg(
        long = "idle-monitors",
        value_delimiter = ',',
        default_value = "1000,10000"
    )]
    idle_monitors: Vec<usize>,
    /// Measured window, in seconds.
    #[arg(long, default_value_t = 30)]
    window_secs: u64,
    /// Time from ready to the start of the window, in seconds. The pump
    /// monitors' readings fall silent 30 s after subscribing (`no_data`,
    /// `silence_ms` = `max_age_ms`) and that gap's checkpoint follows at
    /// the 30 s maximum interval: after 75 s every monitor is idle for good.
    #[arg(long, default_value_t = 75)]
    settle_secs: u64,
    /// /metrics scrapes measured together.
    #[arg(long, default_value_t = 10)]
    scrapes: usize,
}

#[derive(Debug, clap::Args)]
struct RecoveryArgs {
    /// Monitors with snapshots.
    #[arg(long = "recovery-monitors", default_value_t = 1000)]
    recovery_monitors: usize,
    /// Worker starts.
    #[arg(long = "recovery-reps", default_value_t = 3)]
    recovery_reps: usize,
    /// Idle time before reading the resident set, in seconds.
    #[arg(long, default_value_t = 10)]
    idle_secs: u64,
}

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
        let text = std::fs::read_to_string(prefixes)
            .with_context(|| format!("reading {}", prefixes.display()))?;
        let prefixes: Vec<String> = text.lines().map(str::to_string).collect();
        return radar_bench::mqtt::serve_bare(*port, &prefixes, *readings).await;
    }
    let radar_bin = match cli.radar_bin {
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
        Command::Recovery(args) => {
            eprintln!(
                "preparing {} monitors with snapshots",
                args.recovery_monitors
            );
            let db = ingest::prepare_snapshots(&env, args.recovery_monitors, 2).await?;
            let report = recovery_run(&env, &db, &args).await;
            db.drop_db().await?;
            print_recovery(&report?, None);
        }
        Command::Idle(args) => {
            for &monitors in &args.idle_monitors {
                let report = idle::run(
                    &env,
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
        }
        // Served before the machine report, above.
        Command::BareSubscribe { .. } => {}
        Command::All {
            ingest: ingest_args,
            checkpoint: checkpoint_args,
            recovery: recovery_args,
        } => {
            let (reports, db) = ingest_all(&env, &ingest_args, true).await?;
            for report in &reports {
                print_ingest(report);
            }
            print_checkpoint(&checkpoint::run(&env, &params(&checkpoint_args)).await?);
            let largest = reports.iter().max_by_key(|r| r.params.monitors);
            let recovery = match (db, largest) {
                (Some(db), Some(largest))
                    if largest.params.monitors == recovery_args.recovery_monitors =>
                {
                    let report = recovery_run(&env, &db, &recovery_args).await;
                    db.drop_db().await?;
                    report?
                }
                (db, _) => {
                    if let Some(db) = db {
                        db.drop_db().await?;
                    }
                    let db =
                        ingest::prepare_snapshots(&env, recovery_args.recovery_monitors, 2).await?;
                    let report = recovery_run(&env, &db, &recovery_args).await;
                    db.drop_db().await?;
                    report?
                }
            };
            print_recovery(&recovery, largest);
        }
    }
    let _ = std::fs::remove_dir_all(&scratch);
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

fn print_machine(env: &Env) {
    let m = system::Machine::read();
    println!("## Machine\n");
    println!(
        "{} cores, {}, {} MiB RAM, Linux {}; load average at start {}; radar binary {}\n",
        m.cores,
        m.cpu_model,
        m.mem_total_mib,
        m.kernel,
        system::load_average(),
        env.radar_bin.display()
    );
}

fn fmt_ratios(ratios: &[f64]) -> String {
    ratios
        .iter()
        .map(|r| format!("{:.0}%", r * 100.0))
        .collect::<Vec<_>>()
        .join(", ")
}

fn print_ingest(r: &IngestReport) {
    let p = &r.params;
    println!(
        "## Ingest, K = {} ({} readings, {} frames per monitor per run, {} messages per run, QoS {})\n",
        p.monitors,
        p.readings,
        p.frames_per_monitor(),
        p.run_messages(),
        if p.qos == QoS::AtMostOnce { 0 } else { 1 }
    );
    println!(
        "| rep | consumer | mode | observations/s | frames/s | run s | publish s | consumer CPU s | rejected | flagged | checkpoints | load 1m |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for run in &r.runs {
        println!(
            "| {} | {} | {} | {}{} | {} | {:.2} | {:.2} | {} | {} | {} | {} | {:.2} |",
            run.rep + 1,
            run.consumer.label(),
            if run.backlog { "backlog" } else { "live" },
            stats::rate(run.observations_per_s()),
            if run.complete { "" } else { " (incomplete)" },
            stats::rate(run.frames_per_s()),
            run.elapsed.as_secs_f64(),
            run.publish_elapsed.as_secs_f64(),
            run.consumer_cpu
                .map_or("-".into(), |c| format!("{:.2}", c.as_secs_f64())),
            run.rejected,
            run.flagged,
            run.checkpoints,
            run.load_1m,
        );
    }
    println!();
    for backlog in [false, true] {
        let ratios = r.ratios(backlog);
        println!(
            "{}: radar worker {} obs/s, bare rumqttc {} obs/s (medians); ratio per repetition {} (median {:.0}%).",
            if backlog { "Backlog drain" } else { "Live" },
            stats::rate(
                r.median_rate(Consumer::Product, backlog)
                    .unwrap_or(f64::NAN)
            ),
            stats::rate(r.median_rate(Consumer::Bare, backlog).unwrap_or(f64::NAN)),
            fmt_ratios(&ratios),
            stats::median(&ratios).unwrap_or(f64::NAN) * 100.0
        );
    }
    println!(
        "Counts read every {} ms (bare: {} ms{}). Worker start to ready: {} s. One /metrics scrape: {} ms.\n",
        r.interval.as_millis(),
        r.interval.min(p.poll).as_millis(),
        if r.interval > ingest::QUIESCENCE_ABOVE {
            "; radar worker: end of its busy period from /proc, confirmed by one scrape"
        } else {
            ""
        },
        r.startups
            .iter()
            .map(|d| format!("{:.2}", d.as_secs_f64()))
            .collect::<Vec<_>>()
            .join(", "),
        r.scrape.map_or("-".into(), stats::ms)
    );
}

fn print_checkpoint(results: &[CheckpointResult]) {
    println!("## Checkpoint commits\n");
    println!(
        "| payload | monitors | radar commits/s | p50 ms | p99 ms | bare UPDATE commits/s | p50 ms | p99 ms | ratio per round (median) | load 1m |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for r in results {
        let (mut product, mut bare) = (r.product.clone(), r.bare.clone());
        println!(
            "| {} B | {} | {} | {} | {} | {} | {} | {} | {} ({:.0}%) | {:.2} |",
            r.payload_bytes,
            r.concurrency,
            stats::rate(product.rate()),
            stats::ms(product.quantile(0.5)),
            stats::ms(product.quantile(0.99)),
            stats::rate(bare.rate()),
            stats::ms(bare.quantile(0.5)),
            stats::ms(bare.quantile(0.99)),
            fmt_ratios(&r.round_ratios),
            stats::median(&r.round_ratios).unwrap_or(f64::NAN) * 100.0,
            r.load_1m
        );
    }
    println!();
}

fn print_idle(r: &IdleReport) {
    let p = &r.params;
    println!(
        "## Idle worker, {} pump monitors, no data ({} s window after {} s settling)\n",
        p.monitors,
        p.window.as_secs(),
        p.settle.as_secs()
    );
    println!("| figure | measured | ceiling |");
    println!("| --- | --- | --- |");
    println!(
        "| ready after start | {:.1} s | - |",
        r.ready_after.as_secs_f64()
    );
    println!(
        "| PostgreSQL commits/s (worker's database) | {:.2} | 2 |",
        r.commits_per_s
    );
    println!(
        "| rows written/s (inserted + updated + deleted) | {:.0} | - |",
        r.rows_per_s
    );
    println!(
        "| worker CPU | {:.2}% of a core ({:.2}% per 1000 monitors) | 1% per 1000 monitors |",
        r.cpu_share * 100.0,
        r.cpu_share * 100.0 * 1000.0 / p.monitors.max(1) as f64
    );
    println!(
        "| worker RSS | {:.1} MiB ({:.1} KiB per monitor) | 100 KiB per idle monitor (at 10,000) |",
        r.rss_kib as f64 / 1024.0,
        r.rss_kib as f64 / p.monitors.max(1) as f64
    );
    println!(
        "| worker open descriptors / threads | {} / {} (open-file limit {}) | - |",
        r.holdings.fds,
        r.holdings.threads,
        r.holdings
            .fd_limit
            .map_or_else(|| "unknown".to_string(), |l| l.to_string())
    );
    println!(
        "| one /metrics scrape: size | {:.2} MB, {} lines | 1 MB (at 1000 monitors) |",
        r.scrape.bytes as f64 / 1e6,
        r.scrape.lines
    );
    println!(
        "| one /metrics scrape: worker CPU above idle (mean of {}) | {:.1} ms (wall {:.1} ms) | 20 ms (at 1000 monitors) |",
        p.scrapes,
        r.scrape.cpu.as_secs_f64() * 1000.0,
        r.scrape.wall.as_secs_f64() * 1000.0
    );
    println!(
        "\nRows written per second by table: {}. Load average before the window {}, after it {}.\n",
        r.by_table
            .iter()
            .map(|(t, rate)| format!("{t} {rate:.1}"))
            .collect::<Vec<_>>()
            .join(", "),
        r.load_before,
        r.load_after
    );
}

fn print_recovery(r: &RecoveryReport, ingest: Option<&IngestReport>) {
    println!(
        "## Recovery and memory, {} monitors with snapshots\n",
        r.monitors
    );
    println!(
        "| start | ready after s | restored frames | idle RSS MiB | empty worker RSS MiB | load 1m |"
    );
    println!("| --- | --- | --- | --- | --- | --- |");
    for i in 0..r.startups.len() {
        println!(
            "| {} | {:.2} | {} | {:.1} | {:.1} | {:.2} |",
            i + 1,
            r.startups[i].as_secs_f64(),
            r.restored_processed[i],
            r.idle_rss_kib[i] as f64 / 1024.0,
            r.baseline_rss_kib
                .get(i)
                .map_or(f64::NAN, |&k| k as f64 / 1024.0),
            r.load_1m[i]
        );
    }
    if let Some(per) = r.idle_kib_per_monitor() {
        println!(
            "\nIdle RSS per monitor (median idle minus median empty, over {}): {:.1} KiB.",
            r.monitors, per
        );
    }
    if let Some(ingest) = ingest {
        let peak = ingest.runs.iter().filter_map(|run| run.peak_rss_kib).max();
        let base = stats::median(
            &r.baseline_rss_kib
                .iter()
                .map(|&k| k as f64)
                .collect::<Vec<_>>(),
        );
        if let (Some(peak), Some(base)) = (peak, base) {
            println!(
                "Under load (peak RSS during the K = {} ingest runs): {:.1} MiB, {:.1} KiB per monitor above the empty worker.",
                ingest.params.monitors,
                peak as f64 / 1024.0,
                (peak as f64 - base) / ingest.params.monitors as f64
            );
        }
    }
    println!();
}
