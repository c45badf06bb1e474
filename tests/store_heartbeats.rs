//! Coalesced heartbeats against real PostgreSQL: many monitors' status rows
//! in one transaction, each still checked against its own snapshot
//! signature; a fenced monitor in the batch is not written and learns it,
//! the others are written; a locked snapshot row delays nobody. A
//! heartbeat whose record has not changed only refreshes its row's time,
//! under the same check, and only while the row is as its writer left it.
//!
//! Transactions and statements are counted on the rows themselves: every
//! row version carries the transaction (`xmin`) and the command within it
//! (`cmin`) that wrote it, exact and private to this test's database.

use std::{sync::Arc, time::Duration};

use chrono::{DateTime, TimeZone, Utc};
use diesel::sql_types::{BigInt, Text, Timestamptz};
use diesel_async::{AsyncPgConnection, RunQueryDsl, SimpleAsyncConnection};
use radar::{
    config::MonitorConfig,
    snapshot::{CheckpointKey, ManagedState, SealedSnapshot, SnapshotBinding, seal},
    store::{
        self, CheckpointStore, CheckpointWriter, Claim, GroupBeat, HealthOutcome, HealthRecord,
        HeartbeatFlusher, Heartbeats, PendingResults, Services, WriteKind, WriteOutcome,
    },
};
use radar_testkit::{db, heartbeat, poll};
use uuid::Uuid;

fn key() -> CheckpointKey {
    CheckpointKey::new(b"integration-test-key-0123456789abcdef".to_vec())
}

fn at(secs: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(1_790_000_000 + secs, 0).unwrap()
}

fn health(state: &str, heartbeat_at: DateTime<Utc>) -> HealthRecord {
    HealthRecord {
        state: state.into(),
        phase: Some("monitoring".into()),
        connected: true,
        processed_count: 3,
        last_checkpoint_at: Some(at(0)),
        recovery: None,
        coverage: Some(serde_json::json!({"version": 1, "gaps": []}).into()),
        last_error: None,
        heartbeat_at,
        readings_seen: vec![
            (
                "flow".into(),
                Some(heartbeat_at - chrono::Duration::seconds(12)),
            ),
            ("pressure".into(), None),
        ],
    }
}

struct Monitor {
    id: Uuid,
    binding: SnapshotBinding,
    writer: CheckpointWriter,
}

struct Fleet {
    db: db::TestDb,
    pool: store::Pool,
    monitors: Vec<Monitor>,
}

impl Fleet {
    /// `n` monitors, each with a first snapshot claimed by `worker-a`.
    async fn new(tag: &str, n: usize) -> Self {
        let db = db::migrated_database(tag).await;
        let pool = store::connect(&db.url, 4, db::STATEMENT_TIMEOUT)
            .await
            .unwrap();
        let services = Services::new(pool.clone());
        let store = CheckpointStore::new(pool.clone(), "worker-a");
        let mut monitors = Vec::new();
        for i in 0..n {
            let toml =
                radar_testkit::monitor::two_readings(&format!("hb-{i}"), &format!("{tag}/{i}"));
            let config = MonitorConfig::from_toml(&toml).unwrap();
            let id = services.create(&config).await.unwrap();
            let binding = SnapshotBinding::for_monitor(id, &config);
            let writer = match store.claim(&sealed(&binding, 0)).await.unwrap() {
                Claim::Won(w) => w,
                Claim::Lost(lost) => panic!("{lost}"),
            };
            monitors.push(Monitor {
                id,
                binding,
                writer,
            });
        }
        Self { db, pool, monitors }
    }

    fn store(&self) -> CheckpointStore {
        CheckpointStore::new(self.pool.clone(), "worker-a")
    }

    /// Worker B takes monitor `i` over: it commits a successor snapshot.
    async fn take_over(&self, i: usize) -> CheckpointWriter {
        let fenced = &self.monitors[i];
        let b = CheckpointStore::new(self.pool.clone(), "worker-b")
            .resume(fenced.id, fenced.writer.token());
        match b
            .checkpoint(&sealed(&fenced.binding, 1), &PendingResults::default())
            .await
        {
            WriteOutcome::Committed(b) => b,
            other => panic!("B's takeover checkpoint: {other:?}"),
        }
    }

