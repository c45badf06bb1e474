//! Failure records, fencing of failed generations, admission and stopping
//! of graph runs against real PostgreSQL.

use std::time::Duration;

use diesel::sql_types::{Bytea, Uuid as SqlUuid};
use diesel_async::RunQueryDsl;
use radar::graph::LAUNCH_CONTRACT_VERSION;
use radar::store::{self, Admission, AdmissionRefusal, FailureRecord, StopOutcome};
use radar_testkit::db;
use radar_testkit::{graph::*, rows};
use uuid::Uuid;

#[tokio::test]
async fn a_failure_commits_status_and_diagnostics_and_leaves_the_snapshot_alone() {
    let (_db, graphs, mut conn) = setup("graph_fail_commit").await;
    let run = running(&graphs, &mut conn).await;
    let before = snapshot_row(&mut conn, run.service_id).await;
    let record = graphs
        .record_failure(run.run_id, run.service_id, &[&TOKEN], &diagnostics("boom"))
        .await
        .unwrap();
    assert_eq!(record, FailureRecord::Recorded);
    let stored = graphs.run(run.run_id).await.unwrap();
    assert_eq!(stored.status, "failed");
    assert_eq!(stored.failed_node.as_deref(), Some("boom"));
    assert_eq!(stored.diagnostics.unwrap()["frames_applied"], 3);
    assert!(stored.finished_at.is_some());
    assert_eq!(
        snapshot_row(&mut conn, run.service_id).await,
        before,
        "the last snapshot stays intact"
    );
    // A retry whose first COMMIT reply was lost finds it done.
    assert_eq!(
        graphs
            .record_failure(run.run_id, run.service_id, &[&TOKEN], &diagnostics("boom"))
            .await
            .unwrap(),
        FailureRecord::AlreadyRecorded
    );
}

#[tokio::test]
async fn a_stale_signature_cannot_record_a_failure() {
    let (_db, graphs, mut conn) = setup("graph_fail_stale").await;
    let run = running(&graphs, &mut conn).await;
    put_snapshot(&mut conn, run.service_id, &[0x11; 32]).await;
    let record = graphs
        .record_failure(run.run_id, run.service_id, &[&TOKEN], &diagnostics("boom"))
        .await
        .unwrap();
    assert!(
        matches!(record, FailureRecord::OwnershipLost { .. }),
        "{record:?}"
    );
    assert_eq!(graphs.run(run.run_id).await.unwrap().status, "running");
}

#[tokio::test]
async fn a_failure_waits_for_the_snapshot_row_lock_and_rechecks_the_signature() {
    let (db, graphs, mut conn) = setup("graph_fail_lock").await;
    let run = running(&graphs, &mut conn).await;
    // Another writer holds the row (as an evidence batch would) and commits
    // a successor snapshot while the failure record waits.
    let mut other = db::connect(&db).await;
    diesel::sql_query("BEGIN")
        .execute(&mut other)
        .await
        .unwrap();
    diesel::sql_query("SELECT 1 FROM radar_runtime_checkpoints WHERE service_id = $1 FOR UPDATE")
        .bind::<SqlUuid, _>(run.service_id)
        .execute(&mut other)
        .await
        .unwrap();
    let waiting = {
        let graphs = graphs.clone();
        tokio::spawn(async move {
            graphs
                .record_failure(run.run_id, run.service_id, &[&TOKEN], &diagnostics("boom"))
                .await
        })
    };
    rows::wait_for_lock_waiter(&mut conn, Duration::from_secs(10)).await;
    diesel::sql_query("UPDATE radar_runtime_checkpoints SET signature = $2 WHERE service_id = $1")
        .bind::<SqlUuid, _>(run.service_id)
        .bind::<Bytea, _>(vec![0x22u8; 32])
        .execute(&mut other)
        .await
        .unwrap();
    diesel::sql_query("COMMIT")
        .execute(&mut other)
        .await
        .unwrap();
    let record = waiting.await.unwrap().unwrap();
    assert!(
        matches!(record, FailureRecord::OwnershipLost { .. }),
        "{record:?}"
    );
    assert_eq!(graphs.run(run.run_id).await.unwrap().status, "running");
}

#[tokio::test]
async fn a_failure_names_only_its_own_run_and_monitor() {
    let (_db, graphs, mut conn) = setup("graph_fail_identity").await;
    let first = running(&graphs, &mut conn).await;
    let second = running(&graphs, &mut conn).await;
    // The second run's monitor with the first run's id.
    put_snapshot(&mut conn, second.service_id, &TOKEN).await;
    let record = graphs
        .record_failure(
            first.run_id,
            second.service_id,
            &[&TOKEN],
            &diagnostics("boom"),
        )
        .await
        .unwrap();
    assert!(
        matches!(record, FailureRecord::IdentityMismatch { .. }),
        "{record:?}"
    );
    for run in [&first, &second] {
        assert_eq!(graphs.run(run.run_id).await.unwrap().status, "running");
    }
}

