//! Status heartbeats of every monitor of one worker, coalesced: each
//! monitor hands its record to [`Heartbeats`], and one flusher writes all
//! records gathered in an interval in one transaction (one statement per
//! [`MAX_ROWS_PER_STATEMENT`] monitors), so an idle worker commits about
//! once per [`FLUSH_EVERY`] whatever its number of monitors.
//!
//! Each row keeps the semantics of a single heartbeat
//! ([`HealthReporter::report`]): it is written only if the monitor's
//! snapshot row holds one of the tokens its writer accepts, checked by a
//! plain read that never waits for the snapshot row lock; a refused row is
//! not written, and its monitor is told it lost ownership (after retrying
//! if its own writer moved on meanwhile), while the other monitors of the
//! batch are written.

use std::{collections::HashSet, sync::Arc, time::Duration};

use chrono::{DateTime, Utc};
use diesel::sql_types::{Array, Bool, Bytea, Int8, Jsonb, Nullable, Text, Timestamptz};
use diesel_async::{AsyncConnection, RunQueryDsl};
use tokio::sync::{mpsc, oneshot};
use uuid::Uuid;

use super::{
    StoreError,
    cached::{StaticSql, static_sql},
    checkout,
    checkpoints::{CheckpointStore, WriteKind},
    health::{HealthOutcome, HealthRecord, HealthReporter, JsonDocument, MAX_RACES},
};

/// How often the flusher writes the heartbeats gathered since its last
/// write. Shorter than the monitors' heartbeat interval, so a monitor's
/// write finishes before its next heartbeat is due.
pub const FLUSH_EVERY: Duration = Duration::from_secs(1);
/// Monitors per statement; a flush with more runs several statements in
/// one transaction.
pub const MAX_ROWS_PER_STATEMENT: usize = 1000;

/// One monitor's heartbeat waiting for the next flush.
struct Beat {
    reporter: HealthReporter,
    /// Shared with `submit`'s fallback: no copy of the JSON columns.
    record: Arc<HealthRecord>,
    reply: oneshot::Sender<HealthOutcome>,
}

/// Where the monitors of one worker hand in their heartbeats. Cheap to
/// clone; the flusher ends once every handle is dropped.
#[derive(Clone, Debug)]
pub struct Heartbeats {
    beats: mpsc::UnboundedSender<Beat>,
}

/// Writes what [`Heartbeats`] gathered; run it with [`HeartbeatFlusher::run`]
/// on the worker's runtime.
pub struct HeartbeatFlusher {
    store: CheckpointStore,
    beats: mpsc::UnboundedReceiver<Beat>,
    every: Duration,
    rows_per_statement: usize,
}

impl Heartbeats {
    /// A handle and the flusher that writes its heartbeats every `every`.
    pub fn new(store: CheckpointStore, every: Duration) -> (Self, HeartbeatFlusher) {
        let (tx, rx) = mpsc::unbounded_channel();
        (
            Self { beats: tx },
            HeartbeatFlusher {
                store,
                beats: rx,
                every,
                rows_per_statement: MAX_ROWS_PER_STATEMENT,
            },
        )
    }

    /// Writes `record` with the next flush if the snapshot row still holds
    /// one of `reporter`'s tokens; resolves once that flush is done. Should
    /// the flusher be gone (the worker is stopping), writes it on its own.
    pub async fn submit(&self, reporter: HealthReporter, record: HealthRecord) -> HealthOutcome {
        let (reply, outcome) = oneshot::channel();
        let record = Arc::new(record);
        let fallback = (reporter.clone(), Arc::clone(&record));
        if self
            .beats
            .send(Beat {
                reporter,
                record,
                reply,
            })
            .is_err()
        {
            return fallback.0.report(&fallback.1).await;
        }
        match outcome.await {
            Ok(outcome) => outcome,
            Err(_) => fallback.0.report(&fallback.1).await,
        }
    }
}

/// A heartbeat about to be written: the fence as it was when the tokens
/// were read, so a refusal can tell a race with its own writer from a loss.
struct Prepared {
    beat: Beat,
    generation: u64,
    token: String,
    accepted: Vec<Vec<u8>>,
    attempts: usize,
}

impl Prepared {
    /// Reads the fence, or answers at once if ownership is already lost.
    fn new(beat: Beat, attempts: usize) -> Option<Self> {
        let fence = &beat.reporter.fence;
        let (generation, token, lost) = {
            let state = fence.lock();
            (state.generation, state.current.short(), state.lost)
        };
        if lost {
            let lost = fence.lose(beat.reporter.service_id, WriteKind::Health);
            let _ = beat.reply.send(HealthOutcome::OwnershipLost(lost));
            return None;
        }
        let accepted = fence.accepted(true);
        Some(Self {
            beat,
            generation,
            token,
            accepted,
            attempts,
        })
    }

    fn service_id(&self) -> Uuid {
        self.beat.reporter.service_id
    }
}

impl HeartbeatFlusher {
    /// At most `rows` monitors per statement (default
    /// [`MAX_ROWS_PER_STATEMENT`]).
    pub fn with_rows_per_statement(mut self, rows: usize) -> Self {
        self.rows_per_statement = rows.max(1);
        self
    }

