//! The fenced snapshot store against real PostgreSQL: one winner, refusals
//! after a takeover, atomic checkpoints, lock-free heartbeats, cascades.

use std::{
    collections::BTreeMap,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::Duration,
};

use chrono::{DateTime, TimeZone, Utc};
use diesel::sql_types::{BigInt, Text, Timestamptz};
use diesel_async::{AsyncPgConnection, RunQueryDsl, SimpleAsyncConnection};
use radar::{
    align::Watermarks,
    config::MonitorConfig,
    snapshot::{
        CheckpointKey, FencingToken, LoadOutcome, ManagedState, SealedSnapshot, SnapshotBinding,
        seal,
    },
    store::{
        self, AlarmReconciliation, AlarmRecord, CheckpointStore, CheckpointWriter, Claim,
        EvidenceRecord, HealthOutcome, HealthRecord, NotCommitted, PendingResults, Services,
        WriteKind, WriteOutcome,
    },
};
use radar_testkit::{db, poll};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    sync::Barrier,
};
use uuid::Uuid;

const PUMP: &str = include_str!("../config/monitors/pump.toml");

fn key() -> CheckpointKey {
    CheckpointKey::new(b"integration-test-key-0123456789abcdef".to_vec())
}

fn at(secs: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(1_790_000_000 + secs, 0).unwrap()
}

struct Fixture {
    db: db::TestDb,
    pool: store::Pool,
    service_id: Uuid,
    binding: SnapshotBinding,
}

async fn fixture(tag: &str) -> Fixture {
    let db = db::migrated_database(tag).await;
    let pool = store::connect(&db.url, 12, db::STATEMENT_TIMEOUT)
        .await
        .unwrap();
    let config = MonitorConfig::from_toml(PUMP).unwrap();
    let service_id = Services::new(pool.clone()).create(&config).await.unwrap();
    let binding = SnapshotBinding::for_monitor(service_id, &config);
    Fixture {
        db,
        pool,
        service_id,
        binding,
    }
}

impl Fixture {
    fn store(&self, writer: &str) -> CheckpointStore {
        CheckpointStore::new(self.pool.clone(), writer)
    }

    /// A store whose own pool bounds every statement by `timeout`.
    async fn store_bounded(&self, writer: &str, timeout: Duration) -> CheckpointStore {
        let pool = store::connect(&self.db.url, 2, timeout).await.unwrap();
        CheckpointStore::new(pool, writer)
    }

    /// A snapshot after `frames` frames, saved at `saved_at`.
    fn sealed(&self, frames: u64, saved_at: DateTime<Utc>) -> SealedSnapshot {
        let mut state = ManagedState::default();
        state.counters.frames = frames;
        if frames > 0 {
            state.watermarks = Watermarks(BTreeMap::from([("pressure".to_string(), saved_at)]));
        }
        seal(&self.binding, &state, saved_at, &key()).unwrap()
    }

    async fn conn(&self) -> AsyncPgConnection {
        db::connect(&self.db).await
    }

    async fn claim(&self, writer: &str) -> CheckpointWriter {
        match self
            .store(writer)
            .claim(&self.sealed(0, at(0)))
            .await
            .unwrap()
        {
            Claim::Won(w) => w,
            Claim::Lost(lost) => panic!("{lost}"),
        }
    }

    async fn row_signature(&self) -> Option<Vec<u8>> {
        self.store("reader")
            .load_snapshot(self.service_id)
            .await
            .unwrap()
            .map(|row| row.signature().to_vec())
    }

    async fn count(&self, sql: &str) -> i64 {
        #[derive(diesel::QueryableByName)]
        struct Count {
            #[diesel(sql_type = BigInt)]
            n: i64,
        }
        diesel::sql_query(sql)
            .bind::<diesel::sql_types::Uuid, _>(self.service_id)
            .get_result::<Count>(&mut self.conn().await)
            .await
            .unwrap()
            .n
    }
}

fn committed(outcome: WriteOutcome) -> CheckpointWriter {
    match outcome {
        WriteOutcome::Committed(w) => w,
        WriteOutcome::Failed { error, .. } => panic!("write failed: {error}"),
        WriteOutcome::OwnershipLost(lost) => panic!("{lost}"),
    }
}

