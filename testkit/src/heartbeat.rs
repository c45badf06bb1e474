//! Heartbeats handed to a [`Heartbeats`] batch as the worker's beat driver
//! hands them in: as a group, here often a group of one.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use radar::store::{GroupBeat, HealthOutcome, HealthRecord, HealthReporter, Heartbeats};

/// `record` from `reporter`: a new record when `unchanged` is `None`, else
/// the record its last written heartbeat carried, still its state at that
/// time.
pub fn beat(
    reporter: HealthReporter,
    record: Arc<HealthRecord>,
    unchanged: Option<DateTime<Utc>>,
) -> GroupBeat {
    GroupBeat {
        reporter,
        taken_at: unchanged.unwrap_or(record.heartbeat_at),
        unchanged: unchanged.is_some(),
        record,
    }
}

/// Hands `beat` in alone and waits for its answer (the next flush).
pub async fn submit_one(heartbeats: &Heartbeats, beat: GroupBeat) -> HealthOutcome {
    heartbeats
        .submit(vec![beat])
        .await
        .pop()
        .flatten()
        .expect("the flusher was dropped with the heartbeat queued")
}
