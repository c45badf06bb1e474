//! `radar monitor ...`: the monitors' lifecycle.

use std::{path::PathBuf, process::ExitCode};

use anyhow::Context;
use clap::Subcommand;
use radar::{
    config::{MonitorConfig, Settings},
    store::{self, MonitorRow, Services},
};
use uuid::Uuid;

#[derive(Debug, Subcommand)]
pub enum MonitorCommand {
    /// Validate a monitor file and store it; prints the new monitor's id.
    Create {
        /// The monitor's TOML file (see config/monitors/).
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
    },
    /// Check a monitor file without storing it (no database needed): prints
    /// `valid` or every bad field.
    Validate {
        /// The monitor's TOML file (see config/monitors/).
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
    },
    /// List monitors (active ones unless --all).
    List {
        /// Include retired monitors.
        #[arg(long)]
        all: bool,
        /// Print a JSON array instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Show one monitor's definition.
    Show {
        id: Uuid,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Retire a monitor for good: no worker starts it again. For a fresh
    /// calibration, retire it and create a new monitor.
    Retire { id: Uuid },
    /// Delete a monitor with its snapshot, alarms, evidence and status.
    Delete {
        id: Uuid,
        /// Confirm the deletion; without it nothing is deleted.
        #[arg(long)]
        yes: bool,
    },
}

pub async fn run(command: MonitorCommand, settings: &Settings) -> anyhow::Result<ExitCode> {
    if let MonitorCommand::Validate { config } = &command {
        let text = std::fs::read_to_string(config)
            .with_context(|| format!("reading monitor file {}", config.display()))?;
        MonitorConfig::from_toml(&text)
            .with_context(|| format!("invalid monitor file {}", config.display()))?;
        println!("valid");
        return Ok(ExitCode::SUCCESS);
    }
    if let MonitorCommand::Create { config } = &command {
        // Validate before touching the database, so a bad file fails fast.
        let text = std::fs::read_to_string(config)
            .with_context(|| format!("reading monitor file {}", config.display()))?;
        MonitorConfig::from_toml(&text)
            .with_context(|| format!("invalid monitor file {}", config.display()))?;
    }
    store::check_schema(&settings.database_url).await?;
    let services = Services::new(
        store::connect(&settings.database_url, 2, settings.checkpoint_timeout()).await?,
    );
    match command {
        MonitorCommand::Create { config } => {
            let text = std::fs::read_to_string(&config)?;
            let monitor = MonitorConfig::from_toml(&text)?;
            let id = services.create(&monitor).await?;
            tracing::info!(monitor_id = %id, name = %monitor.name, "Created monitor");
            println!("{id}");
        }
        // Answered above, before any database work.
        MonitorCommand::Validate { .. } => {}
        MonitorCommand::List { all, json } => {
            let rows = services.list(all).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&rows)?);
            } else {
                print_table(&rows);
            }
        }
        MonitorCommand::Show { id, json } => {
            let row = services.get(id).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&row)?);
            } else {
                print_monitor(&row)?;
            }
        }
        MonitorCommand::Retire { id } => {
            let at = services.retire(id).await?;
            tracing::info!(monitor_id = %id, "Retired monitor");
            println!(
                "Retired monitor {id} at {}. It will not be started again.",
                at.to_rfc3339()
            );
        }
        MonitorCommand::Delete { id, yes } => {
            if !yes {
                anyhow::bail!(
                    "not deleting monitor {id}: deletion also removes its snapshot, alarms and \
                     evidence; repeat with --yes to confirm"
                );
            }
            services.delete(id).await?;
            tracing::info!(monitor_id = %id, "Deleted monitor");
            println!("Deleted monitor {id} with its snapshot, alarms, evidence and status.");
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn print_table(rows: &[MonitorRow]) {
    if rows.is_empty() {
        println!("No monitors. Create one with: radar monitor create --config FILE");
        return;
    }
    println!(
        "{:<36}  {:<24}  {:>8}  {:<20}  STATE",
        "ID", "NAME", "READINGS", "CREATED"
    );
    for row in rows {
        let readings = row.config["readings"].as_array().map_or(0, Vec::len);
        let state = match row.retired_at {
            Some(at) => format!("retired {}", at.format("%Y-%m-%d %H:%M")),
            None => "active".to_string(),
        };
        println!(
            "{:<36}  {:<24}  {:>8}  {:<20}  {}",
            row.id,
            row.name,
            readings,
            row.created_at.format("%Y-%m-%d %H:%M:%S"),
            state
        );
    }
}

fn print_monitor(row: &MonitorRow) -> anyhow::Result<()> {
    let config = row.monitor_config()?;
    println!("id:          {}", row.id);
    println!("name:        {}", row.name);
    if let Some(description) = &row.description {
        println!("description: {description}");
    }
    println!("created:     {}", row.created_at.to_rfc3339());
    match row.retired_at {
        Some(at) => println!("retired:     {}", at.to_rfc3339()),
        None => println!("retired:     no"),
    }
    println!(
        "fingerprint: {}",
        row.config_fingerprint
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    );
    println!("readings:");
    for reading in &config.readings {
        let kind = if reading.required {
            "required"
        } else {
            "optional"
        };
        println!("  {:<20} {:<8} {}", reading.name, kind, reading.topic);
    }
    let a = &config.alignment;
    println!(
        "alignment:   freshness {} ms, max age {} ms, future tolerance {} ms, max skew {} ms",
        a.freshness_ms, a.max_age_ms, a.future_tolerance_ms, a.max_skew_ms
    );
    println!("detector:    {}", serde_json::to_string(&config.detector)?);
    Ok(())
}
