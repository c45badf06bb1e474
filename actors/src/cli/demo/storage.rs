//! Where the demo keeps its monitors: the demo database on the PostgreSQL
//! server of `DATABASE_URL` when one answers, else only in memory with
//! database writes disabled.

use std::sync::Arc;

use anyhow::Context as _;
use radar::{
    config::{MonitorConfig, Settings},
    store::{self, CheckpointStore, MonitorRow, Services},
};
use radar_demo::{
    DemoError, MonitorOrigin, demo_monitors, in_memory_monitors, prepare_database, redact,
};

use crate::worker::{MonitorSource, POOL_SIZE};

/// How the demo runs.
#[derive(Debug, Clone)]
pub enum Mode {
    Postgres {
        database: String,
        /// The demo database, as a message may show it.
        shown_url: String,
    },
    /// Database writes disabled; the reason is shown once.
    Disabled { reason: String },
}

pub struct Storage {
    pub mode: Mode,
    /// `None` with database writes disabled.
    pub store: Option<CheckpointStore>,
    pub source: MonitorSource,
    /// One per config, in order, and how it came to be (`None` in memory).
    pub monitors: Vec<(MonitorRow, Option<MonitorOrigin>)>,
    /// What happened to the database, for one line of output.
    pub notes: Vec<String>,
}

impl Storage {
    /// The one line that says how the demo runs.
    pub fn mode_line(&self) -> String {
        match &self.mode {
            Mode::Postgres { shown_url, .. } => format!(
                "PostgreSQL: {shown_url}. Snapshots are kept: the next run restores them and reports the gap."
            ),
            Mode::Disabled { reason } => format!(
                "Database writes disabled: {reason}. No snapshot is read or written; every monitor starts fresh."
            ),
        }
    }
}

/// Prepares the demo database and its monitors, or the in-memory monitors
/// when PostgreSQL is not reachable (or writes are disabled).
pub async fn prepare(
    settings: &Settings,
    database: &str,
    fresh: bool,
    configs: &[MonitorConfig],
    worker_id: &str,
) -> anyhow::Result<Storage> {
    let disabled = |reason: String| -> anyhow::Result<Storage> {
        let rows = in_memory_monitors(configs)?;
        Ok(Storage {
            mode: Mode::Disabled { reason },
            store: None,
            source: MonitorSource::Fixed(Arc::from(rows.clone())),
            monitors: rows.into_iter().map(|row| (row, None)).collect(),
            notes: Vec::new(),
        })
    };
    if !settings.db_write_enabled {
        return disabled("RADAR_DB_WRITE_ENABLED=false".to_string());
    }
    let prepared = match prepare_database(&settings.database_url, database).await {
        Ok(prepared) => prepared,
        Err(DemoError::Unreachable(reason)) => {
            return disabled(format!(
                "PostgreSQL is not reachable at {reason}; set DATABASE_URL to use one"
            ));
        }
        Err(e) => return Err(e.into()),
    };
    let mut notes = Vec::new();
    if prepared.created {
        notes.push(format!("Created database {}.", prepared.name));
    }
    if !prepared.migrated.is_empty() {
        notes.push(format!(
            "Applied {} migration(s) to {}.",
            prepared.migrated.len(),
            prepared.name
        ));
    }
    let pool = store::connect(&prepared.url, POOL_SIZE, settings.checkpoint_timeout())
        .await
        .with_context(|| format!("connecting to the demo database {}", prepared.name))?;
    let services = Services::new(pool.clone());
    let monitors = demo_monitors(&services, configs, fresh).await?;
    for monitor in &monitors {
        if let MonitorOrigin::Replaced(reason) = monitor.origin {
            notes.push(format!(
                "Deleted the earlier monitor {} with its snapshot ({}); it calibrates afresh.",
                monitor.row.name,
                reason.as_str()
            ));
        }
    }
    Ok(Storage {
        mode: Mode::Postgres {
            database: prepared.name.clone(),
            shown_url: redact(&prepared.url),
        },
        store: Some(CheckpointStore::new(pool, worker_id.to_string())),
        source: MonitorSource::Database(services),
        monitors: monitors
            .into_iter()
            .map(|m| (m.row, Some(m.origin)))
            .collect(),
        notes,
    })
}
