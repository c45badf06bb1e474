//! The statements of a heartbeat flush: the upsert of the monitors whose
//! record is new, and the refresh of those whose record is the one their
//! row already holds.
//!
//! # The token check
//!
//! Each statement checks every monitor's token by reading its snapshot
//! row's signature through the primary key (a scalar subquery per monitor)
//! and looking the (monitor, signature) pair up among the pairs the writer
//! accepts (hashed once per statement). Written as a join of the accepted
//! pairs with `radar_runtime_checkpoints`, PostgreSQL hashed the whole
//! table for every chunk (every monitor of the fleet, 10 ms at 10,000) and,
//! estimating that join at one row, scanned the refreshed rows once per
//! owned monitor: 60-93 ms for a refresh of 1,000 monitors where this form
//! takes 17-22 ms (BENCHMARKS.md section 6, round 17). The refresh returns
//! the owned and the refreshed monitors as a union for the same reason:
//! nothing is looked up in a list whose size the planner guessed.

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use diesel::sql_types::{Array, Bool, Bytea, Int8, Jsonb, Nullable, Text, Timestamptz};
use diesel_async::{AsyncConnection, RunQueryDsl};
use uuid::Uuid;

use super::Prepared;
use crate::store::{
    StoreError,
    cached::{StaticSql, static_sql},
    checkout,
    checkpoints::CheckpointStore,
    health::JsonDocument,
};

/// The status columns of many monitors, one array per column, in the
/// order of [`BATCH_UPSERT`]'s `unnest`. The per-row fields are those of
/// [`HealthRecord`]: a new status column is one field there, one array
/// here, and one name in this statement and in the single-row one.
/// Borrowed from the records: building a statement copies no string or
/// JSON document.
#[derive(Default)]
struct StatusColumns<'a> {
    service_id: Vec<Uuid>,
    state: Vec<&'a str>,
    phase: Vec<Option<&'a str>>,
    connected: Vec<bool>,
    processed_count: Vec<i64>,
    last_checkpoint_at: Vec<Option<DateTime<Utc>>>,
    fencing_token: Vec<Option<&'a str>>,
    recovery: Vec<Option<&'a str>>,
    coverage: Vec<Option<&'a str>>,
    last_error: Vec<Option<&'a str>>,
    taken_at: Vec<DateTime<Utc>>,
    /// Per monitor, each required reading's age in seconds when the record
    /// was taken (null: never seen), a duration whatever the writer's clock.
    readings_seen_ago: Vec<serde_json::Value>,
    /// (monitor, signature) pairs: every token each monitor's writer accepts.
    accepted_id: Vec<Uuid>,
    accepted_signature: Vec<&'a [u8]>,
}

impl<'a> StatusColumns<'a> {
    fn push(&mut self, p: &'a Prepared) {
        let record = &p.beat.record;
        let taken_at = p.beat.taken_at;
        let id = p.service_id();
        self.service_id.push(id);
        self.state.push(&record.state);
        self.phase.push(record.phase.as_deref());
        self.connected.push(record.connected);
        self.processed_count
            .push(i64::try_from(record.processed_count).unwrap_or(i64::MAX));
        self.last_checkpoint_at.push(record.last_checkpoint_at);
        self.fencing_token
            .push((!p.token.is_empty()).then_some(p.token.as_str()));
        self.recovery
            .push(record.recovery.as_ref().map(JsonDocument::as_str));
        self.coverage
            .push(record.coverage.as_ref().map(JsonDocument::as_str));
        self.last_error.push(record.last_error.as_deref());
        self.taken_at.push(taken_at);
        let ages: serde_json::Map<String, serde_json::Value> = record
            .readings_seen
            .iter()
            .map(|(name, at)| {
                let age = at.and_then(|at| (taken_at - at).num_microseconds());
                let age = age.map(|us| us as f64 / 1e6);
                (name.clone(), serde_json::json!(age))
            })
            .collect();
        self.readings_seen_ago.push(serde_json::Value::Object(ages));
        for signature in &p.accepted {
            self.accepted_id.push(id);
            self.accepted_signature.push(signature);
        }
    }
}

/// The upsert of many monitors' status rows, each applied only if its
/// snapshot row holds one of the tokens its writer accepts. The check is a
/// plain read (no row lock on the snapshot rows), one primary-key probe per
/// monitor of the chunk (see "The token check" in the module docs); the
/// status rows are written in monitor order, so two workers' batches never
/// deadlock.
/// Times are on the database's clock, as in the single-row upsert: the
/// heartbeat is `now()`, the last checkpoint as old as the writer measured
/// it when it took the record (`taken_at`: the record's `heartbeat_at`, or
/// the beat's time for an unchanged record written again in full).
const BATCH_UPSERT: &str = "
INSERT INTO radar_operational_status (service_id, worker_id, state, phase, connected,
    processed_count, last_checkpoint_at, fencing_token, ownership, recovery, coverage,
    last_error, heartbeat_at, reading_seen_at)
