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
    /// Per required reading, the age of its newest accepted observation on
    /// the database's clock; `null` before the first one.
    reading_ages_seconds: std::collections::BTreeMap<String, Option<i64>>,
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
                reading_ages_seconds: reading_ages(row, now),
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

fn reading_ages(
    row: &StatusRow,
    now: DateTime<Utc>,
) -> std::collections::BTreeMap<String, Option<i64>> {
    let Some(seen) = row.reading_seen_at.as_ref().and_then(|v| v.as_object()) else {
        return Default::default();
    };
    seen.iter()
        .map(|(reading, at)| {
            let at = at.as_str().and_then(|t| t.parse::<DateTime<Utc>>().ok());
            (reading.clone(), age(at, now))
        })
        .collect()
}

/// The most silent reading: `pressure 3s`, `flow never`, or `-` without
/// a report.
fn oldest_reading(ages: &std::collections::BTreeMap<String, Option<i64>>) -> String {
    let never = ages.iter().find(|(_, age)| age.is_none());
    if let Some((reading, _)) = never {
        return format!("{reading} never");
    }
    ages.iter()
        .filter_map(|(reading, age)| age.map(|a| (a, reading)))
        .max()
        .map_or("-".to_string(), |(a, reading)| {
            format!("{reading} {}", seconds(Some(a)))
        })
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
        "{:<20} {:<15} {:<12} {:<5} {:>10} {:>6} {:>4} {:<16} {:<20} {:<10} {:<9} {:>9}  LAST ERROR",
        "MONITOR",
        "STATE",
        "PHASE",
        "CONN",
        "PROCESSED",
        "CKPT",
        "GAPS",
        "READING AGE",
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
            "{:<20} {:<15} {:<12} {:<5} {:>10} {:>6} {:>4} {:<16} {:<20} {:<10} {:<9} {:>9}  {}",
            truncate(&row.name, 20),
            truncate(&row.state, 15),
            row.phase.as_deref().unwrap_or("-"),
            if row.connected { "yes" } else { "no" },
            row.processed_count,
            seconds(v.last_checkpoint_age_seconds),
            v.coverage_gaps,
            truncate(&oldest_reading(&v.reading_ages_seconds), 16),
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
