//! The `radar` command line: parsing, settings and dispatch.

mod demo;
mod detect;
mod graph;
mod migrate;
mod monitor;
mod snapshot;
mod status;

use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use figment::providers::Serialized;
use radar::config::{Loaded, Settings};
use serde::Serialize;

use crate::logging;

/// radar: anomaly detection over live MQTT sensor streams, with signed,
/// fenced recovery snapshots in PostgreSQL.
///
/// Settings come from built-in defaults, then config/default.toml (or
/// RADAR_CONFIG_FILE), then RADAR_* environment variables and DATABASE_URL,
/// then the flags below. In development a .env file is read first.
#[derive(Debug, Parser)]
#[command(name = "radar", version, propagate_version = true)]
pub struct Cli {
    /// PostgreSQL URL; overrides DATABASE_URL.
    #[arg(long, global = true, value_name = "URL")]
    database_url: Option<String>,

    /// Log format: text for people, json for machines; overrides RADAR_LOG_FORMAT.
    #[arg(long, global = true, value_name = "FORMAT", value_parser = ["text", "json"])]
    log_format: Option<String>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Apply pending database migrations (refuses a database migrated by a newer radar).
    Migrate,
    /// Create, list, show, retire and delete monitors.
    #[command(subcommand)]
    Monitor(monitor::MonitorCommand),
    /// Inspect a monitor's signed recovery snapshot.
    #[command(subcommand)]
    Snapshot(snapshot::SnapshotCommand),
    /// Show every monitor's persisted operational status.
    Status(status::StatusArgs),
    /// Run the monitors of this worker's shard (or one monitor) until SIGTERM/SIGINT.
    Worker(crate::worker::WorkerArgs),
    /// Run a simulated plant through a real worker, with an embedded MQTT broker.
    Demo(demo::DemoArgs),
    /// Replay a CSV file through a monitor's alignment and detector (backtest).
    Detect(detect::DetectArgs),
    /// Publish graph revisions; activate, stop, list and inspect graph runs.
    #[command(subcommand)]
    Graph(graph::GraphCommand),
}

/// Flags that override settings, in the settings' own field names.
#[derive(Debug, Serialize)]
struct FlagOverrides {
    #[serde(skip_serializing_if = "Option::is_none")]
    database_url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    log_format: Option<String>,
}

impl Cli {
    /// Runs the chosen command and turns its outcome into an exit status.
    pub fn run(self) -> ExitCode {
        let loaded = match self.settings() {
            Ok(loaded) => loaded,
            Err(e) => {
                eprintln!("radar: {e:#}");
                return ExitCode::FAILURE;
            }
        };
        match self.command {
            // The demo's own output narrates (alarms, states, checkpoint
            // failures), so logs keep only other warnings. rumqttd logs a
            // client's ordinary disconnect as an error; a real broker
            // failure reaches the demo as a connection or publish error.
            Command::Demo(_) => logging::init_with(
                loaded.settings.log_format,
                "warn",
                &["rumqttd=off", "radar::telemetry::events=error"],
            ),
            _ => logging::init(loaded.settings.log_format),
        }
        for name in &loaded.unknown_variables {
            tracing::warn!(variable = %name, "Ignoring unknown variable; check its spelling against the README");
        }
        match self.dispatch(loaded.settings) {
            Ok(code) => code,
            Err(e) => {
                eprintln!("radar: {e:#}");
                ExitCode::FAILURE
            }
        }
    }

    fn settings(&self) -> anyhow::Result<Loaded> {
        let flags = FlagOverrides {
            database_url: self.database_url.clone(),
            log_format: self.log_format.clone(),
        };
        let vars: Vec<(String, String)> = std::env::vars().collect();
        Settings::load(&vars, Serialized::defaults(flags)).context("loading settings")
    }

    fn dispatch(self, settings: Settings) -> anyhow::Result<ExitCode> {
        if !matches!(self.command, Command::Worker(_) | Command::Demo(_)) {
            restore_default_sigpipe();
        }
        let command = match self.command {
            // The worker and the demo run their own actor system.
            Command::Worker(args) => return crate::worker::run(args, settings),
            Command::Demo(args) => return demo::run(args, settings),
            // Offline: no database, no broker.
            Command::Detect(args) => return detect::run(args).map(|()| ExitCode::SUCCESS),
            other => other,
        };
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .context("starting the async runtime")?;
        match command {
            Command::Migrate => runtime.block_on(migrate::run(&settings)),
            Command::Monitor(command) => runtime.block_on(monitor::run(command, &settings)),
            Command::Snapshot(command) => runtime.block_on(snapshot::run(command, &settings)),
            Command::Status(args) => runtime.block_on(status::run(args, &settings)),
            Command::Graph(command) => runtime.block_on(graph::run(command, &settings)),
            Command::Worker(_) | Command::Demo(_) | Command::Detect(_) => {
                unreachable!("handled above")
            }
        }
    }
}

/// Lets a short-lived command end quietly when its output pipe closes
/// (`radar status | head`), as Unix tools do, instead of panicking on the
/// failed write. Not for the worker: there a closed socket must be an
/// error to handle, never a signal that kills the process.
fn restore_default_sigpipe() {
    // SAFETY: called once, before any thread of this process writes to a
    // pipe; it only changes the disposition of SIGPIPE back to the default.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}
