//! Graph runs with real signed snapshots: the binding follows the
//! executable semantics, and a failure record is fenced by the writer's
//! signature and leaves the snapshot untouched, and a recorded failure
//! fences the run's generation for every writer.

use chrono::Utc;
use radar::config::MonitorConfig;
use radar::graph::{CompiledGraph, FailureDiagnostics, GraphBinding};
use radar::snapshot::{
    CheckpointKey, IncompatibleReason, LoadOutcome, ManagedState, SnapshotBinding, seal,
};
use radar::store::{
    self, Activated, CheckpointStore, CheckpointWriter, Claim, EvidenceRecord, FailureRecord,
    GraphStore, LossReason, NotCommitted, PendingResults, Services, WriteOutcome,
};
use radar_testkit::db;
use radar_testkit::{graph::*, rows};
use serde_json::Value;

fn key() -> CheckpointKey {
    CheckpointKey::new(b"graph-integration-key-0123456789abcdef".to_vec())
}

/// The monitor config a run of `value` would get on `run`'s monitor.
fn config_for(value: Value, run: &Activated) -> MonitorConfig {
    let compiled = CompiledGraph::compile(definition(value)).unwrap();
    let binding = GraphBinding {
        graph_id: uuid::Uuid::nil(),
        graph: "pump-7-graph".into(),
        revision: 9,
        run_id: run.run_id,
        semantics_hash: compiled.semantics_hash().to_string(),
    };
    compiled.monitor_config("probe".into(), binding)
}

struct Fixture {
    graphs: GraphStore,
    checkpoints: CheckpointStore,
    run: Activated,
    config: MonitorConfig,
    _db: db::TestDb,
}

async fn fixture(tag: &str) -> (Fixture, CheckpointWriter) {
    let db = db::migrated_database(tag).await;
    db::enable_graph_authoring(&db).await;
    let pool = store::connect(&db.url, 4, db::STATEMENT_TIMEOUT)
        .await
        .unwrap();
    let graphs = GraphStore::new(pool.clone());
    graphs.publish(definition(example())).await.unwrap();
    let run = graphs.activate("pump-7-graph", 1).await.unwrap();
    let config = Services::new(pool.clone())
        .get(run.service_id)
        .await
        .unwrap()
        .monitor_config()
        .unwrap();
    let checkpoints = CheckpointStore::new(pool, "worker-a");
    let binding = SnapshotBinding::for_monitor(run.service_id, &config);
    let initial = seal(&binding, &ManagedState::default(), Utc::now(), &key()).unwrap();
    let Claim::Won(writer) = checkpoints.claim(&initial).await.unwrap() else {
        panic!("the first snapshot of a new run is claimed")
    };
    (
        Fixture {
            graphs,
            checkpoints,
            run,
            config,
            _db: db,
        },
        writer,
    )
}

async fn open_with(f: &Fixture, config: &MonitorConfig) -> LoadOutcome {
    let stored = f
        .checkpoints
        .load_snapshot(f.run.service_id)
        .await
        .unwrap()
        .unwrap();
    stored.open(
        &SnapshotBinding::for_monitor(f.run.service_id, config),
        &key(),
    )
}

#[tokio::test]
async fn a_layout_only_edit_keeps_recovery_and_a_semantic_edit_invalidates_it() {
    let (f, _writer) = fixture("graph_snap_binding").await;
    assert!(matches!(
        open_with(&f, &f.config).await,
        LoadOutcome::Restored(_)
    ));
    assert!(matches!(
        open_with(&f, &config_for(layout_edit(), &f.run)).await,
        LoadOutcome::Restored(_)
    ));
    let LoadOutcome::Incompatible(refused) =
        open_with(&f, &config_for(semantic_edit(), &f.run)).await
    else {
        panic!("a snapshot restored into other graph semantics")
    };
    // Named from the signed envelope's binding, even for a snapshot that
    // holds no graph state yet.
    assert!(
        matches!(&refused.reason, IncompatibleReason::GraphChanged(c) if c.semantics.is_some()),
        "{:?}",
        refused.reason
    );
}

