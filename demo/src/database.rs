//! The demo's own database and monitors.
//!
//! The demo never touches the database `DATABASE_URL` names: it creates a
//! dedicated one (by default `radar_demo`) on the same server, migrates it,
//! and keeps one monitor per simulated pump there under a stable name, so a
//! second run finds the same monitors and restores their snapshots. Without
//! PostgreSQL the same monitors exist only in memory, with ids derived from
//! their names.

use std::time::Duration;

use chrono::Utc;
use diesel::{QueryableByName, sql_types::BigInt};
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use radar::{
    config::MonitorConfig,
    store::{self, MonitorRow, Services},
};
use sha2::{Digest, Sha256};
use uuid::Uuid;

use super::DemoError;

/// The database the demo creates next to the one `DATABASE_URL` names.
pub const DEFAULT_DEMO_DATABASE: &str = "radar_demo";
/// How long reaching PostgreSQL may take before the demo goes on without it.
const CONNECT_DEADLINE: Duration = Duration::from_secs(5);

/// `url` (a `postgres://` URL) with its database replaced by `name`; the
/// user, host, port and query parameters stay.
pub fn with_database(url: &str, name: &str) -> Result<String, DemoError> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err(DemoError::Database(format!(
            "DATABASE_URL {:?} is not a postgres:// URL",
            redact(url)
        )));
    };
    if !matches!(scheme, "postgres" | "postgresql") {
        return Err(DemoError::Database(format!(
            "DATABASE_URL {:?} is not a postgres:// URL",
            redact(url)
        )));
    }
    let (before_query, query) = match rest.split_once('?') {
        Some((before, query)) => (before, Some(query)),
        None => (rest, None),
    };
    let authority = before_query
        .split_once('/')
        .map_or(before_query, |(a, _)| a);
    let mut out = format!("{scheme}://{authority}/{name}");
    if let Some(query) = query {
        out.push('?');
        out.push_str(query);
    }
    Ok(out)
}

/// `url` with any password replaced by `***`, for messages.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{host}{tail}"),
            None => url.to_string(),
        },
        None => url.to_string(),
    }
}

/// A name PostgreSQL takes unquoted: lower-case letters, digits and `_`,
/// not starting with a digit, at most 63 bytes.
pub fn check_database_name(name: &str) -> Result<(), DemoError> {
    let valid = !name.is_empty()
        && name.len() <= 63
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if valid {
        Ok(())
    } else {
        Err(DemoError::Config(format!(
            "demo database name {name:?} must be 1-63 lower-case letters, digits or '_', not starting with a digit"
        )))
    }
}

/// The demo database, created if it was missing and migrated.
#[derive(Debug, Clone)]
pub struct DemoDatabase {
    pub name: String,
    pub url: String,
    pub created: bool,
    /// Migrations applied by this run.
    pub migrated: Vec<String>,
}