    async fn conn(&self) -> AsyncPgConnection {
        db::connect(&self.db).await
    }

    async fn count(&self, sql: &str) -> i64 {
        #[derive(diesel::QueryableByName)]
        struct Count {
            #[diesel(sql_type = BigInt)]
            n: i64,
        }
        diesel::sql_query(sql)
            .get_result::<Count>(&mut self.conn().await)
            .await
            .unwrap()
            .n
    }

    /// Hands `beats` in as one group (monitor index, record, unchanged as
    /// of this time or `None` for a new record), flushes once all are
    /// queued, and returns each outcome in order.
    async fn flush_these(
        &self,
        flusher: &mut HeartbeatFlusher,
        heartbeats: &Heartbeats,
        beats: Vec<(usize, Arc<HealthRecord>, Option<DateTime<Utc>>)>,
    ) -> Vec<HealthOutcome> {
        flush_group(self, flusher, heartbeats, beats)
            .await
            .into_iter()
            .map(|outcome| outcome.expect("the flusher answered every heartbeat"))
            .collect()
    }

    /// Monitor `i`'s status row.
    async fn row(&self, i: usize) -> Row {
        diesel::sql_query(
            "SELECT state, worker_id, ownership, fencing_token, heartbeat_at, \
             last_checkpoint_at, reading_seen_at, coverage, xmin::text AS xmin \
             FROM radar_operational_status WHERE service_id = $1",
        )
        .bind::<diesel::sql_types::Uuid, _>(self.monitors[i].id)
        .get_result(&mut self.conn().await)
        .await
        .unwrap()
    }

    /// Hands every monitor's heartbeat in (a new record each), waits until
    /// all are queued, flushes once, and returns each monitor's outcome in
    /// order.
    async fn beat_all(
        &self,
        flusher: &mut HeartbeatFlusher,
        heartbeats: &Heartbeats,
    ) -> Vec<HealthOutcome> {
        let beats = (0..self.monitors.len())
            .map(|i| (i, Arc::new(health("running", at(50))), None))
            .collect();
        self.flush_these(flusher, heartbeats, beats).await
    }
}

#[derive(diesel::QueryableByName, Debug, Clone, PartialEq)]
struct Row {
    #[diesel(sql_type = Text)]
    state: String,
    #[diesel(sql_type = Text)]
    worker_id: String,
    #[diesel(sql_type = Text)]
    ownership: String,
    #[diesel(sql_type = diesel::sql_types::Nullable<Text>)]
    fencing_token: Option<String>,
    #[diesel(sql_type = Timestamptz)]
    heartbeat_at: DateTime<Utc>,
    #[diesel(sql_type = diesel::sql_types::Nullable<Timestamptz>)]
    last_checkpoint_at: Option<DateTime<Utc>>,
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Jsonb>)]
    reading_seen_at: Option<serde_json::Value>,
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Jsonb>)]
    coverage: Option<serde_json::Value>,
    #[diesel(sql_type = Text)]
    xmin: String,
}

impl Row {
    /// The row as its content, without when or by which transaction it
    /// was written.
    fn content(&self) -> Row {
        Row {
            heartbeat_at: DateTime::<Utc>::MIN_UTC,
            xmin: String::new(),
            ..self.clone()
        }
    }
}

/// Waits until the flusher holds at least `n` heartbeats.
async fn queued(flusher: &HeartbeatFlusher, n: usize) {
    poll::within(Duration::from_secs(30))
        .every(poll::QUICK)
        .wait("the heartbeats are queued", || {
            let queued = flusher.queued();
            poll::check(queued >= n, || format!("{queued} queued, waiting for {n}"))
        })
        .await;
}