#[tokio::test]
async fn the_writer_token_records_the_failure_and_the_snapshot_bytes_stay() {
    let (f, writer) = fixture("graph_snap_failure").await;
    let mut conn = db::connect(&f._db).await;
    let before = snapshot_row(&mut conn, f.run.service_id).await;
    let diagnostics = FailureDiagnostics {
        failed_node: "pump".into(),
        node_type: "detector".into(),
        reason: "test".into(),
        frame_ts: Utc::now(),
        frames_applied: 0,
        semantics_hash: f.run.semantics_hash.clone(),
    };
    let token = writer.token();
    let record = f
        .graphs
        .record_failure(
            f.run.run_id,
            f.run.service_id,
            &[token.as_bytes()],
            &diagnostics,
        )
        .await
        .unwrap();
    assert_eq!(record, FailureRecord::Recorded);
    assert_eq!(snapshot_row(&mut conn, f.run.service_id).await, before);
    let inspection = f.graphs.inspect(f.run.run_id).await.unwrap();
    assert_eq!(inspection.run.failed_node.as_deref(), Some("pump"));
    assert!(
        inspection.last_snapshot.is_some(),
        "the last snapshot stays inspectable"
    );
}

#[tokio::test]
async fn a_token_superseded_by_a_later_checkpoint_cannot_record_a_failure() {
    let (f, writer) = fixture("graph_snap_stale").await;
    let stale = writer.token();
    let binding = SnapshotBinding::for_monitor(f.run.service_id, &f.config);
    let next = seal(&binding, &ManagedState::default(), Utc::now(), &key()).unwrap();
    let WriteOutcome::Committed(writer) =
        writer.checkpoint(&next, &PendingResults::default()).await
    else {
        panic!("checkpoint")
    };
    let diagnostics = FailureDiagnostics {
        failed_node: "pump".into(),
        node_type: "detector".into(),
        reason: "test".into(),
        frame_ts: Utc::now(),
        frames_applied: 0,
        semantics_hash: f.run.semantics_hash.clone(),
    };
    let record = f
        .graphs
        .record_failure(
            f.run.run_id,
            f.run.service_id,
            &[stale.as_bytes()],
            &diagnostics,
        )
        .await
        .unwrap();
    assert!(
        matches!(record, FailureRecord::OwnershipLost { .. }),
        "{record:?}"
    );
    a_failure_record_accepts_its_writers_token(&f, &writer).await;
}

#[tokio::test]
async fn a_failure_record_accepts_a_checkpoint_whose_commit_reply_was_lost() {
    let (f, writer) = fixture("graph_snap_lost_reply").await;
    let confirmed = writer.token();
    let binding = SnapshotBinding::for_monitor(f.run.service_id, &f.config);
    let next = seal(&binding, &ManagedState::default(), Utc::now(), &key()).unwrap();
    // The row now holds `next`; its writer never heard back, so it still
    // knows `confirmed` and keeps `next` as possibly committed.
    let WriteOutcome::Committed(_) = writer.checkpoint(&next, &PendingResults::default()).await
    else {
        panic!("checkpoint")
    };
    let diagnostics = FailureDiagnostics {
        failed_node: "pump".into(),
        node_type: "detector".into(),
        reason: "test".into(),
        frame_ts: Utc::now(),
        frames_applied: 0,
        semantics_hash: f.run.semantics_hash.clone(),
    };
    let record = f
        .graphs
        .record_failure(
            f.run.run_id,
            f.run.service_id,
            &[confirmed.as_bytes(), next.token.as_bytes()],
            &diagnostics,
        )
        .await
        .unwrap();
    assert_eq!(record, FailureRecord::Recorded);
}

fn diagnostics(f: &Fixture) -> FailureDiagnostics {
    FailureDiagnostics {
        failed_node: "pump".into(),
        node_type: "detector".into(),
        reason: "test".into(),
        frame_ts: Utc::now(),
        frames_applied: 0,
        semantics_hash: f.run.semantics_hash.clone(),
    }
}

fn fenced_by_failed_run(outcome: WriteOutcome) -> bool {
    matches!(outcome, WriteOutcome::OwnershipLost(lost) if lost.reason == LossReason::FailedRun)
}

