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
//!
//! A monitor whose record is the one its last written heartbeat carried
//! hands it in as unchanged ([`GroupBeat::unchanged`]): its row
//! then only has its heartbeat time refreshed, after the same token check,
//! provided the row is still as that write left it; otherwise the record
//! is written in full, so a row never carries a fresh heartbeat with
//! content that is not its writer's current record.

mod group;
mod statements;

use std::{collections::HashSet, sync::Arc, time::Duration};

use chrono::{DateTime, Utc};
use tokio::sync::mpsc;
use uuid::Uuid;

use super::{
    StoreError,
    checkpoints::{CheckpointStore, WriteKind},
    fence::HealthTokens,
    health::{HealthOutcome, HealthRecord, HealthReporter, MAX_RACES},
};
use group::Reply;

pub use group::GroupBeat;

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
    /// Shared with the caller's fallback: no copy of the JSON columns.
    record: Arc<HealthRecord>,
    /// When `record` was last known to be the monitor's state: its
    /// `heartbeat_at`, or the beat's time for an unchanged record.
    taken_at: DateTime<Utc>,
    /// `record` is what this reporter's last written heartbeat carried,
    /// and still the monitor's state at `taken_at`.
    unchanged: bool,
    reply: Reply,
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
}

/// Writes a heartbeat on its own, as taken at `taken_at`.
async fn report_alone(
    (reporter, record): (HealthReporter, Arc<HealthRecord>),
    taken_at: DateTime<Utc>,
) -> HealthOutcome {
    if record.heartbeat_at == taken_at {
        return reporter.report(&record).await;
    }
    let mut record = (*record).clone();
    record.heartbeat_at = taken_at;
    reporter.report(&record).await
}

/// A heartbeat about to be written: the fence as it was when the tokens
/// were read, so a refusal can tell a race with its own writer from a loss.
struct Prepared {
    beat: Beat,
    generation: u64,
    token: String,
    accepted: Vec<Vec<u8>>,
    attempts: usize,
    /// Only the heartbeat time is to be refreshed (see [`Beat::unchanged`]).
    refresh: bool,
}

impl Prepared {
    /// Reads the fence, or answers at once if ownership is already lost.
    fn new(beat: Beat, attempts: usize) -> Option<Self> {
        let fence = &beat.reporter.fence;
        let Some(HealthTokens {
            generation,
            token,
            accepted,
        }) = fence.for_health()
        else {
            let lost = fence.lose(beat.reporter.service_id, WriteKind::Health);
            beat.reply.send(HealthOutcome::OwnershipLost(lost));
            return None;
        };
        let refresh = beat.unchanged;
        Some(Self {
            beat,
            generation,
            token,
            accepted,
            attempts,
            refresh,
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
/// retried in a further round, like a single heartbeat; an unchanged
/// record whose row is no longer as its writer left it is written in full
/// in a further round.
async fn flush(store: &CheckpointStore, beats: Vec<Beat>, rows_per_statement: usize) {
    let mut pending: Vec<Prepared> = beats
        .into_iter()
        .filter_map(|beat| Prepared::new(beat, 0))
        .collect();
    while !pending.is_empty() {
        let (round, later) = one_per_monitor(pending);
        let mut next = later;
        match write_round(store, &round, rows_per_statement).await {
            Ok((written, stale)) => {
                // Written in full before any later heartbeat of the same
                // monitor, which stays the last one written.
                let mut again = Vec::new();
                for mut p in round {
                    if written.contains(&p.service_id()) {
                        p.beat.reply.send(HealthOutcome::Written(p.beat.reporter));
                    } else if stale.contains(&p.service_id()) {
                        p.refresh = false;
                        again.push(p);
                    } else if p.beat.reporter.fence.generation() != p.generation
                        && p.attempts < MAX_RACES
                    {
                        next.extend(Prepared::new(p.beat, p.attempts + 1));
                    } else {
                        let lost = p
                            .beat
                            .reporter
                            .fence
                            .lose(p.beat.reporter.service_id, WriteKind::Health);
                        p.beat.reply.send(HealthOutcome::OwnershipLost(lost));
                    }
                }
                again.append(&mut next);
                next = again;
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
                    p.beat.reply.send(HealthOutcome::Failed {
                        reporter: p.beat.reporter,
                        error,
                    });
                }
            }
        }
        pending = next;
    }
}

/// Writes one round: the unchanged rows refreshed (one transaction), the
/// others upserted (another). Returns the monitors written or refreshed,
/// and those whose token check passed but whose row was not as their
/// writer left it, to be written in full.
async fn write_round(
    store: &CheckpointStore,
    round: &[Prepared],
    rows_per_statement: usize,
) -> Result<(HashSet<Uuid>, HashSet<Uuid>), StoreError> {
    let (refreshes, full): (Vec<&Prepared>, Vec<&Prepared>) = round.iter().partition(|p| p.refresh);
    let mut written = HashSet::new();
    let mut stale = HashSet::new();
    if !refreshes.is_empty() {
        let found = statements::refresh(store, &refreshes, rows_per_statement).await?;
        stale.extend(found.owned.difference(&found.refreshed));
        written.extend(found.refreshed);
    }
    if !full.is_empty() {
        written.extend(statements::write_batch(store, &full, rows_per_statement).await?);
    }
    Ok((written, stale))
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