#[derive(QueryableByName)]
struct Count {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

async fn establish(url: &str) -> Result<AsyncPgConnection, String> {
    match tokio::time::timeout(CONNECT_DEADLINE, AsyncPgConnection::establish(url)).await {
        Ok(Ok(conn)) => Ok(conn),
        Ok(Err(e)) => Err(e.to_string().trim().to_string()),
        Err(_) => Err(format!("no answer within {} s", CONNECT_DEADLINE.as_secs())),
    }
}

/// Connects to the server of `server_url` (through the database it names,
/// else `postgres`), creates the database `name` if missing and migrates it.
/// `DemoError::Unreachable` means no PostgreSQL answered.
pub async fn prepare_database(server_url: &str, name: &str) -> Result<DemoDatabase, DemoError> {
    check_database_name(name)?;
    let url = with_database(server_url, name)?;
    let mut admin = match establish(server_url).await {
        Ok(conn) => conn,
        Err(first) => match establish(&with_database(server_url, "postgres")?).await {
            Ok(conn) => conn,
            Err(_) => {
                return Err(DemoError::Unreachable(format!(
                    "{}: {first}",
                    redact(server_url)
                )));
            }
        },
    };
    let existing: Count =
        diesel::sql_query("SELECT count(*) AS n FROM pg_database WHERE datname = $1")
            .bind::<diesel::sql_types::Text, _>(name)
            .get_result(&mut admin)
            .await
            .map_err(|e| DemoError::Database(format!("cannot look up database {name}: {e}")))?;
    let created = existing.n == 0;
    if created {
        // The name is checked above; identifiers cannot be bind parameters.
        diesel::sql_query(format!("CREATE DATABASE {name}"))
            .execute(&mut admin)
            .await
            .map_err(|e| {
                DemoError::Database(format!(
                    "cannot create database {name} on {}: {e}; create it yourself or pick another with --demo-database",
                    redact(server_url)
                ))
            })?;
    }
    drop(admin);
    let migrated = store::migrate(&url)
        .await
        .map_err(|e| DemoError::Database(format!("migrating database {name}: {e}")))?;
    Ok(DemoDatabase {
        name: name.to_string(),
        url,
        created,
        migrated,
    })
}

/// How a demo monitor came to be in the database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MonitorOrigin {
    /// From an earlier run, same definition: its snapshot restores.
    Existing,
    Created,
    /// An earlier run's monitor was deleted with its snapshot and created
    /// again: fresh calibration.
    Replaced(ReplaceReason),
}

/// Why an earlier run's monitor was replaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplaceReason {
    /// `--fresh` asked for it.
    Fresh,
    /// It was retired (no worker starts it again).
    Retired,
    /// This radar defines the demo monitor differently (its snapshot
    /// would be refused as incompatible).
    DefinitionChanged,
}

impl ReplaceReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Fresh => "--fresh",
            Self::Retired => "it was retired",
            Self::DefinitionChanged => "this radar defines it differently",
        }
    }
}

/// One demo monitor as stored.
#[derive(Debug, Clone)]
pub struct DemoMonitor {
    pub row: MonitorRow,
    pub origin: MonitorOrigin,
}

/// Finds or creates one monitor per config, by name. A stored monitor of
/// that name is reused only when its definition is identical and it is not
/// retired (and `fresh` is false); otherwise it is deleted, with its
/// snapshot and results, and created again.
pub async fn demo_monitors(
    services: &Services,
    configs: &[MonitorConfig],
    fresh: bool,
) -> Result<Vec<DemoMonitor>, DemoError> {
    let failed = |what: &str, name: &str, e: store::StoreError| {
        DemoError::Database(format!("{what} demo monitor {name:?}: {e}"))
    };
    let rows = services
        .list(true)
        .await
        .map_err(|e| DemoError::Database(format!("listing monitors: {e}")))?;
    let mut out = Vec::with_capacity(configs.len());
    for config in configs {
        let existing = rows.iter().find(|row| row.name == config.name);
        let replace = existing.map(|row| {
            if fresh {
                Some(ReplaceReason::Fresh)
            } else if row.is_retired() {
                Some(ReplaceReason::Retired)
            } else if row.config_fingerprint != config.fingerprint().to_vec()
                || row.monitor_config().ok().as_ref() != Some(config)
            {
                Some(ReplaceReason::DefinitionChanged)
            } else {
                None
            }
        });
        let origin = match (existing, replace) {
            (Some(row), Some(None)) => {
                out.push(DemoMonitor {
                    row: row.clone(),
                    origin: MonitorOrigin::Existing,
                });
                continue;
            }
            (Some(old), Some(Some(reason))) => {
                services
                    .delete(old.id)
                    .await
                    .map_err(|e| failed("deleting the earlier", &config.name, e))?;
                MonitorOrigin::Replaced(reason)
            }
            _ => MonitorOrigin::Created,
        };
        let id = services
            .create(config)
            .await
            .map_err(|e| failed("creating", &config.name, e))?;
        let row = services
            .get(id)
            .await
            .map_err(|e| failed("reading", &config.name, e))?;
        out.push(DemoMonitor { row, origin });
    }
    Ok(out)
}