#[tokio::test]
async fn a_failure_found_while_stopping_fails_that_run_and_never_its_successor() {
    let (_db, graphs, mut conn) = setup("graph_fail_stopping").await;
    let old = running(&graphs, &mut conn).await;
    assert_eq!(
        graphs.stop(old.run_id).await.unwrap(),
        StopOutcome::Stopping
    );
    let successor = running(&graphs, &mut conn).await;
    let record = graphs
        .record_failure(old.run_id, old.service_id, &[&TOKEN], &diagnostics("boom"))
        .await
        .unwrap();
    assert_eq!(record, FailureRecord::Recorded);
    let old_row = graphs.run(old.run_id).await.unwrap();
    assert_eq!(
        (old_row.status.as_str(), old_row.lifecycle_intent.as_str()),
        ("failed", "stopping")
    );
    let next = graphs.run(successor.run_id).await.unwrap();
    assert_eq!((next.status.as_str(), next.failed_node), ("running", None));
    // And it cannot be aimed at the successor with the old monitor's token.
    let record = graphs
        .record_failure(
            successor.run_id,
            old.service_id,
            &[&TOKEN],
            &diagnostics("boom"),
        )
        .await
        .unwrap();
    assert!(
        matches!(record, FailureRecord::IdentityMismatch { .. }),
        "{record:?}"
    );
    assert_eq!(
        graphs.run(successor.run_id).await.unwrap().status,
        "running"
    );
}

#[tokio::test]
async fn late_admission_of_a_failed_generation_is_refused() {
    let (_db, graphs, mut conn) = setup("graph_admit_failed").await;
    let run = running(&graphs, &mut conn).await;
    graphs
        .record_failure(run.run_id, run.service_id, &[&TOKEN], &diagnostics("boom"))
        .await
        .unwrap();
    // A task that was scheduled before the failure and starts only now.
    let Admission::Refused(refusal) = graphs.admit(run.run_id, run.service_id).await.unwrap()
    else {
        panic!("a failed generation was admitted")
    };
    assert!(
        matches!(
            refusal,
            AdmissionRefusal::TerminalGeneration { generation: 1, .. }
        ),
        "{refusal}"
    );
    assert_eq!(graphs.run(run.run_id).await.unwrap().status, "failed");
}

#[tokio::test]
async fn admission_checks_the_lifecycle_intent() {
    let (db, graphs, mut conn) = setup("graph_admit_intent").await;
    let never_started = graphs.activate("pump-7-graph", 1).await.unwrap();
    assert_eq!(
        graphs.stop(never_started.run_id).await.unwrap(),
        StopOutcome::Stopped
    );
    assert!(matches!(
        graphs
            .admit(never_started.run_id, never_started.service_id)
            .await
            .unwrap(),
        Admission::Refused(AdmissionRefusal::TerminalGeneration { .. })
    ));

    let run = running(&graphs, &mut conn).await;
    assert_eq!(
        graphs.stop(run.run_id).await.unwrap(),
        StopOutcome::Stopping
    );
    let Admission::Refused(refusal) = graphs.admit(run.run_id, run.service_id).await.unwrap()
    else {
        panic!("a stopping run was admitted")
    };
    assert_eq!(
        refusal,
        AdmissionRefusal::LifecycleIntent {
            run_id: run.run_id,
            intent: "stopping".into()
        }
    );
    assert!(
        graphs
            .mark_stopped(run.run_id, run.service_id)
            .await
            .unwrap()
    );
    assert!(matches!(
        graphs.admit(run.run_id, run.service_id).await.unwrap(),
        Admission::Refused(AdmissionRefusal::TerminalGeneration { .. })
    ));
    assert_eq!(
        graphs.stop(run.run_id).await.unwrap(),
        StopOutcome::AlreadyStopped
    );
    let service = store::Services::new(
        store::connect(&db.url, 1, db::STATEMENT_TIMEOUT)
            .await
            .unwrap(),
    );
    assert!(
        service.get(run.service_id).await.unwrap().is_retired(),
        "a stopped run's monitor is retired"
    );
}

#[tokio::test]
async fn a_run_of_another_launch_contract_is_refused_with_the_way_out() {
    let (_db, graphs, mut conn) = setup("graph_admit_contract").await;
    let run = graphs.activate("pump-7-graph", 1).await.unwrap();
    assert_eq!(
        graphs.run(run.run_id).await.unwrap().launch_contract,
        LAUNCH_CONTRACT_VERSION
    );
    diesel::sql_query("UPDATE graph_runs SET launch_contract = launch_contract + 1 WHERE id = $1")
        .bind::<SqlUuid, _>(run.run_id)
        .execute(&mut conn)
        .await
        .unwrap();
    let Admission::Refused(refusal) = graphs.admit(run.run_id, run.service_id).await.unwrap()
    else {
        panic!("a run of an unknown launch contract was admitted")
    };
    let text = refusal.to_string();
    assert!(
        matches!(refusal, AdmissionRefusal::LaunchContract { .. }),
        "{text}"
    );
    assert!(
        text.contains("upgrade radar") && text.contains("restore procedure"),
        "{text}"
    );
    assert_eq!(graphs.run(run.run_id).await.unwrap().status, "starting");
}

#[tokio::test]
async fn admission_names_the_wrong_monitor() {
    let (_db, graphs, _conn) = setup("graph_admit_service").await;
    let run = graphs.activate("pump-7-graph", 1).await.unwrap();
    let other = Uuid::new_v4();
    assert!(matches!(
        graphs.admit(run.run_id, other).await.unwrap(),
        Admission::Refused(AdmissionRefusal::ServiceMismatch { .. })
    ));
    assert!(matches!(
        graphs.admit(Uuid::new_v4(), run.service_id).await.unwrap(),
        Admission::Refused(AdmissionRefusal::UnknownRun { .. })
    ));
}