fn results(first_frame: i64, n: i64) -> PendingResults {
    PendingResults {
        alarms: vec![AlarmRecord {
            alarm_seq: first_frame as u64,
            opened_at: at(first_frame),
            closed_at: None,
            peak_score: 9.5,
        }],
        evidence: (first_frame..first_frame + n)
            .map(|i| EvidenceRecord {
                frame_ts: at(i),
                frame_seq: i as u64,
                alarm_seq: Some(first_frame as u64),
                score: 9.0,
                threshold: 4.0,
                p_value: 0.001,
                contributions: BTreeMap::from([("pressure".to_string(), 0.7)]),
            })
            .collect(),
    }
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
        readings_seen: vec![
            (
                "pressure".to_string(),
                Some(heartbeat_at - chrono::TimeDelta::seconds(3)),
            ),
            ("flow".to_string(), None),
        ],
        heartbeat_at,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_initial_inserts_have_exactly_one_winner() {
    const WRITERS: usize = 8;
    let fx = Arc::new(fixture("claim_race").await);
    let barrier = Arc::new(Barrier::new(WRITERS));
    let mut tasks = Vec::new();
    for i in 0..WRITERS {
        let (fx, barrier) = (fx.clone(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            // Each worker's first snapshot differs (its own save time).
            let initial = fx.sealed(0, at(0) + chrono::Duration::microseconds(i as i64));
            let store = fx.store(&format!("worker-{i}"));
            barrier.wait().await;
            (initial.token.clone(), store.claim(&initial).await.unwrap())
        }));
    }
    let mut winners = Vec::new();
    let mut losers = 0;
    for task in tasks {
        match task.await.unwrap() {
            (token, Claim::Won(writer)) => winners.push((token, writer)),
            (_, Claim::Lost(lost)) => {
                assert_eq!(lost.refused, WriteKind::InitialSnapshot);
                losers += 1;
            }
        }
    }
    assert_eq!(winners.len(), 1, "exactly one winner");
    assert_eq!(losers, WRITERS - 1);
    let (token, writer) = winners.pop().unwrap();
    assert_eq!(fx.row_signature().await.unwrap(), token.as_bytes());
    assert_eq!(writer.token(), token);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_successor_commits_the_stale_writer_is_refused_everywhere_and_keeps_its_results() {
    let fx = fixture("takeover").await;
    let a = fx.claim("worker-a").await;
    let a_token = a.token();

    // B replaces A (e.g. a start-first rollout): it loads, verifies, commits.
    let b_store = fx.store("worker-b");
    let row = b_store.load_snapshot(fx.service_id).await.unwrap().unwrap();
    let LoadOutcome::Restored(restored) = row.open(&fx.binding, &key()) else {
        panic!("B could not restore");
    };
    let b = b_store.resume(fx.service_id, restored.token.clone());
    let b = committed(
        b.checkpoint(&fx.sealed(1, at(1)), &PendingResults::default())
            .await,
    );

    // A still believes it owns the row: three handles on its token.
    let a_store = fx.store("worker-a");
    let a_pending = results(100, 3);
    let queue_before = a_pending.clone();

    let WriteOutcome::OwnershipLost(lost) = a.checkpoint(&fx.sealed(2, at(2)), &a_pending).await
    else {
        panic!("A's checkpoint was not refused");
    };
    assert_eq!(lost.refused, WriteKind::Checkpoint);
    assert!(
        lost.to_string()
            .contains("another worker committed a successor"),
        "{lost}"
    );

    let a_again = a_store.resume(fx.service_id, a_token.clone());
    let WriteOutcome::OwnershipLost(lost) = a_again.commit_evidence(&a_pending).await else {
        panic!("A's evidence batch was not refused");
    };
    assert_eq!(lost.refused, WriteKind::EvidenceBatch);

    let a_health = a_store.resume(fx.service_id, a_token).health_reporter();
    let HealthOutcome::OwnershipLost(lost) = a_health.report(&health("running", at(3))).await
    else {
        panic!("A's health write was not refused");
    };
    assert_eq!(lost.refused, WriteKind::Health);

    assert_eq!(
        a_pending, queue_before,
        "A's pending results are still queued, unchanged"
    );
    assert_eq!(fx.row_signature().await.unwrap(), b.token().as_bytes());
    let sql = "SELECT count(*) AS n FROM radar_evidence WHERE service_id = $1";
    assert_eq!(fx.count(sql).await, 0, "no evidence of A was written");
    let sql = "SELECT count(*) AS n FROM radar_alarms WHERE service_id = $1";
    assert_eq!(fx.count(sql).await, 0, "no alarm of A was written");
    let sql = "SELECT count(*) AS n FROM radar_operational_status WHERE service_id = $1";
    assert_eq!(fx.count(sql).await, 0, "no status of A was written");

    // The new owner carries on.
    committed(b.commit_evidence(&results(200, 2)).await);
    let sql = "SELECT count(*) AS n FROM radar_evidence WHERE service_id = $1";
    assert_eq!(fx.count(sql).await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_that_lost_ownership_stops_its_own_heartbeats_too() {
    let fx = fixture("lost_heartbeat").await;
    let a = fx.claim("worker-a").await;
    let a_health = a.health_reporter();
    let b = fx.store("worker-b").resume(fx.service_id, a.token());
    committed(
        b.checkpoint(&fx.sealed(1, at(1)), &PendingResults::default())
            .await,
    );
    let WriteOutcome::OwnershipLost(_) = a.commit_evidence(&results(0, 1)).await else {
        panic!("A's evidence batch was not refused");
    };
    let HealthOutcome::OwnershipLost(_) = a_health.report(&health("running", at(2))).await else {
        panic!("A's heartbeat was not refused");
    };
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_heartbeat_follows_its_writer_across_checkpoints() {
    let fx = fixture("heartbeat_follows").await;
    let writer = fx.claim("worker-a").await;
    let reporter = writer.health_reporter();
    let reporter = match reporter.report(&health("running", at(1))).await {
        HealthOutcome::Written(r) => r,
        other => panic!("{other:?}"),
    };
    let writer = committed(
        writer
            .checkpoint(&fx.sealed(1, at(1)), &PendingResults::default())
            .await,
    );
    let HealthOutcome::Written(_) = reporter.report(&health("running", at(2))).await else {
        panic!("the heartbeat after its own writer's checkpoint was refused");
    };
    #[derive(diesel::QueryableByName)]
    struct Status {
        #[diesel(sql_type = Text)]
        fencing_token: String,
        #[diesel(sql_type = Text)]
        worker_id: String,
    }
    let status: Status = diesel::sql_query(
        "SELECT fencing_token, worker_id FROM radar_operational_status WHERE service_id = $1",
    )
    .bind::<diesel::sql_types::Uuid, _>(fx.service_id)
    .get_result(&mut fx.conn().await)
    .await
    .unwrap();
    assert_eq!(status.fencing_token, writer.token().short());
    assert_eq!(status.worker_id, "worker-a");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evidence_in_a_failed_checkpoint_transaction_rolls_back_with_it() {
    let fx = fixture("atomic_checkpoint").await;
    let writer = fx.claim("worker-a").await;
    let before = fx.row_signature().await.unwrap();
    let pending = results(10, 3);

    // Another session holds an uncommitted row for the same alarm, so the
    // checkpoint's alarm upsert waits until its statement timeout fires,
    // after the snapshot update and the evidence insert already ran.
    let mut blocker = fx.conn().await;
    blocker.batch_execute("BEGIN").await.unwrap();
    diesel::sql_query(
        "INSERT INTO radar_alarms (service_id, alarm_seq, opened_at, peak_score, writer_signature) \
         VALUES ($1, 10, $2, 1.0, '\\x00')",
    )
    .bind::<diesel::sql_types::Uuid, _>(fx.service_id)
    .bind::<diesel::sql_types::Timestamptz, _>(at(10))
    .execute(&mut blocker)
    .await
    .unwrap();

    let impatient = fx
        .store_bounded("worker-a", Duration::from_millis(500))
        .await;
    let writer = impatient.resume(fx.service_id, writer.token());
    let next = fx.sealed(3, at(3));
    let WriteOutcome::Failed { writer, error } = writer.checkpoint(&next, &pending).await else {
        panic!("the checkpoint did not fail");
    };
    assert!(
        matches!(error, store::StoreError::Timeout { .. }),
        "{error}"
    );
    assert_eq!(
        fx.row_signature().await.unwrap(),
        before,
        "snapshot rolled back"
    );
    let sql = "SELECT count(*) AS n FROM radar_evidence WHERE service_id = $1";
    assert_eq!(
        fx.count(sql).await,
        0,
        "evidence rolled back with the snapshot"
    );

    // Once the other session gives up, the same results commit on retry.
    blocker.batch_execute("ROLLBACK").await.unwrap();
    let writer = committed(writer.checkpoint(&next, &pending).await);
    assert_eq!(fx.row_signature().await.unwrap(), writer.token().as_bytes());
    let sql = "SELECT count(*) AS n FROM radar_evidence WHERE service_id = $1";
    assert_eq!(fx.count(sql).await, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_heartbeat_lands_while_an_evidence_batch_waits_for_the_row_lock() {
    let fx = fixture("heartbeat_unblocked").await;
    let writer = fx.claim("worker-a").await;
    let reporter = writer.health_reporter();

    // Another connection holds the snapshot row lock in an open transaction.
    let mut locker = fx.conn().await;
    locker.batch_execute("BEGIN").await.unwrap();
    diesel::sql_query(
        "SELECT service_id FROM radar_runtime_checkpoints WHERE service_id = $1 FOR UPDATE",
    )
    .bind::<diesel::sql_types::Uuid, _>(fx.service_id)
    .execute(&mut locker)
    .await
    .unwrap();

    // The writer's evidence batch queues behind it.
    let batch = tokio::spawn(async move { writer.commit_evidence(&results(0, 2)).await });
    let waiting = "SELECT count(*) AS n FROM pg_stat_activity \
                   WHERE datname = current_database() AND wait_event_type = 'Lock' \
                   AND query LIKE '%FOR UPDATE%' AND $1 IS NOT NULL";
    poll::within(Duration::from_secs(10))
        .every(poll::QUICK)
        .wait_async("the evidence batch blocks on the row lock", async || {
            let n = fx.count(waiting).await;
            poll::check(n > 0, || "no session waits for the lock")
        })
        .await;

    // The heartbeat does not wait for the lock. Its writer's clock says
    // September (at(50)); the row is stamped with the database's clock.
    let beat = at(50);
    let HealthOutcome::Written(_) = reporter.report(&health("running", beat)).await else {
        panic!("the heartbeat was refused");
    };
    #[derive(diesel::QueryableByName)]
    struct Beat {
        #[diesel(sql_type = Timestamptz)]
        heartbeat_at: DateTime<Utc>,
        #[diesel(sql_type = Timestamptz)]
        last_checkpoint_at: DateTime<Utc>,
        #[diesel(sql_type = Timestamptz)]
        pressure_seen_at: DateTime<Utc>,
        #[diesel(sql_type = diesel::sql_types::Bool)]
        flow_never: bool,
    }
    let seen: Beat = diesel::sql_query(
        "SELECT heartbeat_at, last_checkpoint_at, \
                (reading_seen_at->>'pressure')::timestamptz AS pressure_seen_at, \
                reading_seen_at->'flow' = 'null'::jsonb AS flow_never \
         FROM radar_operational_status WHERE service_id = $1",
    )
    .bind::<diesel::sql_types::Uuid, _>(fx.service_id)
    .get_result(&mut fx.conn().await)
    .await
    .unwrap();
    let database_now = store::read_clock(&fx.pool).await.unwrap().database_now;
    assert!(
        (database_now - seen.heartbeat_at).num_seconds().abs() <= 10,
        "the heartbeat is visible to other sessions, stamped on the database's clock \
         (not the writer's {beat}): {}",
        seen.heartbeat_at
    );
    assert_eq!(
        seen.heartbeat_at - seen.last_checkpoint_at,
        beat - at(0),
        "the last checkpoint is as old as the writer measured it"
    );
    assert_eq!(
        seen.heartbeat_at - seen.pressure_seen_at,
        chrono::TimeDelta::seconds(3),
        "a reading's newest observation is as old as the writer measured it"
    );
    assert!(seen.flow_never, "a reading without an observation is null");
    assert!(!batch.is_finished(), "the evidence batch is still blocked");
    assert!(
        fx.count(waiting).await > 0,
        "and still waiting in PostgreSQL"
    );

    locker.batch_execute("COMMIT").await.unwrap();
    committed(batch.await.unwrap());
    let sql = "SELECT count(*) AS n FROM radar_evidence WHERE service_id = $1";
    assert_eq!(fx.count(sql).await, 2);
}

#[tokio::test]
async fn a_restored_writer_continues_the_chain_and_evidence_is_not_duplicated() {
    let fx = fixture("restore_chain").await;
    let writer = fx.claim("worker-a").await;
    let writer = committed(
        writer
            .checkpoint(&fx.sealed(2, at(2)), &results(0, 2))
            .await,
    );
    drop(writer);

    let store = fx.store("worker-b");
    let row = store.load_snapshot(fx.service_id).await.unwrap().unwrap();
    assert_eq!(row.writer_id(), "worker-a");
    let LoadOutcome::Restored(restored) = row.open(&fx.binding, &key()) else {
        panic!("not restored");
    };
    assert_eq!(restored.state.counters.frames, 2);
    let writer = store.resume(fx.service_id, restored.token.clone());
    // The same frames again (e.g. re-queued after a failure) are not duplicated.
    let writer = committed(
        writer
            .checkpoint(&fx.sealed(3, at(3)), &results(0, 3))
            .await,
    );
    let sql = "SELECT count(*) AS n FROM radar_evidence WHERE service_id = $1";
    assert_eq!(fx.count(sql).await, 3);
    let sql = "SELECT count(*) AS n FROM radar_alarms WHERE service_id = $1";
    assert_eq!(fx.count(sql).await, 1);
    assert_eq!(fx.row_signature().await.unwrap(), writer.token().as_bytes());
}

#[tokio::test]
async fn a_tampered_row_is_refused_with_the_reason() {
    let fx = fixture("tampered").await;
    fx.claim("worker-a").await;
    let mut conn = fx.conn().await;
    let store = fx.store("reader");
    let edits = [
        (
            "UPDATE radar_runtime_checkpoints SET payload = set_byte(payload, 0, get_byte(payload, 0) # 1) WHERE service_id = $1",
            "digest_mismatch",
        ),
        (
            "UPDATE radar_runtime_checkpoints SET processed_count = processed_count + 1 WHERE service_id = $1",
            "column_mismatch",
        ),
        (
            "UPDATE radar_runtime_checkpoints SET signature = set_byte(signature, 5, get_byte(signature, 5) # 16) WHERE service_id = $1",
            "bad_signature",
        ),
        (
            "UPDATE radar_runtime_checkpoints SET envelope = set_byte(envelope, 20, get_byte(envelope, 20) # 128) WHERE service_id = $1",
            "damaged_envelope",
        ),
    ];
    for (edit, code) in edits {
        fx.claim_fresh_row(&mut conn).await;
        diesel::sql_query(edit)
            .bind::<diesel::sql_types::Uuid, _>(fx.service_id)
            .execute(&mut conn)
            .await
            .unwrap();
        let row = store.load_snapshot(fx.service_id).await.unwrap().unwrap();
        let LoadOutcome::Corrupted(c) = row.open(&fx.binding, &key()) else {
            panic!("{edit} was not detected");
        };
        assert_eq!(c.reason.code(), code, "{edit}: {c}");
    }
}

impl Fixture {
    /// Replaces the row with a fresh, valid initial snapshot.
    async fn claim_fresh_row(&self, conn: &mut AsyncPgConnection) {
        diesel::sql_query("DELETE FROM radar_runtime_checkpoints WHERE service_id = $1")
            .bind::<diesel::sql_types::Uuid, _>(self.service_id)
            .execute(conn)
            .await
            .unwrap();
        self.claim("worker-a").await;
    }
}

#[tokio::test]
async fn deleting_the_service_removes_its_snapshot_row() {
    let fx = fixture("cascade").await;
    fx.claim("worker-a").await;
    assert!(fx.row_signature().await.is_some());
    Services::new(fx.pool.clone())
        .delete(fx.service_id)
        .await
        .unwrap();
    assert!(fx.row_signature().await.is_none());
}

#[tokio::test]
async fn a_status_without_ownership_is_written_only_while_the_row_is_unchanged() {
    let fx = fixture("unowned_status").await;
    let store = fx.store("worker-a");
    // No row yet: a startup failure may be reported.
    assert!(
        store
            .report_unowned(fx.service_id, None, &health("startup_failed", at(1)))
            .await
            .unwrap()
    );
    let writer = fx.claim("worker-b").await;
    // A row appeared since: the failure report would hide the new owner.
    assert!(
        !store
            .report_unowned(fx.service_id, None, &health("startup_failed", at(2)))
            .await
            .unwrap()
    );
    let seen = writer.token();
    assert!(
        store
            .report_unowned(
                fx.service_id,
                Some(seen.as_bytes()),
                &health("startup_failed", at(3))
            )
            .await
            .unwrap()
    );
    committed(
        writer
            .checkpoint(&fx.sealed(1, at(4)), &PendingResults::default())
            .await,
    );
    assert!(
        !store
            .report_unowned(
                fx.service_id,
                Some(seen.as_bytes()),
                &health("startup_failed", at(5))
            )
            .await
            .unwrap()
    );
}

#[tokio::test]
async fn a_refused_start_keeps_the_count_and_checkpoint_it_cannot_know() {
    let fx = fixture("unowned_count").await;
    let writer = fx.claim("worker-b").await;
    let mut owner = health("running", at(2));
    owner.processed_count = 2426;
    let HealthOutcome::Written(_) = writer.health_reporter().report(&owner).await else {
        panic!("the owner's heartbeat was refused");
    };
    let seen = writer.token();
    let mut refused = health("startup_failed", at(3));
    refused.processed_count = 0;
    refused.last_checkpoint_at = None;
    refused.last_error = Some("replayed".into());
    assert!(
        fx.store("worker-a")
            .report_unowned(fx.service_id, Some(seen.as_bytes()), &refused)
            .await
            .unwrap()
    );
    let rows = store::list_status(&fx.pool, true).await.unwrap();
    let row = rows.iter().find(|r| r.monitor_id == fx.service_id).unwrap();
    assert_eq!(row.state, "startup_failed");
    assert_eq!(row.worker_id.as_deref(), Some("worker-a"));
    assert_eq!(row.last_error.as_deref(), Some("replayed"));
    assert_eq!(row.processed_count, 2426, "the refusal restored nothing");
    assert!(row.last_checkpoint_at.is_some(), "{row:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_pooled_connection_carries_the_statement_timeout() {
    let fx = fixture("session_timeout").await;
    let pool = store::connect(&fx.db.url, 2, Duration::from_millis(1234))
        .await
        .unwrap();
    // Both connections of the pool, not just the first one made.
    let (mut a, mut b) = (
        store::checkout(&pool).await.unwrap(),
        store::checkout(&pool).await.unwrap(),
    );
    for conn in [&mut a, &mut b] {
        let shown: Vec<Shown> = diesel::sql_query("SHOW statement_timeout")
            .load(&mut **conn)
            .await
            .unwrap();
        assert_eq!(shown[0].statement_timeout, "1234ms");
    }
}

#[derive(diesel::QueryableByName)]
struct Shown {
    #[diesel(sql_type = diesel::sql_types::Text)]
    statement_timeout: String,
}

/// A checkpoint with no results, on a locked row, fails at the statement
/// timeout, changes nothing, and the same writer commits once the row is
/// free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_checkpoint_on_a_locked_row_times_out_and_commits_after_the_lock() {
    let fx = fixture("lone_checkpoint").await;
    let writer = fx.claim("worker-a").await;
    let before = fx.row_signature().await.unwrap();
    let mut blocker = fx.conn().await;
    blocker.batch_execute("BEGIN").await.unwrap();
    diesel::sql_query("SELECT 1 FROM radar_runtime_checkpoints WHERE service_id = $1 FOR UPDATE")
        .bind::<diesel::sql_types::Uuid, _>(fx.service_id)
        .execute(&mut blocker)
        .await
        .unwrap();

    let impatient = fx
        .store_bounded("worker-a", Duration::from_millis(500))
        .await;
    let writer = impatient.resume(fx.service_id, writer.token());
    let next = fx.sealed(3, at(3));
    let WriteOutcome::Failed { writer, error } =
        writer.checkpoint(&next, &PendingResults::default()).await
    else {
        panic!("the checkpoint did not fail");
    };
    assert!(
        matches!(error, store::StoreError::Timeout { .. }),
        "{error}"
    );
    assert_eq!(fx.row_signature().await.unwrap(), before, "row unchanged");

    blocker.batch_execute("ROLLBACK").await.unwrap();
    let writer = committed(writer.checkpoint(&next, &PendingResults::default()).await);
    assert_eq!(
        fx.row_signature().await.unwrap(),
        next.bytes.signature,
        "the retry committed"
    );
    assert_eq!(writer.token(), next.token);
}

/// A worker frozen inside an evidence transaction (SIGSTOP, a stalled host)
/// holds the row lock without sending anything. The server ends its session
/// after the pool's bound, so a successor's checkpoint commits instead of
/// waiting for as long as the holder stays frozen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_lock_holder_loses_its_session_and_cannot_block_a_takeover() {
    let fx = fixture("frozen_holder").await;
    let writer = fx.claim("worker-a").await;
    let frozen_pool = store::connect(&fx.db.url, 1, Duration::from_millis(800))
        .await
        .unwrap();
    let mut frozen = store::checkout(&frozen_pool).await.unwrap();
    frozen.batch_execute("BEGIN").await.unwrap();
    diesel::sql_query("SELECT 1 FROM radar_runtime_checkpoints WHERE service_id = $1 FOR UPDATE")
        .bind::<diesel::sql_types::Uuid, _>(fx.service_id)
        .execute(&mut *frozen)
        .await
        .unwrap();

    // The successor waits on the lock with the fixture's 30 s statement
    // bound: only the holder's idle bound can free the row well before.
    let successor = fx.store("worker-b").resume(fx.service_id, writer.token());
    let next = fx.sealed(5, at(5));
    let outcome = tokio::time::timeout(
        Duration::from_secs(10),
        successor.checkpoint(&next, &results(5, 2)),
    )
    .await
    .expect("the takeover waited for the frozen holder");
    committed(outcome);
    assert_eq!(fx.row_signature().await.unwrap(), next.bytes.signature);
    assert!(
        frozen.batch_execute("SELECT 1").await.is_err(),
        "the frozen holder's session was ended"
    );
}

/// A database writer without the key cannot forge a snapshot, but it can
/// write back an older row of the same monitor that is validly signed. The
/// ledger, written in each checkpoint's transaction, names the newest
/// commit: the older row verifies yet is refused as a replay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_validly_signed_row_written_back_is_refused_as_a_replay() {
    let fx = fixture("replay").await;
    let writer = fx.claim("worker-a").await;
    let writer = committed(
        writer
            .checkpoint(&fx.sealed(270, at(270)), &PendingResults::default())
            .await,
    );
    let mut conn = fx.conn().await;
    diesel::sql_query(
        "CREATE TEMP TABLE older AS SELECT * FROM radar_runtime_checkpoints WHERE service_id = $1",
    )
    .bind::<diesel::sql_types::Uuid, _>(fx.service_id)
    .execute(&mut conn)
    .await
    .unwrap();
    let writer = committed(
        writer
            .checkpoint(&fx.sealed(620, at(620)), &results(600, 2))
            .await,
    );
    drop(writer);
    diesel::sql_query(
        "UPDATE radar_runtime_checkpoints c SET envelope = o.envelope, \
         processed_count = o.processed_count, observation_history_len = o.observation_history_len, \
         saved_at = o.saved_at, payload_sha256 = o.payload_sha256, signature = o.signature, \
         payload = o.payload FROM older o WHERE c.service_id = o.service_id",
    )
    .execute(&mut conn)
    .await
    .unwrap();

    let row = fx
        .store("worker-b")
        .load_snapshot(fx.service_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(row.ledger_sequence(), Some(3), "claim + two checkpoints");
    let LoadOutcome::Corrupted(refused) = row.open(&fx.binding, &key()) else {
        panic!("the replayed row was not refused");
    };
    assert!(
        matches!(
            refused.reason,
            radar::snapshot::CorruptReason::Replayed { latest: Some(3) }
        ),
        "{refused}"
    );
    assert!(
        refused.to_string().contains("older signed snapshot"),
        "{refused}"
    );
    let inspection = row.inspect(&fx.binding, &key());
    assert_eq!(inspection.exit_code(), 2);
    assert_eq!(inspection.reason_code, Some("replayed"));
}

/// A restart's first checkpoint closes, in its own transaction, the alarms
/// a background batch opened after the snapshot the detector came from
/// (all open ones but the detector's own), at their last evidence frame,
/// and reads the highest stored alarm number; a fresh claim does the same.
#[tokio::test]
async fn a_restarts_first_checkpoint_closes_the_alarms_its_detector_does_not_know_in_its_transaction()
 {
    let fx = fixture("first_reconcile").await;
    let (claim, found) = fx
        .store("worker-a")
        .first_claim(&fx.sealed(0, at(0)), None, false)
        .await
        .unwrap();
    let Claim::Won(writer) = claim else {
        panic!("the first claim wins")
    };
    assert_eq!(found, AlarmReconciliation::default());
    let writer = committed(
        writer
            .checkpoint(&fx.sealed(2, at(2)), &PendingResults::default())
            .await,
    );
    let loaded = writer.token();
    // After that snapshot: alarm 10 (evidence up to frame 12) and alarm 20,
    // the one the restored detector keeps open (as if it had been restored
    // from a later snapshot that knew it).
    let mut batch = results(10, 3);
    batch.alarms.extend(results(20, 1).alarms);
    let writer = committed(writer.commit_evidence(&batch).await);
    drop(writer);

    let next = fx.sealed(2, at(30));
    let (writer, found) = fx
        .store("worker-b")
        .resume(fx.service_id, loaded)
        .first_checkpoint(&next, Some(at(20)))
        .await
        .unwrap();
    assert_eq!(
        found,
        AlarmReconciliation {
            closed: 1,
            highest_seq: 20
        }
    );
    assert_eq!(writer.token(), next.token);

    #[derive(diesel::QueryableByName, Debug, PartialEq)]
    struct AlarmTx {
        #[diesel(sql_type = BigInt)]
        alarm_seq: i64,
        #[diesel(sql_type = diesel::sql_types::Nullable<Timestamptz>)]
        closed_at: Option<DateTime<Utc>>,
        #[diesel(sql_type = diesel::sql_types::Bool)]
        with_new_signature: bool,
        #[diesel(sql_type = diesel::sql_types::Bool)]
        in_checkpoint_tx: bool,
    }
    let alarms: Vec<AlarmTx> = diesel::sql_query(
        "SELECT a.alarm_seq, a.closed_at, a.writer_signature = c.signature AS with_new_signature, \
                a.xmin::text = c.xmin::text AS in_checkpoint_tx \
         FROM radar_alarms a JOIN radar_runtime_checkpoints c USING (service_id) \
         WHERE service_id = $1 ORDER BY a.alarm_seq",
    )
    .bind::<diesel::sql_types::Uuid, _>(fx.service_id)
    .load(&mut fx.conn().await)
    .await
    .unwrap();
    assert_eq!(
        alarms,
        vec![
            AlarmTx {
                alarm_seq: 10,
                closed_at: Some(at(12)),
                with_new_signature: true,
                in_checkpoint_tx: true,
            },
            AlarmTx {
                alarm_seq: 20,
                closed_at: None,
                with_new_signature: false,
                in_checkpoint_tx: false,
            },
        ]
    );
}

/// The statements after a refused swap are sent in the same pipeline and
/// run (rolled back with it): a stale restart's first checkpoint neither
/// closes the owner's open alarm nor advances the ledger, and a losing
/// claim leaves the ledger to the winner.
#[tokio::test]
async fn a_refused_first_checkpoint_or_claim_changes_nothing_the_pipeline_sent_after_it() {
    let fx = fixture("refused_pipeline").await;
    let a = fx.claim("worker-a").await;
    let stale = a.token();
    let a = committed(a.commit_evidence(&results(10, 3)).await);
    let a = committed(
        a.checkpoint(&fx.sealed(2, at(20)), &PendingResults::default())
            .await,
    );
    let ledger = "SELECT sequence AS n FROM radar_checkpoint_ledger WHERE service_id = $1";
    let open = "SELECT count(*) AS n FROM radar_alarms WHERE service_id = $1 AND closed_at IS NULL";
    assert_eq!((fx.count(ledger).await, fx.count(open).await), (2, 1));

    let refused = fx
        .store("worker-b")
        .resume(fx.service_id, stale)
        .first_checkpoint(&fx.sealed(2, at(30)), None)
        .await;
    let Err(NotCommitted::OwnershipLost(lost)) = refused else {
        panic!("a stale first checkpoint was not refused")
    };
    assert_eq!(lost.refused, WriteKind::Checkpoint);
    let (claim, found) = fx
        .store("worker-c")
        .first_claim(&fx.sealed(0, at(40)), None, false)
        .await
        .unwrap();
    assert!(matches!(claim, Claim::Lost(_)), "a second claim lost");
    assert_eq!(found, AlarmReconciliation::default());

    assert_eq!(
        (fx.count(ledger).await, fx.count(open).await),
        (2, 1),
        "the ledger and the owner's open alarm are as the owner left them"
    );
    assert_eq!(fx.row_signature().await.unwrap(), a.token().as_bytes());
}

/// A lock-waiting session of this database: its backend and when its
/// statement started (a backend runs many statements).
#[derive(Debug, Clone, PartialEq, diesel::QueryableByName)]
struct Waiting {
    #[diesel(sql_type = diesel::sql_types::Integer)]
    pid: i32,
    #[diesel(sql_type = Text)]
    started: String,
}

/// A batch of snapshot reads that fails (here its statement times out
/// behind a lock) answers none of its monitors with that failure: each
/// then reads its own row, as it would have alone.
#[tokio::test]
async fn after_a_failed_batch_each_monitor_reads_its_own_snapshot_alone() {
    let fx = fixture("batched_reads_failed").await;
    committed(
        fx.claim("worker-a")
            .await
            .checkpoint(&fx.sealed(1, at(1)), &PendingResults::default())
            .await,
    );
    let mut config = MonitorConfig::from_toml(PUMP).unwrap();
    config.name = "never-checkpointed".to_string();
    let other = Services::new(fx.pool.clone())
        .create(&config)
        .await
        .unwrap();
    let ids = [fx.service_id, other];
    // The batch's statement gives up after 2 s; a lone read must not time
    // out before the lock below is released (a few milliseconds after it
    // starts waiting), even on a loaded machine.
    let store = fx.store_bounded("worker-a", Duration::from_secs(2)).await;
    let summary = |row: Option<store::StoredSnapshot>| {
        row.map(|r| (r.service_id(), r.signature().to_vec(), r.ledger_sequence()))
    };
    let mut alone = Vec::new();
    for id in ids {
        alone.push(summary(store.load_snapshot(id).await.unwrap()));
    }
    assert!(alone[0].is_some() && alone[1].is_none());

    // Reading the ledger waits while this session holds it.
    let mut locker = fx.conn().await;
    locker
        .batch_execute("BEGIN; LOCK TABLE radar_checkpoint_ledger IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    let (reads, reader) = store::SnapshotReads::new(store.clone());
    let mut answers = Box::pin(futures_util::future::join_all(
        ids.iter().map(|id| reads.read(*id)),
    ));
    // One poll queues both requests before the reader runs: one batch.
    poll_once(answers.as_mut()).await;
    let reading = tokio::spawn(reader.run());
    let release = release_the_ledger_once_one_goes_alone(&fx, locker, "reads");
    let (answers, ()) = tokio::join!(answers, release);
    for ((id, answer), expected) in ids.iter().zip(answers).zip(&alone) {
        assert_eq!(&summary(answer.unwrap()), expected, "monitor {id}");
    }
    drop(reads);
    reading.await.unwrap();
}

/// Starting monitors read their snapshots together: each gets its own row,
/// with its ledger entry, exactly as a read alone returns it, and a monitor
/// without a snapshot gets none, however many read at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshots_read_together_answer_each_monitor_as_a_read_alone_would() {
    let fx = fixture("batched_reads").await;
    let services = Services::new(fx.pool.clone());
    let store = fx.store("worker-a");
    let mut ids = vec![fx.service_id];
    committed(
        fx.claim("worker-a")
            .await
            .checkpoint(&fx.sealed(1, at(1)), &PendingResults::default())
            .await,
    );
    for i in 0..3 {
        let mut config = MonitorConfig::from_toml(PUMP).unwrap();
        config.name = format!("batched-{i}");
        let id = services.create(&config).await.unwrap();
        ids.push(id);
        if i < 2 {
            let binding = SnapshotBinding::for_monitor(id, &config);
            let sealed = seal(&binding, &ManagedState::default(), at(i), &key()).unwrap();
            assert!(matches!(store.claim(&sealed).await.unwrap(), Claim::Won(_)));
        }
    }
    let mut alone = Vec::new();
    for id in &ids {
        let row = store.load_snapshot(*id).await.unwrap();
        alone.push(row.map(|r| (r.service_id(), r.signature().to_vec(), r.ledger_sequence())));
    }
    assert_eq!(alone.iter().filter(|r| r.is_none()).count(), 1);
    assert_eq!(alone[0].as_ref().and_then(|r| r.2), Some(2));

    let (reads, reader) = store::SnapshotReads::new(store.clone());
    let reading = tokio::spawn(reader.run());
    let many: Vec<Uuid> = (0..4 * store::MAX_READS_PER_STATEMENT)
        .map(|i| ids[i % ids.len()])
        .collect();
    let answers = futures_util::future::try_join_all(many.iter().map(|id| reads.read(*id)))
        .await
        .unwrap();
    for (id, answer) in many.iter().zip(answers) {
        let i = ids.iter().position(|x| x == id).unwrap();
        let answer = answer.map(|r| (r.service_id(), r.signature().to_vec(), r.ledger_sequence()));
        assert_eq!(answer, alone[i], "monitor {id}");
    }
    let together = store.load_snapshots(&ids).await.unwrap();
    assert_eq!(together.len(), 3, "one entry per stored snapshot");
    drop(reads);
    reading.await.unwrap();

    // With its reader gone (a worker shutting down), a read is made alone.
    let (orphaned, reader) = store::SnapshotReads::new(store.clone());
    drop(reader);
    let row = orphaned.read(ids[0]).await.unwrap();
    let row = row.map(|r| (r.service_id(), r.signature().to_vec(), r.ledger_sequence()));
    assert_eq!(row, alone[0]);
}

/// A monitor of the pump config beside the fixture's, restored from a
/// snapshot `worker-a` claimed and checkpointed once: its id, its binding
/// and the token a restart loads.
async fn restored_beside(fx: &Fixture, name: &str) -> (Uuid, SnapshotBinding, FencingToken) {
    let mut config = MonitorConfig::from_toml(PUMP).unwrap();
    config.name = name.to_string();
    let id = Services::new(fx.pool.clone())
        .create(&config)
        .await
        .unwrap();
    let binding = SnapshotBinding::for_monitor(id, &config);
    let sealed = |frames: u64| sealed_after(&binding, frames, at(frames as i64));
    let Claim::Won(writer) = fx.store("worker-a").claim(&sealed(0)).await.unwrap() else {
        panic!("{name}: the first claim wins")
    };
    let writer = committed(
        writer
            .checkpoint(&sealed(2), &PendingResults::default())
            .await,
    );
    (id, binding, writer.token())
}

/// What a restart's first checkpoint left in the database: the row's
/// signature, its ledger sequence, its open alarms and the transaction
/// that last wrote the row.
#[derive(diesel::QueryableByName, Debug, PartialEq)]
struct FirstWritten {
    #[diesel(sql_type = diesel::sql_types::Bytea)]
    signature: Vec<u8>,
    #[diesel(sql_type = BigInt)]
    sequence: i64,
    #[diesel(sql_type = BigInt)]
    open_alarms: i64,
    #[diesel(sql_type = Text)]
    xmin: String,
}

async fn first_written(fx: &Fixture, id: Uuid) -> FirstWritten {
    diesel::sql_query(
        "SELECT c.signature, l.sequence, c.xmin::text AS xmin, \
           (SELECT count(*) FROM radar_alarms a WHERE a.service_id = c.service_id \
              AND a.closed_at IS NULL) AS open_alarms \
         FROM radar_runtime_checkpoints c JOIN radar_checkpoint_ledger l USING (service_id) \
         WHERE c.service_id = $1",
    )
    .bind::<diesel::sql_types::Uuid, _>(id)
    .get_result(&mut fx.conn().await)
    .await
    .unwrap()
}

/// Restarting monitors write their first checkpoints together, each as it
/// would alone: one transaction commits the swap, the ledger entry and the
/// alarm reconciliation of every monitor whose row holds a signature it
/// accepts; a monitor whose row was replaced by another worker is refused
/// and nothing is written for it; a row another transaction holds does not
/// hold up the others, and its monitor then writes alone.
#[tokio::test]
async fn first_checkpoints_written_together_answer_each_monitor_as_one_written_alone() {
    let fx = fixture("first_together").await;
    // The fixture's monitor: an alarm a background batch committed after
    // the snapshot a restart loads, which the restart closes.
    let writer = committed(
        fx.claim("worker-a")
            .await
            .checkpoint(&fx.sealed(2, at(2)), &PendingResults::default())
            .await,
    );
    let orphan_loaded = writer.token();
    drop(committed(writer.commit_evidence(&results(10, 3)).await));
    let (plain, plain_binding, plain_loaded) = restored_beside(&fx, "plain").await;
    let (stale, stale_binding, stale_loaded) = restored_beside(&fx, "stale").await;
    let (locked, locked_binding, locked_loaded) = restored_beside(&fx, "locked").await;
    // Another worker replaced the stale monitor's row after the load.
    let next_of = |binding: &SnapshotBinding| sealed_after(binding, 2, at(30));
    let successor = committed(
        fx.store("worker-c")
            .resume(stale, stale_loaded.clone())
            .checkpoint(&next_of(&stale_binding), &PendingResults::default())
            .await,
    );
    let stale_before = first_written(&fx, stale).await;
    assert_eq!(stale_before.signature, successor.token().as_bytes());

    let mut locker = fx.conn().await;
    locker
        .batch_execute(&format!(
            "BEGIN; SELECT 1 FROM radar_runtime_checkpoints WHERE service_id = '{locked}' FOR UPDATE"
        ))
        .await
        .unwrap();
    // A batch that waited for the locked row would give up after 2 s.
    let store = fx.store_bounded("worker-b", Duration::from_secs(2)).await;
    let (firsts, writing) = store::FirstCheckpoints::new(store.clone());
    let orphan_next = fx.sealed(2, at(30));
    let (plain_next, stale_next, locked_next) = (
        next_of(&plain_binding),
        next_of(&stale_binding),
        next_of(&locked_binding),
    );
    let together = |id, loaded, next| {
        store
            .resume(id, loaded)
            .first_checkpoint_together(&firsts, next, None)
    };
    let mut three = Box::pin(futures_util::future::join3(
        together(fx.service_id, orphan_loaded, &orphan_next),
        together(plain, plain_loaded, &plain_next),
        together(stale, stale_loaded, &stale_next),
    ));
    let mut alone = Box::pin(together(locked, locked_loaded, &locked_next));
    // One poll queues all four requests before the writer runs: one batch.
    poll_once(three.as_mut()).await;
    poll_once(alone.as_mut()).await;
    let writer_task = tokio::spawn(writing.run());
    let (orphan_done, plain_done, stale_done) = three.await;
    let (_, orphan_found) = orphan_done.unwrap();
    let (_, plain_found) = plain_done.unwrap();
    let Err(NotCommitted::OwnershipLost(lost)) = stale_done else {
        panic!("a stale first checkpoint written together was not refused")
    };
    assert_eq!(lost.refused, WriteKind::Checkpoint);
    assert_eq!(
        (orphan_found, plain_found),
        (
            AlarmReconciliation {
                closed: 1,
                highest_seq: 10
            },
            AlarmReconciliation::default()
        )
    );
    // The locked monitor waits for its row, alone.
    std::future::poll_fn(|cx| {
        assert!(
            alone.as_mut().poll(cx).is_pending(),
            "committed under another's lock"
        );
        std::task::Poll::Ready(())
    })
    .await;
    locker.batch_execute("COMMIT").await.unwrap();
    let (_, locked_found) = alone.await.unwrap();
    assert_eq!(locked_found, AlarmReconciliation::default());

    let orphan_row = first_written(&fx, fx.service_id).await;
    let plain_row = first_written(&fx, plain).await;
    let locked_row = first_written(&fx, locked).await;
    assert_eq!(
        (
            &orphan_row.signature,
            orphan_row.sequence,
            orphan_row.open_alarms
        ),
        (&orphan_next.token.as_bytes().to_vec(), 3, 0)
    );
    assert_eq!(
        (&plain_row.signature, plain_row.sequence),
        (&plain_next.token.as_bytes().to_vec(), 3)
    );
    assert_eq!(
        (&locked_row.signature, locked_row.sequence),
        (&locked_next.token.as_bytes().to_vec(), 3)
    );
    assert_eq!(
        orphan_row.xmin, plain_row.xmin,
        "one transaction wrote both"
    );
    assert_ne!(
        locked_row.xmin, plain_row.xmin,
        "the locked row was written alone"
    );
    assert_eq!(
        first_written(&fx, stale).await,
        stale_before,
        "nothing was written for the refused monitor"
    );
    drop(firsts);
    writer_task.await.unwrap();
}

/// A batch of first checkpoints whose transaction fails (here its ledger
/// entries time out behind a lock) hands none of its monitors that
/// failure: each then writes its own, as it would have alone.
#[tokio::test]
async fn after_a_failed_batch_each_monitor_writes_its_first_checkpoint_alone() {
    let fx = fixture("first_together_failed").await;
    let restarts = two_restarts(&fx).await;
    // The batch's statements give up after 2 s; a lone write must not time
    // out before the lock below is released (a few milliseconds after it
    // starts waiting), even on a loaded machine.
    let store = fx.store_bounded("worker-b", Duration::from_secs(2)).await;
    let mut locker = fx.conn().await;
    locker
        .batch_execute("BEGIN; LOCK TABLE radar_checkpoint_ledger IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    let (firsts, writing) = store::FirstCheckpoints::new(store.clone());
    let both = both_queued(&store, &firsts, &restarts).await;
    let writer_task = tokio::spawn(writing.run());
    let release = release_the_ledger_once_one_goes_alone(&fx, locker, "writes");
    let (done, ()) = tokio::join!(both, release);
    // The failed batch rolled back: one ledger entry, the lone write's.
    each_first_written(&fx, &restarts, done, 3).await;
    drop(firsts);
    writer_task.await.unwrap();
}

/// A monitor restored beside the fixture's: its id, the token its restart
/// loaded, and the first checkpoint the restart writes.
type Restart = (Uuid, FencingToken, SealedSnapshot);

/// Two monitors restored beside the fixture's, restarting.
async fn two_restarts(fx: &Fixture) -> [Restart; 2] {
    let restart = async |name: &str| {
        let (id, binding, loaded) = restored_beside(fx, name).await;
        (id, loaded, sealed_after(&binding, 2, at(30)))
    };
    [restart("one").await, restart("two").await]
}

type FirstDone = Result<(CheckpointWriter, AlarmReconciliation), NotCommitted>;

/// Both restarts' first checkpoints asked of `firsts` together: one poll
/// queues both requests before the writer runs, so they make one batch.
async fn both_queued<'a>(
    store: &'a CheckpointStore,
    firsts: &'a store::FirstCheckpoints,
    restarts: &'a [Restart; 2],
) -> std::pin::Pin<Box<impl Future<Output = (FirstDone, FirstDone)> + 'a>> {
    let write = |(id, loaded, next): &'a Restart| {
        store
            .resume(*id, loaded.clone())
            .first_checkpoint_together(firsts, next, None)
    };
    let mut both = Box::pin(futures_util::future::join(
        write(&restarts[0]),
        write(&restarts[1]),
    ));
    poll_once(both.as_mut()).await;
    both
}

/// Each restart committed its first checkpoint, found no alarm to
/// reconcile, and its ledger stands at `sequence`.
async fn each_first_written(
    fx: &Fixture,
    restarts: &[Restart; 2],
    (one, two): (FirstDone, FirstDone),
    sequence: i64,
) {
    for ((id, _, next), done) in restarts.iter().zip([one, two]) {
        let (writer, found) = done.unwrap_or_else(|e| panic!("monitor {id}: {e:?}"));
        assert_eq!(found, AlarmReconciliation::default());
        assert_eq!(writer.token(), next.token);
        let row = first_written(fx, *id).await;
        assert_eq!(
            (row.signature, row.sequence),
            (next.token.as_bytes().to_vec(), sequence)
        );
    }
}

/// Waits until a batch's statement waits for the ledger `locker` holds,
/// then (the batch timed out) until a statement that started waiting
/// after it does: a monitor that `verb` alone. Then releases the ledger.
async fn release_the_ledger_once_one_goes_alone(
    fx: &Fixture,
    mut locker: AsyncPgConnection,
    verb: &str,
) {
    let deadline = poll::within(Duration::from_secs(10)).every(poll::QUICK);
    let batch = deadline
        .wait_async("the batch waits for the ledger", async || {
            let now = ledger_waiters(fx).await;
            if now.is_empty() { Err(now) } else { Ok(now) }
        })
        .await;
    deadline
        .wait_async(
            &format!("a monitor {verb} alone after the batch failed"),
            async || {
                let now = ledger_waiters(fx).await;
                poll::check(now.iter().any(|w| !batch.contains(w)), || now)
            },
        )
        .await;
    locker.batch_execute("COMMIT").await.unwrap();
}

/// Polls `future` once: whatever it sends on its first poll is queued
/// before anything else runs (requests gathered into one batch).
async fn poll_once<F: Future>(future: std::pin::Pin<&mut F>) {
    let mut future = Some(future);
    std::future::poll_fn(|cx| {
        if let Some(f) = future.take() {
            let _ = f.poll(cx);
        }
        std::task::Poll::Ready(())
    })
    .await;
}

/// A snapshot of `binding` after `frames` frames, saved at `saved_at`.
fn sealed_after(binding: &SnapshotBinding, frames: u64, saved_at: DateTime<Utc>) -> SealedSnapshot {
    let mut state = ManagedState::default();
    state.counters.frames = frames;
    seal(binding, &state, saved_at, &key()).unwrap()
}

/// The sessions of this database waiting for a lock with a statement on
/// the ledger.
async fn ledger_waiters(fx: &Fixture) -> Vec<Waiting> {
    diesel::sql_query(
        "SELECT pid, query_start::text AS started FROM pg_stat_activity \
         WHERE datname = current_database() AND wait_event_type = 'Lock' \
         AND query LIKE '%radar_checkpoint_ledger%' AND query NOT LIKE '%LOCK TABLE%'",
    )
    .load::<Waiting>(&mut fx.conn().await)
    .await
    .unwrap()
}

/// A TCP relay to PostgreSQL that, once armed, lets the next `COMMIT`
/// through to the server, waits until the server confirms it, and keeps
/// the confirmation: after `hold` it closes the client's connection. The
/// transaction committed and its client cannot know.
struct CommitReplyCutter {
    port: u16,
    shared: Arc<Cutting>,
}

/// What every relayed connection shares with the cutter.
struct Cutting {
    armed: AtomicBool,
    cut: AtomicUsize,
    closed: AtomicUsize,
    hold: Duration,
}

/// PostgreSQL's CommandComplete message for a successful `COMMIT`.
const COMMIT_COMPLETE: &[u8] = b"C\0\0\0\x0bCOMMIT\0";

impl CommitReplyCutter {
    async fn start(server_url: &str, hold: Duration) -> Self {
        let server = server_address(server_url);
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let shared = Arc::new(Cutting {
            armed: AtomicBool::new(false),
            cut: AtomicUsize::new(0),
            closed: AtomicUsize::new(0),
            hold,
        });
        let relayed = shared.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(upstream) = TcpStream::connect(&server).await else {
                    continue;
                };
                tokio::spawn(relay(client, upstream, relayed.clone()));
            }
        });
        Self { port, shared }
    }

    /// `url` with its server replaced by this relay.
    fn url(&self, url: &str) -> String {
        url.replacen(&server_address(url), &format!("127.0.0.1:{}", self.port), 1)
    }

    fn arm(&self) {
        self.shared.armed.store(true, Ordering::SeqCst);
    }

    fn cuts(&self) -> usize {
        AtomicUsize::load(&self.shared.cut, Ordering::SeqCst)
    }

    /// Waits until the connection whose confirmation was kept is closed.
    async fn wait_closed(&self) {
        poll::within(Duration::from_secs(10))
            .wait_async("the cut connection closed", async || {
                let closed = AtomicUsize::load(&self.shared.closed, Ordering::SeqCst);
                poll::check(closed > 0, || closed)
            })
            .await;
    }
}

/// `host:port` of a `postgres://user@host:port/...` URL.
fn server_address(url: &str) -> String {
    let rest = url.split_once('@').map_or(url, |(_, rest)| rest);
    rest.split('/').next().unwrap().to_string()
}

async fn relay(client: TcpStream, server: TcpStream, cutter: Arc<Cutting>) {
    let (mut from_client, mut to_client) = client.into_split();
    let (mut from_server, mut to_server) = server.into_split();
    let cutting = Arc::new(AtomicBool::new(false));
    let (flag, armed) = (cutting.clone(), cutter.clone());
    let upward = tokio::spawn(async move {
        let mut buf = vec![0u8; 64 * 1024];
        while let Ok(n) = from_client.read(&mut buf).await
            && n > 0
        {
            let chunk = &buf[..n];
            // Set before the COMMIT reaches the server, so its reply is held.
            if chunk.windows(6).any(|w| w == b"COMMIT") && armed.armed.swap(false, Ordering::SeqCst)
            {
                flag.store(true, Ordering::SeqCst);
            }
            if to_server.write_all(chunk).await.is_err() {
                return;
            }
        }
    });
    let mut buf = vec![0u8; 64 * 1024];
    let mut held = Vec::new();
    while let Ok(n) = from_server.read(&mut buf).await
        && n > 0
    {
        if AtomicBool::load(&cutting, Ordering::SeqCst) {
            held.extend_from_slice(&buf[..n]);
            if held
                .windows(COMMIT_COMPLETE.len())
                .any(|w| w == COMMIT_COMPLETE)
            {
                cutter.cut.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(cutter.hold).await;
                upward.abort();
                cutter.closed.fetch_add(1, Ordering::SeqCst);
                return;
            }
        } else if to_client.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    upward.abort();
}

/// A checkpoint whose COMMIT reached the server but whose confirmation
/// was lost fails as far as its writer can tell; the row holds it anyway.
/// The writer keeps that checkpoint's signature as one it may own, so its
/// next checkpoint is accepted instead of being refused as a takeover.
/// The connection closes (a database error) ...
#[tokio::test]
async fn a_checkpoint_whose_commit_confirmation_is_lost_is_accepted_by_the_next_write() {
    next_write_after_a_lost_confirmation("commit_reply_lost", Duration::ZERO).await;
}

/// ... or stays silent until the writer's own bound gives up (a timeout).
#[tokio::test]
async fn a_checkpoint_whose_commit_confirmation_never_comes_is_accepted_by_the_next_write() {
    next_write_after_a_lost_confirmation("commit_reply_late", Duration::from_secs(5)).await;
}

async fn next_write_after_a_lost_confirmation(tag: &str, hold: Duration) {
    let fx = fixture(tag).await;
    let writer = fx.claim("worker-a").await;
    let cutter = CommitReplyCutter::start(&fx.db.url, hold).await;
    // Statements bounded by 1.5 s (room for a loaded machine): the writer
    // gives up on a COMMIT after twice that, before a held confirmation's
    // connection closes.
    let pool = store::connect(&cutter.url(&fx.db.url), 2, Duration::from_millis(1500))
        .await
        .unwrap();
    let writer = CheckpointStore::new(pool, "worker-a").resume(fx.service_id, writer.token());
    let lost = fx.sealed(2, at(2));
    cutter.arm();
    let WriteOutcome::Failed { writer, error } =
        writer.checkpoint(&lost, &PendingResults::default()).await
    else {
        panic!("the checkpoint whose confirmation was lost did not fail");
    };
    assert_eq!(cutter.cuts(), 1, "{error}");
    let timed_out = matches!(error, store::StoreError::Timeout { .. });
    assert_eq!(timed_out, !hold.is_zero(), "{error}");
    assert_eq!(
        fx.row_signature().await.unwrap(),
        lost.bytes.signature,
        "the lost checkpoint committed"
    );
    cutter.wait_closed().await;
    let next = fx.sealed(3, at(3));
    let writer = committed(writer.checkpoint(&next, &PendingResults::default()).await);
    assert_eq!(writer.token(), next.token);
    assert_eq!(fx.row_signature().await.unwrap(), next.bytes.signature);
}

/// Restarting monitors whose batch COMMIT reached the server but whose
/// confirmation was lost each write their first checkpoint again alone,
/// and the row that already holds it is accepted as their own.
#[tokio::test]
async fn first_checkpoints_whose_batch_confirmation_is_lost_are_accepted_when_written_alone() {
    let fx = fixture("first_reply_lost").await;
    let restarts = two_restarts(&fx).await;
    let cutter = CommitReplyCutter::start(&fx.db.url, Duration::ZERO).await;
    let pool = store::connect(&cutter.url(&fx.db.url), 2, db::STATEMENT_TIMEOUT)
        .await
        .unwrap();
    let store = CheckpointStore::new(pool, "worker-b");
    let (firsts, writing) = store::FirstCheckpoints::new(store.clone());
    let both = both_queued(&store, &firsts, &restarts).await;
    cutter.arm();
    let writer_task = tokio::spawn(writing.run());
    let done = both.await;
    assert_eq!(cutter.cuts(), 1, "the batch's confirmation was cut");
    // Two ledger entries after the restore's: the batch's, which
    // committed, and the lone write's.
    each_first_written(&fx, &restarts, done, 4).await;
    drop(firsts);
    writer_task.await.unwrap();
}
