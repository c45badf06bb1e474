//! Health writes into `radar_operational_status`, checked against the
//! snapshot signature by a plain read, so a heartbeat lands even while an
//! evidence batch holds (or waits for) the snapshot row lock.

use std::sync::{Arc, LazyLock};

use chrono::{DateTime, Utc};
use diesel::sql_types::{Array, Bool, Bytea, Int8, Nullable, Text, Timestamptz};
use diesel_async::RunQueryDsl;
use uuid::Uuid;

use super::{
    StoreError,
    cached::{StaticSql, static_sql},
    checkout,
    checkpoints::{CheckpointStore, OwnershipLost, WriteKind},
    fence::{Fence, HealthTokens},
};

/// Times a refused heartbeat is retried because its own writer committed a
/// new checkpoint meanwhile; more in a row means something else is wrong.
pub(super) const MAX_RACES: usize = 3;

/// What a monitor reports about itself.
#[derive(Debug, Clone, PartialEq)]
pub struct HealthRecord {
    /// e.g. `running`, `stalled`, `startup_failed` (owned by the runtime).
    pub state: String,
    pub phase: Option<String>,
    pub connected: bool,
    pub processed_count: u64,
    pub last_checkpoint_at: Option<DateTime<Utc>>,
    pub recovery: Option<JsonDocument>,
    pub coverage: Option<JsonDocument>,
    pub last_error: Option<String>,
    /// Per required reading, when its newest accepted observation was
    /// received (this worker's clock; `None` before the first). Stored
    /// moved onto the database's clock like `last_checkpoint_at`.
    pub readings_seen: Vec<(String, Option<DateTime<Utc>>)>,
    /// This worker's clock when the record was taken. The row stores the
    /// database's time instead (and `last_checkpoint_at` moved onto the
    /// database's clock by the age this worker measured), so that status
    /// ages never depend on a writer's clock.
    pub heartbeat_at: DateTime<Utc>,
}

/// A JSON document as text, serialized once and shared: a heartbeat
/// carries the monitor's recovery and coverage documents every beat, and
/// copying or serializing them again each time was most of an idle
/// worker's CPU. Written to a `jsonb` column by a cast in the statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonDocument(Arc<str>);

impl JsonDocument {
    /// `value` serialized as JSON.
    pub fn new<T: serde::Serialize + ?Sized>(value: &T) -> Result<Self, serde_json::Error> {
        serde_json::to_string(value).map(|text| Self(text.into()))
    }

    /// The JSON text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<serde_json::Value> for JsonDocument {
    fn from(value: serde_json::Value) -> Self {
        Self(value.to_string().into())
    }
}

/// How a health write ended.
#[derive(Debug)]
pub enum HealthOutcome {
    Written(HealthReporter),
    Failed {
        reporter: HealthReporter,
        error: StoreError,
    },
    OwnershipLost(OwnershipLost),
}

/// Writes the health of one monitor while its writer owns the snapshot.
#[derive(Debug, Clone)]
pub struct HealthReporter {
    pub(super) store: CheckpointStore,
    pub(super) service_id: Uuid,
    pub(super) fence: Fence,
}

/// An owner reports what it processed and committed.
const OWNER_COUNTS: [(&str, &str); 2] = [
    ("{processed_count}", "EXCLUDED.processed_count"),
    ("{last_checkpoint_at}", "EXCLUDED.last_checkpoint_at"),
];
/// A worker that did not start the monitor restored nothing, so it cannot
/// know how far the monitor got: the last reported count and checkpoint
/// stay (a refused start never shows the count dropping to 0).
const UNOWNED_COUNTS: [(&str, &str); 2] = [
    (
        "{processed_count}",
        "radar_operational_status.processed_count",
    ),
    (
        "{last_checkpoint_at}",
        "radar_operational_status.last_checkpoint_at",
    ),
];

/// The single-row upserts' texts, built once: constant for the life of the
/// process, so each connection prepares each of them once ([`static_sql`]).
/// As `sql_query` every status change (10,000 of them when a worker of
/// 10,000 monitors stops) was parsed and planned anew, in a round trip of
/// its own.
static OWNED_UPSERT: LazyLock<String> = LazyLock::new(|| upsert(OWNED, OWNER_COUNTS));
static UNCHANGED_UPSERT: LazyLock<String> = LazyLock::new(|| upsert(UNCHANGED, UNOWNED_COUNTS));
static STILL_MISSING_UPSERT: LazyLock<String> =
    LazyLock::new(|| upsert(STILL_MISSING, UNOWNED_COUNTS));

fn upsert(condition: &str, counts: [(&str, &str); 2]) -> String {
    counts.iter().fold(
        UPSERT.replace("{condition}", condition),
        |sql, (hole, value)| sql.replace(hole, value),
    )
}

/// The upsert, applied only if the snapshot row holds one of the tokens.
/// The EXISTS is a plain read: it never waits for a row lock. Times are on
/// the database's clock: the heartbeat is `now()`, and the last checkpoint
/// is as old as the writer measured it ($13 - $7, a duration, whatever its
/// clock's offset).
const UPSERT: &str = "
INSERT INTO radar_operational_status (service_id, worker_id, state, phase, connected,
    processed_count, last_checkpoint_at, fencing_token, ownership, recovery, coverage,
    last_error, heartbeat_at, reading_seen_at)