SELECT b.service_id, $2, b.state, b.phase, b.connected, b.processed_count,
    now() - (b.taken_at - b.last_checkpoint_at), b.fencing_token, 'owner', b.recovery::jsonb,
    b.coverage::jsonb, b.last_error, now(),
    (SELECT jsonb_object_agg(e.key, CASE WHEN jsonb_typeof(e.value) = 'number'
            THEN now() - make_interval(secs => (e.value #>> '{}')::float8) END)
     FROM jsonb_each(b.seen_ago) AS e)
FROM unnest($1::uuid[], $3::text[], $4::text[], $5::bool[], $6::int8[],
        $7::timestamptz[], $8::text[], $9::text[], $10::text[], $11::text[],
        $14::timestamptz[], $15::jsonb[])
    AS b(service_id, state, phase, connected, processed_count, last_checkpoint_at,
        fencing_token, recovery, coverage, last_error, taken_at, seen_ago)
WHERE (b.service_id, (SELECT c.signature FROM radar_runtime_checkpoints c
                      WHERE c.service_id = b.service_id))
    IN (SELECT * FROM unnest($12::uuid[], $13::bytea[]))
ORDER BY b.service_id
ON CONFLICT (service_id) DO UPDATE SET
    worker_id = EXCLUDED.worker_id, state = EXCLUDED.state, phase = EXCLUDED.phase,
    connected = EXCLUDED.connected, processed_count = EXCLUDED.processed_count,
    last_checkpoint_at = EXCLUDED.last_checkpoint_at, fencing_token = EXCLUDED.fencing_token,
    ownership = EXCLUDED.ownership, recovery = EXCLUDED.recovery,
    coverage = EXCLUDED.coverage, last_error = EXCLUDED.last_error,
    heartbeat_at = EXCLUDED.heartbeat_at, reading_seen_at = EXCLUDED.reading_seen_at
RETURNING service_id";

#[derive(diesel::QueryableByName)]
struct WrittenRow {
    #[diesel(sql_type = diesel::sql_types::Uuid)]
    service_id: Uuid,
}

/// One chunk's upsert: a constant text each connection prepares once
/// ([`static_sql`]), so a flush after the first costs one commit.
fn statement<'a>(store: &CheckpointStore, chunk: &[&'a Prepared]) -> StaticSql<'a> {
    let mut c = StatusColumns::default();
    for p in chunk {
        c.push(p);
    }
    static_sql(BATCH_UPSERT)
        .bind::<Array<diesel::sql_types::Uuid>, _>(c.service_id)
        .bind::<Text, _>(store.writer_id().to_string())
        .bind::<Array<Text>, _>(c.state)
        .bind::<Array<Nullable<Text>>, _>(c.phase)
        .bind::<Array<Bool>, _>(c.connected)
        .bind::<Array<Int8>, _>(c.processed_count)
        .bind::<Array<Nullable<Timestamptz>>, _>(c.last_checkpoint_at)
        .bind::<Array<Nullable<Text>>, _>(c.fencing_token)
        .bind::<Array<Nullable<Text>>, _>(c.recovery)
        .bind::<Array<Nullable<Text>>, _>(c.coverage)
        .bind::<Array<Nullable<Text>>, _>(c.last_error)
        .bind::<Array<diesel::sql_types::Uuid>, _>(c.accepted_id)
        .bind::<Array<Bytea>, _>(c.accepted_signature)
        .bind::<Array<Timestamptz>, _>(c.taken_at)
        .bind::<Array<Jsonb>, _>(c.readings_seen_ago)
}

/// Writes one round (at most one heartbeat per monitor) in one
/// transaction; returns the monitors whose rows were written.
pub(super) async fn write_batch(
    store: &CheckpointStore,
    round: &[&Prepared],
    rows_per_statement: usize,
) -> Result<HashSet<Uuid>, StoreError> {
    let mut ordered = round.to_vec();
    ordered.sort_by_key(|p| p.service_id());
    let statements: Vec<_> = ordered
        .chunks(rows_per_statement)
        .map(|chunk| statement(store, chunk))
        .collect();
    let written = run::<WrittenRow>(store, statements).await?;
    Ok(written.into_iter().map(|row| row.service_id).collect())
}

