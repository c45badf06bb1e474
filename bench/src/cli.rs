//! The flags of `radar-bench`: one subcommand per scenario (and `all`),
//! with the sizes, repetitions and windows each measures.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    version,
    about = "Benchmarks radar against its physical limits on this machine"
)]
pub(super) struct Cli {
    /// The release `radar` binary (default: beside this one).
    #[arg(long, env = "RADAR_BENCH_RADAR_BIN")]
    pub(super) radar_bin: Option<PathBuf>,
    /// PostgreSQL server, without a database name; each scenario creates
    /// and drops its own `radar_bench_*` database.
    #[arg(
        long,
        env = "RADAR_BENCH_DATABASE_SERVER",
        default_value = "postgres://postgres@127.0.0.1:5432"
    )]
    pub(super) database_server: String,
    /// Where worker logs go (default: a temporary directory).
    #[arg(long)]
    pub(super) log_dir: Option<PathBuf>,
    #[command(subcommand)]
    pub(super) command: Command,
}

#[derive(Debug, Subcommand)]
pub(super) enum Command {
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
pub(super) struct IngestArgs {
    /// Monitor counts (K) to measure, one worker process each.
    #[arg(long, value_delimiter = ',', default_value = "1,100,1000")]
    pub(super) monitors: Vec<usize>,
    /// Messages per measured run, over all monitors.
    #[arg(long, default_value_t = 300_000)]
    pub(super) messages: u64,
    /// Readings per monitor (messages per frame).
    #[arg(long, default_value_t = 2)]
    pub(super) readings: usize,
    /// Measured runs of each consumer per K.
    #[arg(long, default_value_t = 3)]
    pub(super) reps: usize,
    /// How often consumed counts are read, in milliseconds.
    #[arg(long, default_value_t = 100)]
    pub(super) poll_ms: u64,
    /// QoS of the publisher (the worker subscribes at QoS 1).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(0..=1))]
    pub(super) qos: u8,
}

#[derive(Debug, clap::Args)]
pub(super) struct CheckpointArgs {
    /// Snapshot payload sizes in bytes.
    #[arg(long, value_delimiter = ',', default_value = "4096,65536")]
    pub(super) sizes: Vec<usize>,
    /// Monitors committing side by side.
    #[arg(long, value_delimiter = ',', default_value = "1,8")]
    pub(super) concurrency: Vec<usize>,
    /// Rounds of one product block and one bare block.
    #[arg(long, default_value_t = 6)]
    pub(super) rounds: usize,
    /// Commits per monitor per block.
    #[arg(long, default_value_t = 200)]
    pub(super) block: usize,
}

#[derive(Debug, clap::Args)]
pub(super) struct IdleArgs {
    /// Monitor counts to measure, one worker process each.
    #[arg(
        long = "idle-monitors",
        value_delimiter = ',',
        default_value = "1000,10000"
    )]
    pub(super) idle_monitors: Vec<usize>,
    /// Measured window, in seconds.
    #[arg(long, default_value_t = 30)]
    pub(super) window_secs: u64,
    /// Time from ready to the start of the window, in seconds. The pump
    /// monitors' readings fall silent 30 s after subscribing (`no_data`,
    /// `silence_ms` = `max_age_ms`) and that gap's checkpoint follows at
    /// the 30 s maximum interval: after 75 s every monitor is idle for good.
    #[arg(long, default_value_t = 75)]
    pub(super) settle_secs: u64,
    /// /metrics scrapes measured together.
    #[arg(long, default_value_t = 10)]
    pub(super) scrapes: usize,
}

#[derive(Debug, clap::Args)]
pub(super) struct RecoveryArgs {
    /// Monitors with snapshots.
    #[arg(long = "recovery-monitors", default_value_t = 1000)]
    pub(super) recovery_monitors: usize,
    /// Worker starts.
    #[arg(long = "recovery-reps", default_value_t = 3)]
    pub(super) recovery_reps: usize,
    /// Idle time before reading the resident set, in seconds.
    #[arg(long, default_value_t = 10)]
    pub(super) idle_secs: u64,
    /// Keep the database of snapshots `recovery` prepared (its name is
    /// printed), so that starts can be repeated without preparing again.
    #[arg(long, env = "RADAR_BENCH_KEEP_DB", value_parser = clap::builder::FalseyValueParser::new())]
    pub(super) keep_db: bool,
    /// Start on this database, kept by an earlier `--keep-db` run, instead
    /// of preparing one (it is kept again). It must hold exactly
    /// `--recovery-monitors` snapshots.
    #[arg(long, value_name = "NAME")]
    pub(super) reuse_db: Option<String>,
}
