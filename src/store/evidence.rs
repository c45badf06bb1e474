//! Alarms and evidence as rows: what a monitor's results look like on their
//! way into PostgreSQL, and the idempotent statements that write them.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use diesel::{prelude::*, upsert::excluded};
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::{
    cached::{StaticSql, static_sql},
    schema::{radar_alarms, radar_evidence},
};

/// One alarm as the alarm rule reported it; written again when it closes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AlarmRecord {
    /// The detector's own alarm counter (restarts from the snapshot after a
    /// hard crash, so it is not the identity: `opened_at` is).
    pub alarm_seq: u64,
    /// Source time of the frame that opened it: the row's identity.
    pub opened_at: DateTime<Utc>,
    pub closed_at: Option<DateTime<Utc>>,
    pub peak_score: f64,
}

/// One flagged frame.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvidenceRecord {
    /// Source time of the frame: the row's identity.
    pub frame_ts: DateTime<Utc>,
    pub frame_seq: u64,
    pub alarm_seq: Option<u64>,
    pub score: f64,
    pub threshold: f64,
    pub p_value: f64,
    /// Each reading's share of the score.
    pub contributions: BTreeMap<String, f64>,
}

/// Results waiting for a commit. The store only borrows them: after a
/// refused or failed write they are still the caller's, unchanged.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PendingResults {
    pub alarms: Vec<AlarmRecord>,
    pub evidence: Vec<EvidenceRecord>,
}

impl PendingResults {
    pub fn is_empty(&self) -> bool {
        self.alarms.is_empty() && self.evidence.is_empty()
    }

    pub fn len(&self) -> usize {
        self.alarms.len() + self.evidence.len()
    }
}

/// PostgreSQL allows 65535 bind parameters per statement; rows have at most 9.
const ROWS_PER_STATEMENT: usize = 1000;

/// Writes results under `writer_signature`, inside the caller's
/// transaction. A frame or alarm already stored is not duplicated; an alarm
/// seen again takes its newer close time and peak. The statements are
/// pipelined: all are sent when the future is first polled, after whatever
/// the caller sent before.
pub(super) async fn insert_results(
    mut conn: &AsyncPgConnection,
    service_id: Uuid,
    writer_signature: &[u8],
    pending: &PendingResults,
) -> QueryResult<()> {
    let mut statements = Vec::new();
    for chunk in pending.evidence.chunks(ROWS_PER_STATEMENT) {
        let rows: Vec<_> = chunk
            .iter()
            .map(|e| {
                (
                    radar_evidence::service_id.eq(service_id),
                    radar_evidence::frame_ts.eq(e.frame_ts),
                    radar_evidence::frame_seq.eq(to_i64(e.frame_seq)),
                    radar_evidence::alarm_seq.eq(e.alarm_seq.map(to_i64)),
                    radar_evidence::score.eq(e.score),
                    radar_evidence::threshold.eq(e.threshold),
                    radar_evidence::p_value.eq(e.p_value),
                    radar_evidence::contributions.eq(contributions_json(&e.contributions)),
                    radar_evidence::writer_signature.eq(writer_signature),
                )
            })
            .collect();
        statements.push(
            diesel::insert_into(radar_evidence::table)
                .values(rows)
                .on_conflict_do_nothing()
                .execute(&mut conn),
        );
    }
    // One statement may not update the same alarm twice; the newest record
    // of an alarm (e.g. its close after its open) is the one that counts.
    let latest: BTreeMap<DateTime<Utc>, &AlarmRecord> =
        pending.alarms.iter().map(|a| (a.opened_at, a)).collect();
    let alarms: Vec<&AlarmRecord> = latest.into_values().collect();
    for chunk in alarms.chunks(ROWS_PER_STATEMENT) {
        let rows: Vec<_> = chunk
            .iter()
            .map(|a| {
                (
                    radar_alarms::service_id.eq(service_id),
                    radar_alarms::alarm_seq.eq(to_i64(a.alarm_seq)),
                    radar_alarms::opened_at.eq(a.opened_at),
                    radar_alarms::closed_at.eq(a.closed_at),
                    radar_alarms::peak_score.eq(a.peak_score),
                    radar_alarms::writer_signature.eq(writer_signature),
                )
            })
            .collect();
        statements.push(
            diesel::insert_into(radar_alarms::table)
                .values(rows)
                .on_conflict((radar_alarms::service_id, radar_alarms::opened_at))
                .do_update()
                .set((
                    radar_alarms::closed_at.eq(excluded(radar_alarms::closed_at)),
                    radar_alarms::peak_score.eq(excluded(radar_alarms::peak_score)),
                    radar_alarms::writer_signature.eq(excluded(radar_alarms::writer_signature)),
                ))
                .execute(&mut conn),
        );
    }
    futures_util::future::try_join_all(statements).await?;
    Ok(())
}