/// The monitors of a run without a database: rows that exist only in this
/// process, with ids derived from their names (stable across runs).
pub fn in_memory_monitors(configs: &[MonitorConfig]) -> Result<Vec<MonitorRow>, DemoError> {
    let now = Utc::now();
    configs
        .iter()
        .map(|config| {
            let json = serde_json::to_value(config).map_err(|e| {
                DemoError::Config(format!("cannot encode monitor {:?}: {e}", config.name))
            })?;
            Ok(MonitorRow {
                id: in_memory_id(&config.name),
                name: config.name.clone(),
                description: config.description.clone(),
                config: json,
                config_fingerprint: config.fingerprint().to_vec(),
                created_at: now,
                retired_at: None,
            })
        })
        .collect()
}

/// The id `in_memory_monitors` gives a monitor of this name.
pub fn in_memory_id(name: &str) -> Uuid {
    let digest = Sha256::digest(format!("radar-demo monitor {name}").as_bytes());
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    uuid::Builder::from_custom_bytes(bytes).into_uuid()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_demo_database_replaces_only_the_database_name_of_the_url() {
        let cases = [
            (
                "postgres://postgres@127.0.0.1:5432/radar",
                "postgres://postgres@127.0.0.1:5432/radar_demo",
            ),
            (
                "postgresql://u:p@db:6543/radar?sslmode=disable",
                "postgresql://u:p@db:6543/radar_demo?sslmode=disable",
            ),
            (
                "postgres://postgres@127.0.0.1:5432",
                "postgres://postgres@127.0.0.1:5432/radar_demo",
            ),
            ("postgres://h/?x=1", "postgres://h/radar_demo?x=1"),
        ];
        for (url, want) in cases {
            assert_eq!(with_database(url, "radar_demo").unwrap(), want, "{url}");
        }
        assert!(with_database("host=db dbname=radar", "radar_demo").is_err());
        assert!(with_database("mysql://h/db", "radar_demo").is_err());
    }

    #[test]
    fn passwords_never_appear_in_messages() {
        assert_eq!(
            redact("postgres://u:secret@db:5432/radar"),
            "postgres://u:***@db:5432/radar"
        );
        assert_eq!(
            redact("postgres://u@db:5432/radar"),
            "postgres://u@db:5432/radar"
        );
        let err = with_database("mysql://u:secret@h/db", "x").unwrap_err();
        assert!(!err.to_string().contains("secret"), "{err}");
    }

    #[test]
    fn only_plain_lower_case_database_names_are_accepted() {
        for good in ["radar_demo", "radar_test_demo_1_ab", "_x"] {
            assert!(check_database_name(good).is_ok(), "{good}");
        }
        for bad in ["", "1abc", "Radar", "a-b", "a;drop", &"x".repeat(64)] {
            assert!(check_database_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn in_memory_monitors_keep_their_ids_across_runs() {
        let plant = super::super::Plant::new(super::super::PlantConfig::default()).unwrap();
        let configs = super::super::monitor_configs(&plant).unwrap();
        let a = in_memory_monitors(&configs).unwrap();
        let b = in_memory_monitors(&configs).unwrap();
        let ids: Vec<Uuid> = a.iter().map(|r| r.id).collect();
        assert_eq!(ids, b.iter().map(|r| r.id).collect::<Vec<_>>());
        assert_eq!(ids[0], in_memory_id(&configs[0].name));
        let unique: std::collections::BTreeSet<_> = ids.iter().collect();
        assert_eq!(unique.len(), ids.len());
        assert_eq!(a[0].monitor_config().unwrap(), configs[0]);
    }
}
