//! `radar status`: every monitor's persisted operational status.

use std::process::ExitCode;

use chrono::{DateTime, Utc};
use radar::{
    config::Settings,
    store::{self, StatusRow},
};
use serde::Serialize;

/// A heartbeat older than this is flagged: the worker that wrote it is
/// probably gone (workers report every few seconds).
pub const STALE_HEARTBEAT_SECONDS: i64 = radar::store::fleet::WORKER_LIVE_FOR.as_secs() as i64;

#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// Print a JSON array (one object per monitor) instead of a table.
    #[arg(long)]
    json: bool,
    /// Include retired monitors.
    #[arg(long)]
    all: bool,
}

#[derive(Serialize)]
struct StatusJson<'a> {
    #[serde(flatten)]
    row: &'a StatusRow,
    heartbeat_age_seconds: Option<i64>,
    last_checkpoint_age_seconds: Option<i64>,
    heartbeat_stale: bool,
    coverage_gaps: usize,
}

pub async fn run(args: StatusArgs, settings: &Settings) -> anyhow::Result<ExitCode> {
    store::check_schema(&settings.database_url).await?;
    let pool = store::connect(&settings.database_url, 1, settings.checkpoint_timeout()).await?;
    let rows = store::list_status(&pool, args.all).await?;
    // Ages on the clock the rows were stamped with, not this machine's.
    let now = store::read_clock(&pool).await?.database_now;
    let views: Vec<StatusJson> = rows
        .iter()
        .map(|row| {
            let heartbeat_age = age(row.heartbeat_at, now);
            StatusJson {
                row,
                heartbeat_age_seconds: heartbeat_age,
                last_checkpoint_age_seconds: age(row.last_checkpoint_at, now),
                heartbeat_stale: heartbeat_age.is_some_and(|a| a > STALE_HEARTBEAT_SECONDS),
                coverage_gaps: gap_count(row),
            }
        })
        .collect();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&views)?);
    } else {
        print_table(&views);
    }
    Ok(ExitCode::SUCCESS)
}

fn age(at: Option<DateTime<Utc>>, now: DateTime<Utc>) -> Option<i64> {
    at.map(|t| (now - t).num_seconds())
}

fn gap_count(row: &StatusRow) -> usize {
    row.coverage
        .as_ref()
        .and_then(|c| c.get("gaps"))
        .and_then(|g| g.as_array())
        .map_or(0, Vec::len)
}

fn seconds(age: Option<i64>) -> String {
    match age {
        None => "-".into(),
        Some(s) if s < 120 => format!("{s}s"),
        Some(s) if s < 7200 => format!("{}m", s / 60),
        Some(s) => format!("{}h", s / 3600),
    }
}

fn print_table(views: &[StatusJson]) {
    if views.is_empty() {
        println!("No monitors. Create one with: radar monitor create --config FILE");
        return;
    }
    println!(
        "{:<20} {:<15} {:<12} {:<5} {:>10} {:>6} {:>4} {:<20} {:<10} {:<9} {:>9}  LAST ERROR",
        "MONITOR",
        "STATE",
        "PHASE",
        "CONN",
        "PROCESSED",
        "CKPT",
        "GAPS",
        "WORKER",
        "TOKEN",
        "OWNERSHIP",
        "HEARTBEAT"
    );
    for v in views {
        let row = v.row;
        let heartbeat = if v.heartbeat_stale {
            format!("{} STALE", seconds(v.heartbeat_age_seconds))
        } else {
            seconds(v.heartbeat_age_seconds)
        };
        println!(
            "{:<20} {:<15} {:<12} {:<5} {:>10} {:>6} {:>4} {:<20} {:<10} {:<9} {:>9}  {}",
            truncate(&row.name, 20),
            truncate(&row.state, 15),
            row.phase.as_deref().unwrap_or("-"),
            if row.connected { "yes" } else { "no" },
            row.processed_count,
            seconds(v.last_checkpoint_age_seconds),
            v.coverage_gaps,
            truncate(row.worker_id.as_deref().unwrap_or("-"), 20),
            row.fencing_token.as_deref().unwrap_or("-"),
            row.ownership.as_deref().unwrap_or("-"),
            heartbeat,
            row.last_error.as_deref().unwrap_or(""),
        );
    }
}

fn truncate(s: &str, width: usize) -> String {
    if s.chars().count() <= width {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(width.saturating_sub(1)).collect();
        t.push('~');
        t
    }
}
