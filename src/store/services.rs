//! The `services` table: one row per monitor.

use chrono::{DateTime, Utc};
use diesel::{prelude::*, result::DatabaseErrorKind};
use diesel_async::RunQueryDsl;
use serde::Serialize;
use uuid::Uuid;

use super::{Pool, StoreError, checkout, schema::services};
use crate::config::MonitorConfig;

/// A monitor as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Queryable, Selectable)]
#[diesel(table_name = services)]
pub struct MonitorRow {
    pub id: Uuid,
    pub name: String,
    pub description: Option<String>,
    /// The stored definition; parse it with [`MonitorRow::monitor_config`].
    pub config: serde_json::Value,
    #[serde(serialize_with = "hex_bytes")]
    pub config_fingerprint: Vec<u8>,
    pub created_at: DateTime<Utc>,
    pub retired_at: Option<DateTime<Utc>>,
}

/// What the supervisor's periodic poll needs of a monitor: no config, so
/// listing every monitor every few seconds parses no JSON. The config is
/// read (with [`Services::rows`]) only for monitors about to start.
#[derive(Debug, Clone, PartialEq, Queryable, Selectable)]
#[diesel(table_name = services)]
pub struct MonitorHead {
    pub id: Uuid,
    pub name: String,
    pub retired_at: Option<DateTime<Utc>>,
}

impl MonitorHead {
    pub fn is_retired(&self) -> bool {
        self.retired_at.is_some()
    }
}

impl From<&MonitorRow> for MonitorHead {
    fn from(row: &MonitorRow) -> Self {
        Self {
            id: row.id,
            name: row.name.clone(),
            retired_at: row.retired_at,
        }
    }
}

impl MonitorRow {
    /// The validated definition; a row edited by hand into something invalid
    /// is reported, not half-used.
    pub fn monitor_config(&self) -> Result<MonitorConfig, StoreError> {
        MonitorConfig::from_json(self.config.clone()).map_err(|e| StoreError::InvalidStoredConfig {
            id: self.id,
            reason: e.to_string(),
        })
    }

    pub fn is_retired(&self) -> bool {
        self.retired_at.is_some()
    }
}

fn hex_bytes<S: serde::Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&hex(bytes))
}

/// Lower-case hex of some bytes.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Operations on the monitors' rows.
#[derive(Clone)]
pub struct Services {
    pool: Pool,
}

impl Services {
    pub fn new(pool: Pool) -> Self {
        Self { pool }
    }

    /// Stores a validated monitor and returns its new id.
    pub async fn create(&self, config: &MonitorConfig) -> Result<Uuid, StoreError> {
        let id = Uuid::new_v4();
        let json = serde_json::to_value(config).map_err(|e| StoreError::InvalidStoredConfig {
            id,
            reason: e.to_string(),
        })?;
        let mut conn = checkout(&self.pool).await?;
        let inserted = diesel::insert_into(services::table)
            .values((
                services::id.eq(id),
                services::name.eq(&config.name),
                services::description.eq(&config.description),
                services::config.eq(json),
                services::config_fingerprint.eq(config.fingerprint().to_vec()),
            ))
            .execute(&mut conn)
            .await;
        match inserted {
            Ok(_) => Ok(id),
            Err(diesel::result::Error::DatabaseError(DatabaseErrorKind::UniqueViolation, _)) => {
                Err(StoreError::NameTaken(config.name.clone()))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Every monitor, oldest first; retired ones only when asked.
    pub async fn list(&self, include_retired: bool) -> Result<Vec<MonitorRow>, StoreError> {
        let mut conn = checkout(&self.pool).await?;
        let mut query = services::table
            .select(MonitorRow::as_select())
            .order((services::created_at.asc(), services::id.asc()))
            .into_boxed();
        if !include_retired {
            query = query.filter(services::retired_at.is_null());
        }
        Ok(query.load(&mut conn).await?)
    }

    /// Every monitor's id, name and retirement, retired ones included,
    /// oldest first: [`Services::list`] without the configs.
    pub async fn heads(&self) -> Result<Vec<MonitorHead>, StoreError> {
        let mut conn = checkout(&self.pool).await?;
        Ok(services::table
            .select(MonitorHead::as_select())
            .order((services::created_at.asc(), services::id.asc()))
            .load(&mut conn)
            .await?)
    }

    /// The stored rows of these monitors (those that exist), as they are now.
    pub async fn rows(&self, ids: &[Uuid]) -> Result<Vec<MonitorRow>, StoreError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut conn = checkout(&self.pool).await?;
        Ok(services::table
            .filter(services::id.eq_any(ids))
            .select(MonitorRow::as_select())
            .load(&mut conn)
            .await?)
    }

    pub async fn get(&self, id: Uuid) -> Result<MonitorRow, StoreError> {
        let mut conn = checkout(&self.pool).await?;
        services::table
            .find(id)
            .select(MonitorRow::as_select())
            .first(&mut conn)
            .await
            .optional()?
            .ok_or(StoreError::MonitorNotFound(id))
    }

    /// Marks a monitor retired for good: no worker starts it again.
    pub async fn retire(&self, id: Uuid) -> Result<DateTime<Utc>, StoreError> {
        let mut conn = checkout(&self.pool).await?;
        let now = Utc::now();
        let updated = diesel::update(
            services::table
                .find(id)
                .filter(services::retired_at.is_null()),
        )
        .set(services::retired_at.eq(now))
        .execute(&mut conn)
        .await?;
        if updated == 1 {
            return Ok(now);
        }
        drop(conn);
        let row = self.get(id).await?;
        Err(StoreError::AlreadyRetired {
            id,
            retired_at: row.retired_at.map(|t| t.to_rfc3339()).unwrap_or_default(),
        })
    }

    /// Deletes a monitor; its snapshot, alarms, evidence and status go with it.
    pub async fn delete(&self, id: Uuid) -> Result<(), StoreError> {
        let mut conn = checkout(&self.pool).await?;
        let deleted = diesel::delete(services::table.find(id))
            .execute(&mut conn)
            .await?;
        if deleted == 1 {
            Ok(())
        } else {
            Err(StoreError::MonitorNotFound(id))
        }
    }
}
