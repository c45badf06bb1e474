//! Reading the operational status every worker writes: what `radar status`
//! shows. Monitors that no worker reported yet are listed too.

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel_async::RunQueryDsl;
use serde::Serialize;
use uuid::Uuid;

use super::{
    Pool, StoreError,
    cached::static_sql,
    checkout,
    schema::{radar_operational_status as status, services},
};

/// One monitor's last reported status.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StatusRow {
    pub monitor_id: Uuid,
    pub name: String,
    pub retired: bool,
    /// `not_reported` when no worker wrote a status yet.
    pub state: String,
    pub connected: bool,
    pub phase: Option<String>,
    pub processed_count: i64,
    pub last_checkpoint_at: Option<DateTime<Utc>>,
    pub heartbeat_at: Option<DateTime<Utc>>,
    pub worker_id: Option<String>,
    /// Prefix of the signature the reporting worker held.
    pub fencing_token: Option<String>,
    pub ownership: Option<String>,
    pub recovery: Option<serde_json::Value>,
    pub coverage: Option<serde_json::Value>,
    pub last_error: Option<String>,
    /// Per required reading, when its newest accepted observation was
    /// received, on the database's clock (`null` before the first).
    pub reading_seen_at: Option<serde_json::Value>,
}

type Joined = (
    Uuid,
    String,
    Option<DateTime<Utc>>,
    Option<(
        String,
        String,
        Option<String>,
        bool,
        i64,
        Option<DateTime<Utc>>,
        Option<String>,
        String,
        Option<serde_json::Value>,
        Option<serde_json::Value>,
        Option<String>,
        DateTime<Utc>,
        Option<serde_json::Value>,
    )>,
);

/// How this process's clock compares with the database's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockReading {
    /// The database's `now()`.
    pub database_now: DateTime<Utc>,
    /// Database time minus this process's time, taken at the midpoint of
    /// the round trip.
    pub offset: chrono::TimeDelta,
    /// Half the round trip: the offset is known only this precisely.
    pub uncertainty: chrono::TimeDelta,
}

#[derive(diesel::QueryableByName)]
struct Now {
    #[diesel(sql_type = diesel::sql_types::Timestamptz)]
    now: DateTime<Utc>,
}

/// Reads the database's clock. Ages in `radar status` are measured on it,
/// and a worker compares its own clock with it.
pub async fn read_clock(pool: &Pool) -> Result<ClockReading, StoreError> {
    let mut conn = checkout(pool).await?;
    let sent = Utc::now();
    let Now { now } = static_sql("SELECT now() AS now")
        .get_result(&mut conn)
        .await?;
    let received = Utc::now();
    let uncertainty = (received - sent) / 2;
    Ok(ClockReading {
        database_now: now,
        offset: now - (sent + uncertainty),
        uncertainty,
    })
}

#[derive(diesel::QueryableByName)]
struct Unwatched {
    #[diesel(sql_type = diesel::sql_types::Uuid)]
    id: Uuid,
}

/// Which of `monitors` no live worker runs: no status row, a status row of
/// a worker that stopped or gave the monitor up, or a heartbeat older than
/// `stale_after` on the database's clock. A worker that lost a monitor to
/// an overlapping worker takes it back once that worker is gone.
pub async fn without_live_owner(
    pool: &Pool,
    monitors: &[Uuid],
    stale_after: std::time::Duration,
) -> Result<Vec<Uuid>, StoreError> {
    if monitors.is_empty() {
        return Ok(Vec::new());
    }
    let mut conn = checkout(pool).await?;
    let rows: Vec<Unwatched> = diesel::sql_query(
        "SELECT m.id FROM unnest($1::uuid[]) AS m(id) \
         LEFT JOIN radar_operational_status s ON s.service_id = m.id \
         WHERE s.service_id IS NULL \
            OR s.state IN ('stopped', 'ownership_lost', 'failed', 'startup_failed') \
            OR s.heartbeat_at < now() - make_interval(secs => $2)",
    )
    .bind::<diesel::sql_types::Array<diesel::sql_types::Uuid>, _>(monitors)
    .bind::<diesel::sql_types::Double, _>(stale_after.as_secs_f64())
    .load(&mut conn)
    .await?;
    Ok(rows.into_iter().map(|r| r.id).collect())
}

/// Every monitor with its status, active ones first, by name.
pub async fn list_status(pool: &Pool, include_retired: bool) -> Result<Vec<StatusRow>, StoreError> {
    let mut conn = checkout(pool).await?;
    let mut query = services::table
        .left_join(status::table)
        .select((
            services::id,
            services::name,
            services::retired_at,
            (
                status::worker_id,
                status::state,
                status::phase,
                status::connected,
                status::processed_count,
                status::last_checkpoint_at,
                status::fencing_token,
                status::ownership,
                status::recovery,
                status::coverage,
                status::last_error,
                status::heartbeat_at,
                status::reading_seen_at,
            )
                .nullable(),
        ))
        .order((services::retired_at.is_not_null(), services::name.asc()))
        .into_boxed();
    if !include_retired {
        query = query.filter(services::retired_at.is_null());
    }
    let rows: Vec<Joined> = query.load(&mut conn).await?;
    Ok(rows.into_iter().map(to_row).collect())
}

fn to_row((id, name, retired_at, reported): Joined) -> StatusRow {
    let mut row = StatusRow {
        monitor_id: id,
        name,
        retired: retired_at.is_some(),
        state: "not_reported".into(),
        connected: false,
        phase: None,
        processed_count: 0,
        last_checkpoint_at: None,
        heartbeat_at: None,
        worker_id: None,
        fencing_token: None,
        ownership: None,
        recovery: None,
        coverage: None,
        last_error: None,
        reading_seen_at: None,
    };
    if let Some((
        worker,
        state,
        phase,
        connected,
        processed,
        checkpoint,
        token,
        ownership,
        recovery,
        coverage,
        error,
        heartbeat,
        seen,
    )) = reported
    {
        row.worker_id = Some(worker);
        row.state = state;
        row.phase = phase;
        row.connected = connected;
        row.processed_count = processed;
        row.last_checkpoint_at = checkpoint;
        row.fencing_token = token;
        row.ownership = Some(ownership);
        row.recovery = recovery;
        row.coverage = coverage;
        row.last_error = error;
        row.heartbeat_at = Some(heartbeat);
        row.reading_seen_at = seen;
    }
    row
}