SELECT $1, $2, $3, $4, $5, $6, now() - ($13 - $7), $8, $9, $10::jsonb, $11::jsonb, $12, now(),
    (SELECT jsonb_object_agg(r.name, now() - ($13 - r.at))
     FROM unnest($15::text[], $16::timestamptz[]) AS r(name, at))
WHERE {condition}
ON CONFLICT (service_id) DO UPDATE SET
    worker_id = EXCLUDED.worker_id, state = EXCLUDED.state, phase = EXCLUDED.phase,
    connected = EXCLUDED.connected, processed_count = {processed_count},
    last_checkpoint_at = {last_checkpoint_at}, fencing_token = EXCLUDED.fencing_token,
    ownership = EXCLUDED.ownership, recovery = EXCLUDED.recovery,
    coverage = EXCLUDED.coverage, last_error = EXCLUDED.last_error,
    heartbeat_at = EXCLUDED.heartbeat_at, reading_seen_at = EXCLUDED.reading_seen_at";

const OWNED: &str = "EXISTS (SELECT 1 FROM radar_runtime_checkpoints
    WHERE service_id = $1 AND signature = ANY($14))";
const UNCHANGED: &str = "EXISTS (SELECT 1 FROM radar_runtime_checkpoints
    WHERE service_id = $1 AND signature = $14)";
const STILL_MISSING: &str = "NOT EXISTS (SELECT 1 FROM radar_runtime_checkpoints
    WHERE service_id = $1) AND $14::bytea IS NULL";

impl HealthReporter {
    pub(super) fn new(store: CheckpointStore, service_id: Uuid, fence: Fence) -> Self {
        Self {
            store,
            service_id,
            fence,
        }
    }

    pub fn service_id(&self) -> Uuid {
        self.service_id
    }

    /// Writes `record` on its own, in one statement, if the snapshot row
    /// still holds this writer's token. Periodic heartbeats go through
    /// [`super::Heartbeats`] instead, which writes many monitors at once.
    pub async fn report(self, record: &HealthRecord) -> HealthOutcome {
        for _ in 0..=MAX_RACES {
            let Some(HealthTokens {
                generation,
                token,
                accepted,
            }) = self.fence.for_health()
            else {
                break;
            };
            let written = write_status(
                &self.store,
                self.service_id,
                &OWNED_UPSERT,
                record,
                &token,
                "owner",
                |q| q.bind::<Array<Bytea>, _>(accepted),
            )
            .await;
            match written {
                Ok(true) => return HealthOutcome::Written(self),
                Ok(false) if self.fence.generation() != generation => continue,
                Ok(false) => break,
                Err(error) => {
                    return HealthOutcome::Failed {
                        reporter: self,
                        error,
                    };
                }
            }
        }
        HealthOutcome::OwnershipLost(self.fence.lose(self.service_id, WriteKind::Health))
    }
}

impl CheckpointStore {
    /// Writes the status of a monitor this worker does not own, e.g. one
    /// whose snapshot failed to load: only while the row still holds the
    /// signature it saw (`None`: still has no row), so it never overwrites
    /// the status of a worker that committed since. It keeps the row's
    /// processed count and last checkpoint: this worker restored nothing.
    pub async fn report_unowned(
        &self,
        service_id: Uuid,
        seen_signature: Option<&[u8]>,
        record: &HealthRecord,
    ) -> Result<bool, StoreError> {
        let sql = if seen_signature.is_some() {
            &UNCHANGED_UPSERT
        } else {
            &STILL_MISSING_UPSERT
        };
        let seen = seen_signature.map(<[u8]>::to_vec);
        write_status(self, service_id, sql, record, "", "none", |q| {
            q.bind::<Nullable<Bytea>, _>(seen)
        })
        .await
    }
}

type Query = StaticSql<'static>;

async fn write_status(
    store: &CheckpointStore,
    service_id: Uuid,
    sql: &'static str,
    record: &HealthRecord,
    token: &str,
    ownership: &str,
    bind_condition: impl FnOnce(Query) -> Query + Send,
) -> Result<bool, StoreError> {
    let query = static_sql(sql)
        .bind::<diesel::sql_types::Uuid, _>(service_id)
        .bind::<Text, _>(store.writer_id().to_string())
        .bind::<Text, _>(record.state.clone())
        .bind::<Nullable<Text>, _>(record.phase.clone())
        .bind::<Bool, _>(record.connected)
        .bind::<Int8, _>(i64::try_from(record.processed_count).unwrap_or(i64::MAX))
        .bind::<Nullable<Timestamptz>, _>(record.last_checkpoint_at)
        .bind::<Nullable<Text>, _>((!token.is_empty()).then(|| token.to_string()))
        .bind::<Text, _>(ownership.to_string())
        .bind::<Nullable<Text>, _>(record.recovery.as_ref().map(|d| d.as_str().to_string()))
        .bind::<Nullable<Text>, _>(record.coverage.as_ref().map(|d| d.as_str().to_string()))
        .bind::<Nullable<Text>, _>(record.last_error.clone())
        .bind::<Timestamptz, _>(record.heartbeat_at);
    let (names, seen): (Vec<String>, Vec<Option<DateTime<Utc>>>) =
        record.readings_seen.iter().cloned().unzip();
    let query = bind_condition(query)
        .bind::<Array<Text>, _>(names)
        .bind::<Array<Nullable<Timestamptz>>, _>(seen);
    store
        .bounded(async {
            let mut conn = checkout(store.pool()).await?;
            let written = query
                .execute(&mut conn)
                .await
                .map_err(|e| store.db_error(e))?;
            Ok(written == 1)
        })
        .await
}