    /// Heartbeats handed in and not yet taken by a flush.
    pub fn queued(&self) -> usize {
        self.beats.len()
    }

    /// Flushes every interval until every [`Heartbeats`] handle is dropped.
    pub async fn run(mut self) {
        let mut tick = tokio::time::interval(self.every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if !self.flush_queued().await {
                return;
            }
        }
    }

    /// Writes every heartbeat queued now, in one transaction (plus a
    /// retry round for rows that raced their own writer). `false` once
    /// every handle is dropped and nothing is left.
    pub async fn flush_queued(&mut self) -> bool {
        let mut beats = Vec::new();
        let open = loop {
            match self.beats.try_recv() {
                Ok(beat) => beats.push(beat),
                Err(mpsc::error::TryRecvError::Empty) => break true,
                Err(mpsc::error::TryRecvError::Disconnected) => break false,
            }
        };
        if !beats.is_empty() {
            flush(&self.store, beats, self.rows_per_statement).await;
        }
        open
    }
}

/// Writes `beats` and answers each: written, failed (the whole batch's
/// error) or ownership lost. A row refused while its writer moved on is
/// retried in a further round, like a single heartbeat.
async fn flush(store: &CheckpointStore, beats: Vec<Beat>, rows_per_statement: usize) {
    let mut pending: Vec<Prepared> = beats
        .into_iter()
        .filter_map(|beat| Prepared::new(beat, 0))
        .collect();
    while !pending.is_empty() {
        let (round, later) = one_per_monitor(pending);
        let mut next = later;
        match write_batch(store, &round, rows_per_statement).await {
            Ok(written) => {
                for p in round {
                    if written.contains(&p.service_id()) {
                        let _ = p.beat.reply.send(HealthOutcome::Written(p.beat.reporter));
                    } else if p.beat.reporter.fence.lock().generation != p.generation
                        && p.attempts < MAX_RACES
                    {
                        next.extend(Prepared::new(p.beat, p.attempts + 1));
                    } else {
                        let lost = p
                            .beat
                            .reporter
                            .fence
                            .lose(p.beat.reporter.service_id, WriteKind::Health);
                        let _ = p.beat.reply.send(HealthOutcome::OwnershipLost(lost));
                    }
                }
            }
            Err(error) => {
                let message = error.to_string();
                for p in round.into_iter().chain(next.drain(..)) {
                    let error = match &error {
                        StoreError::Timeout { seconds } => {
                            StoreError::Timeout { seconds: *seconds }
                        }
                        StoreError::Connect(detail) => StoreError::Connect(detail.clone()),
                        StoreError::Pool(detail) => StoreError::Pool(detail.clone()),
                        _ => StoreError::Batched(message.clone()),
                    };
                    let _ = p.beat.reply.send(HealthOutcome::Failed {
                        reporter: p.beat.reporter,
                        error,
                    });
                }
            }
        }
        pending = next;
    }
}

/// Splits off a second heartbeat of a monitor already in the batch (a
/// restarted monitor's new writer next to its old one): one statement may
/// not write one row twice, so it goes in the next round.
fn one_per_monitor(pending: Vec<Prepared>) -> (Vec<Prepared>, Vec<Prepared>) {
    let mut seen = HashSet::new();
    pending
        .into_iter()
        .partition(|p| seen.insert(p.service_id()))
}

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
        self.taken_at.push(record.heartbeat_at);
        let ages: serde_json::Map<String, serde_json::Value> = record
            .readings_seen
            .iter()
            .map(|(name, at)| {
                let age = at.and_then(|at| (record.heartbeat_at - at).num_microseconds());
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
/// plain read (no row lock on the snapshot rows); the status rows are
/// written in monitor order, so two workers' batches never deadlock.
/// Times are on the database's clock, as in the single-row upsert: the
/// heartbeat is `now()`, the last checkpoint as old as the writer measured
/// it when it took the record (`taken_at`, the record's `heartbeat_at`).
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
WHERE b.service_id IN (
    SELECT a.service_id
    FROM unnest($12::uuid[], $13::bytea[]) AS a(service_id, signature)
    JOIN radar_runtime_checkpoints c
        ON c.service_id = a.service_id AND c.signature = a.signature)
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
async fn write_batch(
    store: &CheckpointStore,
    round: &[Prepared],
    rows_per_statement: usize,
) -> Result<HashSet<Uuid>, StoreError> {
    let mut ordered: Vec<&Prepared> = round.iter().collect();
    ordered.sort_by_key(|p| p.service_id());
    let statements: Vec<_> = ordered
        .chunks(rows_per_statement)
        .map(|chunk| statement(store, chunk))
        .collect();
    store
        .bounded(async {
            let mut conn = checkout(store.pool()).await?;
            let written = if statements.len() == 1 {
                let mut statements = statements;
                let only = statements.remove(0);
                only.load::<WrittenRow>(&mut conn).await
            } else {
                conn.transaction::<_, diesel::result::Error, _>(async |conn| {
                    let mut written = Vec::new();
                    for statement in statements {
                        written.extend(statement.load::<WrittenRow>(conn).await?);
                    }
                    Ok(written)
                })
                .await
            }
            .map_err(|e| store.db_error(e))?;
            Ok(written.into_iter().map(|row| row.service_id).collect())
        })
        .await
}