/// The refresh of many monitors' status rows whose record has not changed
/// since their writer last wrote it: the heartbeat time only, and only
/// where the snapshot row holds one of the tokens the writer accepts (the
/// same plain read as [`BATCH_UPSERT`]) and the status row is still as
/// that writer left it (its worker, as owner, with its current token).
/// Every monitor that passes the token check is returned once unrefreshed
/// and, if its row was refreshed, once more as refreshed (a union, not a
/// join of the two sets: see the module docs); one that was not refreshed
/// (its row was written by somebody else meanwhile, or is gone) is written
/// in full instead. The rows are locked in monitor order, as in the upsert.
const REFRESH: &str = "
WITH owned AS (
    SELECT b.service_id, b.fencing_token
    FROM unnest($3::uuid[], $4::text[]) AS b(service_id, fencing_token)
    WHERE (b.service_id, (SELECT c.signature FROM radar_runtime_checkpoints c
                          WHERE c.service_id = b.service_id))
        IN (SELECT * FROM unnest($1::uuid[], $2::bytea[]))),
refreshed AS (
    UPDATE radar_operational_status s SET heartbeat_at = now()
    FROM (SELECT r.service_id
          FROM owned o JOIN radar_operational_status r ON r.service_id = o.service_id
          WHERE r.worker_id = $5 AND r.ownership = 'owner'
              AND r.fencing_token IS NOT DISTINCT FROM o.fencing_token
          ORDER BY r.service_id
          FOR UPDATE OF r) AS l
    WHERE s.service_id = l.service_id
    RETURNING s.service_id)
SELECT service_id, false AS refreshed FROM owned
UNION ALL
SELECT service_id, true FROM refreshed";

#[derive(diesel::QueryableByName)]
struct RefreshedRow {
    #[diesel(sql_type = diesel::sql_types::Uuid)]
    service_id: Uuid,
    #[diesel(sql_type = Bool)]
    refreshed: bool,
}

/// What a refresh found: the monitors whose token check passed, and of
/// those, the ones whose row it refreshed.
#[derive(Default)]
pub(super) struct Refreshed {
    pub owned: HashSet<Uuid>,
    pub refreshed: HashSet<Uuid>,
}

/// Refreshes one round's unchanged rows (at most one per monitor) in one
/// transaction: no JSON, no document, two short arrays per monitor.
pub(super) async fn refresh(
    store: &CheckpointStore,
    round: &[&Prepared],
    rows_per_statement: usize,
) -> Result<Refreshed, StoreError> {
    let mut ordered = round.to_vec();
    ordered.sort_by_key(|p| p.service_id());
    let statements: Vec<_> = ordered
        .chunks(rows_per_statement)
        .map(|chunk| {
            let mut service_id = Vec::with_capacity(chunk.len());
            let mut token = Vec::with_capacity(chunk.len());
            let mut accepted_id = Vec::new();
            let mut accepted_signature: Vec<&[u8]> = Vec::new();
            for p in chunk {
                service_id.push(p.service_id());
                token.push((!p.token.is_empty()).then_some(p.token.as_str()));
                for signature in &p.accepted {
                    accepted_id.push(p.service_id());
                    accepted_signature.push(signature);
                }
            }
            static_sql(REFRESH)
                .bind::<Array<diesel::sql_types::Uuid>, _>(accepted_id)
                .bind::<Array<Bytea>, _>(accepted_signature)
                .bind::<Array<diesel::sql_types::Uuid>, _>(service_id)
                .bind::<Array<Nullable<Text>>, _>(token)
                .bind::<Text, _>(store.writer_id().to_string())
        })
        .collect();
    let rows = run::<RefreshedRow>(store, statements).await?;
    let mut out = Refreshed::default();
    for row in rows {
        if row.refreshed {
            out.refreshed.insert(row.service_id);
        }
        out.owned.insert(row.service_id);
    }
    Ok(out)
}

/// Runs `statements` on one connection: one alone as it is, several in
/// one transaction.
async fn run<R>(
    store: &CheckpointStore,
    statements: Vec<StaticSql<'_>>,
) -> Result<Vec<R>, StoreError>
where
    R: diesel::deserialize::QueryableByName<diesel::pg::Pg> + Send + 'static,
{
    store
        .bounded(async {
            let mut conn = checkout(store.pool()).await?;
            if statements.len() == 1 {
                let mut statements = statements;
                let only = statements.remove(0);
                only.load::<R>(&mut conn).await
            } else {
                conn.transaction::<_, diesel::result::Error, _>(async |conn| {
                    let mut rows = Vec::new();
                    for statement in statements {
                        rows.extend(statement.load::<R>(conn).await?);
                    }
                    Ok(rows)
                })
                .await
            }
            .map_err(|e| store.db_error(e))
        })
        .await
}