#[tokio::test]
async fn a_recorded_failure_fences_the_generation_for_a_replacement_holding_the_same_token() {
    let (f, writer) = fixture("graph_snap_fenced").await;
    let token = writer.token();
    // A replacement admitted before the failure record, resuming from the
    // very snapshot the failing writer last committed.
    let replacement = || {
        f.checkpoints
            .resume(f.run.service_id, token.clone())
            .fenced_by_graph_run()
    };
    let record = f
        .graphs
        .record_failure(
            f.run.run_id,
            f.run.service_id,
            &[token.as_bytes()],
            &diagnostics(&f),
        )
        .await
        .unwrap();
    assert_eq!(record, FailureRecord::Recorded);
    let mut conn = db::connect(&f._db).await;
    let before = snapshot_row(&mut conn, f.run.service_id).await;

    let binding = SnapshotBinding::for_monitor(f.run.service_id, &f.config);
    let next = seal(&binding, &ManagedState::default(), Utc::now(), &key()).unwrap();
    assert!(fenced_by_failed_run(
        replacement()
            .checkpoint(&next, &PendingResults::default())
            .await
    ));
    let mut pending = PendingResults::default();
    pending.evidence.push(EvidenceRecord {
        frame_ts: Utc::now(),
        frame_seq: 1,
        alarm_seq: None,
        score: 9.0,
        threshold: 1.0,
        p_value: 0.001,
        contributions: Default::default(),
    });
    assert!(fenced_by_failed_run(
        replacement().checkpoint(&next, &pending).await
    ));
    assert!(fenced_by_failed_run(
        replacement().commit_evidence(&pending).await
    ));
    // The checkpoint a restarted replacement makes before subscribing.
    let first = replacement().first_checkpoint(&next, None).await;
    assert!(
        matches!(&first, Err(NotCommitted::OwnershipLost(lost)) if lost.reason == LossReason::FailedRun),
        "{first:?}"
    );
    assert_eq!(
        snapshot_row(&mut conn, f.run.service_id).await,
        before,
        "the failed run's last snapshot stays intact"
    );
}

#[tokio::test]
async fn a_checkpoint_waiting_on_the_row_while_the_failure_commits_is_fenced_too() {
    use diesel_async::RunQueryDsl;
    let (f, writer) = fixture("graph_snap_fenced_race").await;
    let writer = writer.fenced_by_graph_run();
    let service = f.run.service_id;
    // The failure record's transaction, held open: the row lock, then the status.
    let mut recorder = db::connect(&f._db).await;
    for statement in [
        "BEGIN".to_string(),
        format!(
            "SELECT 1 FROM radar_runtime_checkpoints WHERE service_id = '{service}' FOR UPDATE"
        ),
        format!(
            "UPDATE graph_runs SET status = 'failed', failed_node = 'pump', diagnostics = '{{}}', \
             updated_at = now(), finished_at = now() WHERE id = '{}'",
            f.run.run_id
        ),
    ] {
        diesel::sql_query(statement)
            .execute(&mut recorder)
            .await
            .unwrap();
    }
    let binding = SnapshotBinding::for_monitor(service, &f.config);
    let next = seal(&binding, &ManagedState::default(), Utc::now(), &key()).unwrap();
    let waiting =
        tokio::spawn(async move { writer.checkpoint(&next, &PendingResults::default()).await });
    let mut watcher = db::connect(&f._db).await;
    rows::wait_for_lock_waiter(&mut watcher, std::time::Duration::from_secs(30)).await;
    diesel::sql_query("COMMIT")
        .execute(&mut recorder)
        .await
        .unwrap();
    assert!(
        fenced_by_failed_run(waiting.await.unwrap()),
        "the CAS on the unchanged token must not commit into the failed generation"
    );
}

/// A replacement that finds no snapshot row (claims afresh) is fenced by
/// the failure record as well, and its claim leaves no row behind.
#[tokio::test]
async fn a_failed_runs_generation_cannot_be_claimed_afresh() {
    use diesel_async::RunQueryDsl;
    let (f, writer) = fixture("graph_snap_fenced_claim").await;
    // The writer records the failure and goes; its row disappears.
    a_failure_record_accepts_its_writers_token(&f, &writer).await;
    let mut conn = db::connect(&f._db).await;
    diesel::sql_query("DELETE FROM radar_runtime_checkpoints WHERE service_id = $1")
        .bind::<diesel::sql_types::Uuid, _>(f.run.service_id)
        .execute(&mut conn)
        .await
        .unwrap();
    let binding = SnapshotBinding::for_monitor(f.run.service_id, &f.config);
    let initial = seal(&binding, &ManagedState::default(), Utc::now(), &key()).unwrap();
    let (claim, found) = f
        .checkpoints
        .first_claim(&initial, None, true)
        .await
        .unwrap();
    assert!(
        matches!(&claim, Claim::Lost(lost) if lost.reason == LossReason::FailedRun),
        "{claim:?}"
    );
    assert_eq!(found, Default::default());
    assert_eq!(
        snapshot_row(&mut conn, f.run.service_id).await,
        "",
        "the refused claim is rolled back"
    );
}

async fn a_failure_record_accepts_its_writers_token(f: &Fixture, writer: &CheckpointWriter) {
    let record = f
        .graphs
        .record_failure(
            f.run.run_id,
            f.run.service_id,
            &[writer.token().as_bytes()],
            &diagnostics(f),
        )
        .await
        .unwrap();
    assert_eq!(record, FailureRecord::Recorded);
}