fn written(outcome: &HealthOutcome) -> bool {
    matches!(outcome, HealthOutcome::Written(_))
}

fn sealed(binding: &SnapshotBinding, frames: u64) -> SealedSnapshot {
    let mut state = ManagedState::default();
    state.counters.frames = frames;
    seal(binding, &state, at(frames as i64), &key()).unwrap()
}

const TRANSACTIONS: &str = "SELECT count(DISTINCT xmin::text) AS n FROM radar_operational_status";
const STATEMENTS: &str =
    "SELECT count(DISTINCT (xmin::text, cmin::text)) AS n FROM radar_operational_status";
const ROWS: &str = "SELECT count(*) AS n FROM radar_operational_status";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_monitors_heartbeat_of_an_interval_is_one_transaction_of_few_statements() {
    let fleet = Fleet::new("hb_coalesced", 10).await;
    let (heartbeats, flusher) = Heartbeats::new(fleet.store(), Duration::from_secs(3600));
    let mut flusher = flusher.with_rows_per_statement(4);

    for round in 0..2 {
        let outcomes = fleet.beat_all(&mut flusher, &heartbeats).await;
        for (m, outcome) in fleet.monitors.iter().zip(&outcomes) {
            assert!(
                matches!(outcome, HealthOutcome::Written(_)),
                "round {round}: monitor {} was not written: {outcome:?}",
                m.id
            );
        }
        assert_eq!(
            fleet.count(ROWS).await,
            10,
            "round {round}: one row per monitor"
        );
        assert_eq!(
            fleet.count(TRANSACTIONS).await,
            1,
            "round {round}: ten monitors' heartbeats commit as one transaction"
        );
        assert_eq!(
            fleet.count(STATEMENTS).await,
            3,
            "round {round}: ten rows at four per statement are three statements"
        );
    }

    // Each row keeps a single heartbeat's fields: stamped on the
    // database's clock, the last checkpoint as old as the writer measured.
    #[derive(diesel::QueryableByName)]
    struct Beat {
        #[diesel(sql_type = Timestamptz)]
        heartbeat_at: DateTime<Utc>,
        #[diesel(sql_type = Timestamptz)]
        last_checkpoint_at: DateTime<Utc>,
        #[diesel(sql_type = Text)]
        fencing_token: String,
        #[diesel(sql_type = Text)]
        worker_id: String,
        #[diesel(sql_type = Text)]
        ownership: String,
        #[diesel(sql_type = diesel::sql_types::Jsonb)]
        reading_seen_at: serde_json::Value,
        #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Jsonb>)]
        coverage: Option<serde_json::Value>,
        #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Jsonb>)]
        recovery: Option<serde_json::Value>,
    }
    let database_now = store::read_clock(&fleet.pool).await.unwrap().database_now;
    for m in &fleet.monitors {
        let seen: Beat = diesel::sql_query(
            "SELECT heartbeat_at, last_checkpoint_at, fencing_token, worker_id, ownership, \
             reading_seen_at, coverage, recovery FROM radar_operational_status \
             WHERE service_id = $1",
        )
        .bind::<diesel::sql_types::Uuid, _>(m.id)
        .get_result(&mut fleet.conn().await)
        .await
        .unwrap();
        assert!((database_now - seen.heartbeat_at).num_seconds().abs() <= 10);
        assert_eq!(seen.heartbeat_at - seen.last_checkpoint_at, at(50) - at(0));
        assert_eq!(seen.fencing_token, m.writer.token().short());
        assert_eq!(seen.worker_id, "worker-a");
        assert_eq!(seen.ownership, "owner");
        // Reading ages too: as old as the writer measured, never seen as null.
        let flow = seen.reading_seen_at["flow"]
            .as_str()
            .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
            .unwrap_or_else(|| panic!("flow's time in {}", seen.reading_seen_at));
        let age = seen.heartbeat_at - flow.with_timezone(&Utc);
        assert!(
            (age - chrono::Duration::seconds(12))
                .num_milliseconds()
                .abs()
                <= 1,
            "flow was seen {age} before the heartbeat, not 12 s"
        );
        assert!(seen.reading_seen_at["pressure"].is_null());
        // The documents, handed over as text, are stored as the JSON they
        // hold (an object, not a string), and an absent one as null.
        assert_eq!(
            seen.coverage,
            Some(serde_json::json!({"version": 1, "gaps": []})),
            "coverage"
        );
        assert_eq!(seen.recovery, None, "recovery");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_monitor_in_the_batch_is_not_written_and_learns_it_while_the_others_are() {
    let fleet = Fleet::new("hb_fenced", 6).await;
    let (heartbeats, mut flusher) = Heartbeats::new(fleet.store(), Duration::from_secs(3600));
    fleet.beat_all(&mut flusher, &heartbeats).await;

    // Worker B takes monitor 2 over: it commits a successor snapshot.
    let fenced = &fleet.monitors[2];
    let b = fleet.take_over(2).await;
    // B's own status for the monitor, which A must not overwrite.
    let b_reporter = b.health_reporter();
    let HealthOutcome::Written(_) = b_reporter.report(&health("running", at(60))).await else {
        panic!("B's status was not written");
    };

    let outcomes = fleet.beat_all(&mut flusher, &heartbeats).await;
    for (i, (m, outcome)) in fleet.monitors.iter().zip(&outcomes).enumerate() {
        match outcome {
            HealthOutcome::OwnershipLost(lost) if i == 2 => {
                assert_eq!(lost.service_id, m.id);
                assert_eq!(lost.refused, WriteKind::Health);
            }
            HealthOutcome::Written(_) if i != 2 => {}
            other => panic!("monitor {i}: {other:?}"),
        }
    }
    #[derive(diesel::QueryableByName)]
    struct Owner {
        #[diesel(sql_type = Text)]
        worker_id: String,
        #[diesel(sql_type = Text)]
        fencing_token: String,
    }
    let row: Owner = diesel::sql_query(
        "SELECT worker_id, fencing_token FROM radar_operational_status WHERE service_id = $1",
    )
    .bind::<diesel::sql_types::Uuid, _>(fenced.id)
    .get_result(&mut fleet.conn().await)
    .await
    .unwrap();
    assert_eq!(
        row.worker_id, "worker-b",
        "A's batch overwrote B's status row"
    );
    assert_eq!(row.fencing_token, b.token().short());
    let by_a = "SELECT count(*) AS n FROM radar_operational_status WHERE worker_id = 'worker-a'";
    assert_eq!(
        fleet.count(by_a).await,
        5,
        "the other five monitors were written"
    );

    // The loss stays with A's writer: its next heartbeat is refused again
    // (without reaching the row), the others are still written.
    let outcomes = fleet.beat_all(&mut flusher, &heartbeats).await;
    assert!(
        matches!(outcomes[2], HealthOutcome::OwnershipLost(_)),
        "{:?}",
        outcomes[2]
    );
    let written = outcomes
        .iter()
        .filter(|o| matches!(o, HealthOutcome::Written(_)))
        .count();
    assert_eq!(written, 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_lands_while_another_transaction_holds_one_snapshot_row_lock() {
    let fleet = Fleet::new("hb_unblocked", 4).await;
    let (heartbeats, mut flusher) = Heartbeats::new(fleet.store(), Duration::from_secs(3600));

    let mut locker = fleet.conn().await;
    locker.batch_execute("BEGIN").await.unwrap();
    diesel::sql_query(
        "SELECT service_id FROM radar_runtime_checkpoints WHERE service_id = $1 FOR UPDATE",
    )
    .bind::<diesel::sql_types::Uuid, _>(fleet.monitors[1].id)
    .execute(&mut locker)
    .await
    .unwrap();

    // Well within the statement timeout: nothing waits for the lock.
    let outcomes = tokio::time::timeout(
        Duration::from_secs(60),
        fleet.beat_all(&mut flusher, &heartbeats),
    )
    .await
    .expect("the batch waited for a snapshot row lock");
    assert!(
        outcomes
            .iter()
            .all(|o| matches!(o, HealthOutcome::Written(_))),
        "{outcomes:?}"
    );
    assert_eq!(fleet.count(ROWS).await, 4);
    locker.batch_execute("ROLLBACK").await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_heartbeats_of_one_monitor_in_one_interval_are_both_written_one_after_the_other() {
    let fleet = Fleet::new("hb_twice", 2).await;
    let (heartbeats, mut flusher) = Heartbeats::new(fleet.store(), Duration::from_secs(3600));
    let m = &fleet.monitors[0];
    let mut tasks = Vec::new();
    for (n, state) in ["first", "second"].into_iter().enumerate() {
        let heartbeats = heartbeats.clone();
        let reporter = m.writer.health_reporter();
        let beat = heartbeat::beat(reporter, Arc::new(health(state, at(50))), None);
        tasks.push(tokio::spawn(async move {
            heartbeat::submit_one(&heartbeats, beat).await
        }));
        queued(&flusher, n + 1).await;
    }
    assert!(flusher.flush_queued().await);
    for task in tasks {
        let outcome = task.await.unwrap();
        assert!(matches!(outcome, HealthOutcome::Written(_)), "{outcome:?}");
    }
    // One statement may not write a row twice: the second went in a round
    // of its own, after the first.
    assert_eq!(fleet.count(ROWS).await, 1);
    let last = "SELECT count(*) AS n FROM radar_operational_status WHERE state = 'second'";
    assert_eq!(fleet.count(last).await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unchanged_heartbeat_refreshes_its_rows_time_and_keeps_its_content() {
    let fleet = Fleet::new("hb_refresh", 3).await;
    let (heartbeats, mut flusher) = Heartbeats::new(fleet.store(), Duration::from_secs(3600));
    let record = Arc::new(health("running", at(50)));
    let all = |unchanged| (0..3).map(|i| (i, record.clone(), unchanged)).collect();
    let outcomes = fleet
        .flush_these(&mut flusher, &heartbeats, all(None))
        .await;
    assert!(outcomes.iter().all(written), "{outcomes:?}");
    let before: Vec<Row> = all_rows(&fleet, 3).await;

    // Two seconds later nothing changed: every row's heartbeat time moves
    // on, its content (reading times and last checkpoint on the database's
    // clock included) stays as the full write left it.
    let outcomes = fleet
        .flush_these(&mut flusher, &heartbeats, all(Some(at(52))))
        .await;
    assert!(outcomes.iter().all(written), "{outcomes:?}");
    let after = all_rows(&fleet, 3).await;
    for (i, (b, a)) in before.iter().zip(&after).enumerate() {
        assert!(
            a.heartbeat_at > b.heartbeat_at,
            "monitor {i}: the unchanged heartbeat did not refresh its row ({} then {})",
            b.heartbeat_at,
            a.heartbeat_at
        );
        assert_ne!(a.xmin, b.xmin, "monitor {i}: the row was not rewritten");
        assert_eq!(a.content(), b.content(), "monitor {i}: content changed");
    }
    assert_eq!(
        fleet.count(TRANSACTIONS).await,
        1,
        "the refreshes of one flush are one transaction"
    );
}

/// Every row, in monitor order.
async fn all_rows(fleet: &Fleet, n: usize) -> Vec<Row> {
    let mut rows = Vec::new();
    for i in 0..n {
        rows.push(fleet.row(i).await);
    }
    rows
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unchanged_heartbeat_whose_row_was_written_by_another_is_written_in_full() {
    let fleet = Fleet::new("hb_refresh_stale", 4).await;
    let (heartbeats, mut flusher) = Heartbeats::new(fleet.store(), Duration::from_secs(3600));
    let record = Arc::new(health("running", at(50)));
    let all = |unchanged| (0..4).map(|i| (i, record.clone(), unchanged)).collect();
    let outcomes = fleet
        .flush_these(&mut flusher, &heartbeats, all(None))
        .await;
    assert!(outcomes.iter().all(written), "{outcomes:?}");

    // Monitor 0: another worker, whose snapshot load failed, reports it
    // while the snapshot row still holds A's token (allowed: it checks the
    // signature it saw). Monitor 1: worker B resumed it from A's token and
    // reported it before committing anything (same token, B's row).
    // Monitor 2: its row is gone. Monitor 3: untouched.
    let seen = fleet.monitors[0].writer.token();
    let other = CheckpointStore::new(fleet.pool.clone(), "worker-c");
    assert!(
        other
            .report_unowned(
                fleet.monitors[0].id,
                Some(&seen.as_bytes()[..]),
                &health("startup_failed", at(51))
            )
            .await
            .unwrap()
    );
    let b = CheckpointStore::new(fleet.pool.clone(), "worker-b")
        .resume(fleet.monitors[1].id, fleet.monitors[1].writer.token());
    let HealthOutcome::Written(_) = b
        .health_reporter()
        .report(&health("disconnected", at(51)))
        .await
    else {
        panic!("B's status was not written");
    };
    diesel::sql_query("DELETE FROM radar_operational_status WHERE service_id = $1")
        .bind::<diesel::sql_types::Uuid, _>(fleet.monitors[2].id)
        .execute(&mut fleet.conn().await)
        .await
        .unwrap();

    // A's unchanged heartbeats, taken at 60: rows 0 to 2 carry A's record
    // in full again, as taken then (last checkpoint 60 s old); row 3 is
    // refreshed.
    let outcomes = fleet
        .flush_these(&mut flusher, &heartbeats, all(Some(at(60))))
        .await;
    assert!(outcomes.iter().all(written), "{outcomes:?}");
    for i in 0..4 {
        let row = fleet.row(i).await;
        assert_eq!(row.state, "running", "monitor {i}");
        assert_eq!(row.worker_id, "worker-a", "monitor {i}");
        assert_eq!(row.ownership, "owner", "monitor {i}");
        assert_eq!(
            row.fencing_token.as_deref(),
            Some(fleet.monitors[i].writer.token().short().as_str())
        );
        let age = row.heartbeat_at - row.last_checkpoint_at.unwrap();
        if i == 3 {
            // Refreshed: the age as the full write at 50 left it, plus the
            // time between the two flushes (well under the 10 s taken).
            assert!(
                age >= at(50) - at(0) && age < at(60) - at(0),
                "monitor 3: {age}"
            );
        } else {
            assert_eq!(
                age,
                at(60) - at(0),
                "monitor {i}: not written as taken at 60"
            );
        }
    }
    assert_eq!(fleet.count(ROWS).await, 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unchanged_heartbeat_of_a_monitor_whose_snapshot_moved_on_is_not_written() {
    let fleet = Fleet::new("hb_refresh_fenced", 3).await;
    let (heartbeats, mut flusher) = Heartbeats::new(fleet.store(), Duration::from_secs(3600));
    let record = Arc::new(health("running", at(50)));
    let all = |unchanged| (0..3).map(|i| (i, record.clone(), unchanged)).collect();
    let outcomes = fleet
        .flush_these(&mut flusher, &heartbeats, all(None))
        .await;
    assert!(outcomes.iter().all(written), "{outcomes:?}");

    // Worker B takes monitor 1 over but has written no status yet: the row
    // is still A's, as A left it; only the snapshot signature says B.
    let fenced = &fleet.monitors[1];
    fleet.take_over(1).await;
    let before = fleet.row(1).await;

    let outcomes = fleet
        .flush_these(&mut flusher, &heartbeats, all(Some(at(52))))
        .await;
    for (i, outcome) in outcomes.iter().enumerate() {
        match outcome {
            HealthOutcome::OwnershipLost(lost) if i == 1 => {
                assert_eq!(lost.service_id, fenced.id);
                assert_eq!(lost.refused, WriteKind::Health);
            }
            HealthOutcome::Written(_) if i != 1 => {}
            other => panic!("monitor {i}: {other:?}"),
        }
    }
    assert_eq!(
        fleet.row(1).await,
        before,
        "A refreshed a row whose snapshot it no longer holds"
    );
}

/// Hands `beats` in as one group (monitor index, record, unchanged as of
/// this time or `None` for a new record), flushes once all are queued,
/// and returns the group's outcomes.
async fn flush_group(
    fleet: &Fleet,
    flusher: &mut HeartbeatFlusher,
    heartbeats: &Heartbeats,
    beats: Vec<(usize, Arc<HealthRecord>, Option<DateTime<Utc>>)>,
) -> Vec<Option<HealthOutcome>> {
    let n = beats.len();
    let group = group_of(fleet, beats);
    let heartbeats = heartbeats.clone();
    let task = tokio::spawn(async move { heartbeats.submit(group).await });
    queued(flusher, n).await;
    assert!(flusher.flush_queued().await);
    task.await.unwrap()
}

fn group_of(
    fleet: &Fleet,
    beats: Vec<(usize, Arc<HealthRecord>, Option<DateTime<Utc>>)>,
) -> Vec<GroupBeat> {
    beats
        .into_iter()
        .map(|(i, record, unchanged)| {
            heartbeat::beat(
                fleet.monitors[i].writer.health_reporter(),
                record,
                unchanged,
            )
        })
        .collect()
}

/// The worker's beat driver hands every beat of a tick in as one group:
/// each heartbeat of it is written (or refreshed, or refused) exactly as
/// if handed in alone, and the group is answered once, in the order
/// given; with the flusher gone, each is written on its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_of_heartbeats_is_answered_in_order_each_as_if_handed_in_alone() {
    let fleet = Fleet::new("hb_group", 4).await;
    let (heartbeats, mut flusher) = Heartbeats::new(fleet.store(), Duration::from_secs(3600));
    let record = Arc::new(health("running", at(50)));
    let beats = |unchanged| (0..4).map(|i| (i, record.clone(), unchanged)).collect();
    let outcomes = flush_group(&fleet, &mut flusher, &heartbeats, beats(None)).await;
    assert!(
        outcomes.iter().all(|o| o.as_ref().is_some_and(written)),
        "{outcomes:?}"
    );
    assert_eq!(
        fleet.count(TRANSACTIONS).await,
        1,
        "one flush, one transaction"
    );
    let before = all_rows(&fleet, 4).await;

    // Worker B takes monitor 2 over; the others are unchanged.
    let fenced = &fleet.monitors[2];
    fleet.take_over(2).await;
    let outcomes = flush_group(&fleet, &mut flusher, &heartbeats, beats(Some(at(52)))).await;
    for (i, outcome) in outcomes.iter().enumerate() {
        match outcome {
            Some(HealthOutcome::OwnershipLost(lost)) if i == 2 => {
                assert_eq!(lost.service_id, fenced.id)
            }
            Some(HealthOutcome::Written(_)) if i != 2 => {}
            other => panic!("monitor {i}: {other:?}"),
        }
    }
    let after = all_rows(&fleet, 4).await;
    for i in [0, 1, 3] {
        assert!(
            after[i].heartbeat_at > before[i].heartbeat_at,
            "monitor {i}"
        );
        assert_eq!(after[i].content(), before[i].content(), "monitor {i}");
    }
    assert_eq!(after[2], before[2], "the fenced monitor's row was written");

    // The flusher gone (the worker stopping): each is written on its own.
    drop(flusher);
    let beats = (0..2)
        .map(|i| (i, Arc::new(health("stopping", at(60))), None))
        .collect();
    let outcomes = heartbeats.submit(group_of(&fleet, beats)).await;
    assert!(
        outcomes.iter().all(|o| o.as_ref().is_some_and(written)),
        "{outcomes:?}"
    );
    for i in 0..2 {
        assert_eq!(fleet.row(i).await.state, "stopping", "monitor {i}");
    }
}
