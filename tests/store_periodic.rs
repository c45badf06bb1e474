//! The statements a worker runs periodically whatever its load (the
//! coalesced status heartbeat, the worker heartbeat, the clock check) are
//! prepared once per connection and reused. Prepared anew each time (as
//! `sql_query` does), each execution costs PostgreSQL two transactions: one
//! for the `Parse`, one for the execution.
//!
//! So are a checkpoint's own statements (the conditional replace of the
//! snapshot row, the ledger upsert), a restart's alarm reconciliation and
//! a status change written on its own, which every commit, every restart
//! and every monitor's stop run.
//!
//! Counted exactly in the session's own `pg_prepared_statements`: a pool of
//! one connection runs the statements, then reads the view.

use std::{sync::Arc, time::Duration};

use radar_testkit::{db, heartbeat, monitor, poll};

use chrono::{DateTime, Utc};
use diesel::sql_types::{BigInt, Text};
use diesel_async::RunQueryDsl;
use radar::{
    config::MonitorConfig,
    snapshot::{CheckpointKey, ManagedState, SealedSnapshot, SnapshotBinding, seal},
    store::{
        self, CheckpointStore, CheckpointWriter, Claim, HealthOutcome, HealthRecord, Heartbeats,
        PendingResults, Services, WriteOutcome,
        fleet::{self, WorkerAdvert},
    },
};

#[derive(diesel::QueryableByName, Debug)]
struct Prepared {
    #[diesel(sql_type = BigInt)]
    statements: i64,
    #[diesel(sql_type = BigInt)]
    executions: i64,
}

/// This session's prepared statements whose text contains `needle`, and
/// how often they ran.
async fn prepared(pool: &store::Pool, needle: &str) -> Prepared {
    let mut conn = store::checkout(pool).await.unwrap();
    diesel::sql_query(
        "SELECT count(*) AS statements, \
             coalesce(sum(generic_plans + custom_plans), 0)::int8 AS executions \
         FROM pg_prepared_statements WHERE statement LIKE '%' || $1 || '%'",
    )
    .bind::<Text, _>(needle)
    .get_result(&mut conn)
    .await
    .unwrap()
}

/// One monitor in a fresh database, a pool of one connection (so the
/// session's `pg_prepared_statements` holds every statement the test ran)
/// and a store of worker `worker-a` on it.
struct OneConnection {
    _db: db::TestDb,
    pool: store::Pool,
    store: CheckpointStore,
    binding: SnapshotBinding,
    key: CheckpointKey,
}

impl OneConnection {
    async fn new(tag: &str) -> Self {
        let db = db::migrated_database(&format!("{tag}_prepared")).await;
        let pool = store::connect(&db.url, 1, db::STATEMENT_TIMEOUT)
            .await
            .unwrap();
        let config = MonitorConfig::from_toml(&monitor::two_readings(tag, tag)).unwrap();
        let id = Services::new(pool.clone()).create(&config).await.unwrap();
        Self {
            _db: db,
            store: CheckpointStore::new(pool.clone(), "worker-a"),
            pool,
            binding: SnapshotBinding::for_monitor(id, &config),
            key: CheckpointKey::new(b"integration-test-key-0123456789abcdef".to_vec()),
        }
    }

    /// The monitor's empty state, sealed as saved at `at`.
    fn sealed(&self, at: DateTime<Utc>) -> SealedSnapshot {
        seal(&self.binding, &ManagedState::default(), at, &self.key).unwrap()
    }

    /// Claims the monitor's row with `first`.
    async fn claim(&self, first: &SealedSnapshot) -> CheckpointWriter {
        match self.store.claim(first).await.unwrap() {
            Claim::Won(w) => w,
            Claim::Lost(lost) => panic!("{lost}"),
        }
    }
}

fn record() -> HealthRecord {
    HealthRecord {
        state: "running".into(),
        phase: Some("monitoring".into()),
        connected: true,
        processed_count: 0,
        last_checkpoint_at: None,
        recovery: None,
        coverage: None,
        last_error: None,
        heartbeat_at: Utc::now(),
        readings_seen: vec![("flow".into(), None)],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn periodic_statements_are_prepared_once_per_connection() {
    let one = OneConnection::new("periodic").await;
    let pool = one.pool.clone();
    let writer = one.claim(&one.sealed(Utc::now())).await;
    let (heartbeats, mut flusher) = Heartbeats::new(one.store.clone(), Duration::from_secs(3600));
    let advert = WorkerAdvert::this_binary("worker-a".into());

    const ROUNDS: i64 = 3;
    for round in 0..ROUNDS {
        let submit = {
            let heartbeats = heartbeats.clone();
            let reporter = writer.health_reporter();
            let beat = heartbeat::beat(reporter, Arc::new(record()), None);
            tokio::spawn(async move { heartbeat::submit_one(&heartbeats, beat).await })
        };
        poll::within(Duration::from_secs(30))
            .every(poll::QUICK)
            .value("the beat is queued", || flusher.queued(), |&n| n > 0)
            .await;
        assert!(flusher.flush_queued().await);
        let outcome = submit.await.unwrap();
        assert!(
            matches!(outcome, HealthOutcome::Written(_)),
            "round {round}: {outcome:?}"
        );
        fleet::worker_heartbeat(&pool, &advert).await.unwrap();
        store::read_clock(&pool).await.unwrap();
    }

    for needle in [
        "INSERT INTO radar_operational_status",
        "INSERT INTO radar_workers",
        "SELECT now() AS now",
    ] {
        let p = prepared(&pool, needle).await;
        assert_eq!(
            (p.statements, p.executions),
            (1, ROUNDS),
            "`{needle}...` should be prepared once and run {ROUNDS} times on the one connection"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoints_restarts_and_status_changes_are_prepared_once_per_connection() {
    let one = OneConnection::new("commits").await;
    let (pool, store) = (&one.pool, &one.store);
    // Each snapshot saved at its own instant: a token of its own.
    let start = Utc::now();
    let sealed = |n: u64| one.sealed(start + chrono::Duration::milliseconds(n as i64));
    let mut writer = one.claim(&sealed(0)).await;
    let id = writer.service_id();

    // Three restarts (each replaces the row and reconciles the alarms),
    // then three ordinary checkpoints.
    const ROUNDS: i64 = 3;
    for n in 1..=ROUNDS as u64 {
        let resumed = store.resume(id, writer.token());
        let (w, _) = resumed
            .first_checkpoint(&sealed(n), None)
            .await
            .unwrap_or_else(|e| panic!("restart {n}: {e:?}"));
        writer = w;
    }
    for n in 1..=ROUNDS as u64 {
        writer = match writer
            .checkpoint(&sealed(10 + n), &PendingResults::default())
            .await
        {
            WriteOutcome::Committed(w) => w,
            other => panic!("checkpoint {n}: {other:?}"),
        };
    }

    for n in 1..=ROUNDS {
        let outcome = writer.health_reporter().report(&record()).await;
        assert!(
            matches!(outcome, HealthOutcome::Written(_)),
            "status {n}: {outcome:?}"
        );
    }

    for (needle, runs) in [
        ("SELECT $1, $2, $3", ROUNDS),
        ("UPDATE radar_runtime_checkpoints", 2 * ROUNDS),
        // The claim records the first token too.
        ("INSERT INTO radar_checkpoint_ledger", 2 * ROUNDS + 1),
        ("WITH closed AS", ROUNDS),
    ] {
        let p = prepared(pool, needle).await;
        assert_eq!(
            (p.statements, p.executions),
            (1, runs),
            "`{needle}...` should be prepared once and run {runs} times on the one connection"
        );
    }
}