/// What a restarted monitor found in its alarm table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AlarmReconciliation {
    /// Open alarms the restored detector does not know, now closed.
    pub closed: usize,
    /// The highest alarm number stored for the monitor (0: none).
    pub highest_seq: u64,
}

#[derive(diesel::QueryableByName)]
struct Reconciled {
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    closed: i64,
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::BigInt>)]
    highest: Option<i64>,
}

/// Closes every open alarm of the monitor except the one opened at
/// `keep_open` (the restored detector's own), inside the caller's fenced
/// transaction. Such alarms were opened by a background batch after the
/// snapshot the detector came from; it will never close them. Each is
/// closed at its last stored evidence frame (or where it opened): the last
/// time anything was known about it. One statement, which also reads the
/// highest stored alarm number (the close changes no number, so the
/// statement's snapshot gives the same answer as a read after it).
pub(super) async fn close_orphaned_alarms(
    mut conn: &AsyncPgConnection,
    service_id: Uuid,
    writer_signature: &[u8],
    keep_open: Option<DateTime<Utc>>,
) -> QueryResult<AlarmReconciliation> {
    let found: Reconciled = reconciliation(service_id, writer_signature, keep_open)
        .get_result(&mut conn)
        .await?;
    Ok(AlarmReconciliation {
        closed: usize::try_from(found.closed).unwrap_or(0),
        highest_seq: found
            .highest
            .and_then(|n| u64::try_from(n).ok())
            .unwrap_or(0),
    })
}

/// The statement of [`close_orphaned_alarms`]. Every restart runs it, so it
/// is prepared once per connection: as `sql_query` it was prepared and
/// planned anew each time, about a third of a millisecond of PostgreSQL's
/// CPU per restarted monitor (BENCHMARKS.md section 6, round 16).
fn reconciliation(
    service_id: Uuid,
    writer_signature: &[u8],
    keep_open: Option<DateTime<Utc>>,
) -> StaticSql<'_> {
    use diesel::sql_types::{Bytea, Nullable, Timestamptz, Uuid as SqlUuid};
    static_sql(
        "WITH closed AS ( \
           UPDATE radar_alarms a SET closed_at = GREATEST(a.opened_at, COALESCE( \
             (SELECT max(e.frame_ts) FROM radar_evidence e WHERE e.service_id = a.service_id \
                AND e.alarm_seq = a.alarm_seq AND e.frame_ts >= a.opened_at), a.opened_at)), \
             writer_signature = $2 \
           WHERE a.service_id = $1 AND a.closed_at IS NULL AND a.opened_at IS DISTINCT FROM $3 \
           RETURNING 1) \
         SELECT (SELECT count(*) FROM closed) AS closed, \
                (SELECT max(alarm_seq) FROM radar_alarms WHERE service_id = $1) AS highest",
    )
    .bind::<SqlUuid, _>(service_id)
    .bind::<Bytea, _>(writer_signature)
    .bind::<Nullable<Timestamptz>, _>(keep_open)
}

/// Counters and sequence numbers beyond i64 do not occur; saturate rather
/// than wrap if one ever did.
fn to_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Non-finite contributions have no JSON form; they are stored as null.
fn contributions_json(contributions: &BTreeMap<String, f64>) -> serde_json::Value {
    serde_json::Value::Object(
        contributions
            .iter()
            .map(|(name, value)| {
                let number = serde_json::Number::from_f64(*value)
                    .map(serde_json::Value::Number)
                    .unwrap_or(serde_json::Value::Null);
                (name.clone(), number)
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use diesel::{pg::Pg, query_builder::QueryFragment};

    use super::*;

    #[test]
    fn the_reconciliation_is_prepared_once_per_connection_with_its_four_binds() {
        let keep_open = Some(DateTime::<Utc>::UNIX_EPOCH);
        let statement = reconciliation(Uuid::nil(), b"sig", keep_open);
        assert_eq!(statement.is_safe_to_cache_prepared(&Pg), Ok(true));
        let sql = diesel::debug_query::<Pg, _>(&statement).to_string();
        // `$1` occurs twice in the text: each occurrence is bound again.
        for placeholder in [
            "writer_signature = $1",
            "service_id = $2",
            "FROM $3",
            "service_id = $4",
        ] {
            assert!(
                sql.contains(placeholder),
                "{placeholder} missing from {sql}"
            );
        }
    }
}
