//! Publishing, activating and inspecting graph runs against real PostgreSQL.

use diesel::sql_types::{Text, Uuid as SqlUuid};
use diesel_async::RunQueryDsl;
use radar::graph::{NodeChange, NodeChangeKind};
use radar::store::{self, GraphStore, GraphStoreError, PlanChange, Services};
use radar_testkit::db;
use radar_testkit::graph::*;

async fn graph_store(db: &db::TestDb) -> (GraphStore, Services) {
    db::enable_graph_authoring(db).await;
    let pool = store::connect(&db.url, 4, db::STATEMENT_TIMEOUT)
        .await
        .unwrap();
    (GraphStore::new(pool.clone()), Services::new(pool))
}

#[tokio::test]
async fn a_layout_only_revision_keeps_the_hash_and_the_monitor_fingerprint() {
    let db = db::migrated_database("graph_layout").await;
    let (graphs, services) = graph_store(&db).await;
    let first = graphs.publish(definition(example())).await.unwrap();
    assert_eq!(first.revision, 1);
    assert_eq!(first.change, PlanChange::NewGraph);

    let plan = graphs.plan(&definition(layout_edit())).await.unwrap();
    assert_eq!(plan.change, PlanChange::LayoutOnly { from_revision: 1 });
    let second = graphs.publish(definition(layout_edit())).await.unwrap();
    assert_eq!(second.revision, 2);
    assert_eq!(second.semantics_hash, first.semantics_hash);

    let a = graphs.activate("pump-7-graph", 1).await.unwrap();
    let b = graphs.activate("pump-7-graph", 2).await.unwrap();
    let a = services.get(a.service_id).await.unwrap();
    let b = services.get(b.service_id).await.unwrap();
    assert_eq!(
        a.config_fingerprint, b.config_fingerprint,
        "a snapshot bound to revision 1 restores under revision 2"
    );
    assert_eq!(
        a.monitor_config().unwrap().fingerprint().to_vec(),
        a.config_fingerprint
    );
}

#[tokio::test]
async fn a_semantic_revision_changes_the_hash_and_the_fingerprint_and_names_the_node() {
    let db = db::migrated_database("graph_semantic").await;
    let (graphs, services) = graph_store(&db).await;
    let first = graphs.publish(definition(example())).await.unwrap();
    let plan = graphs.plan(&definition(semantic_edit())).await.unwrap();
    let PlanChange::Semantic {
        from_revision,
        diff,
    } = plan.change
    else {
        panic!("expected a semantic change, got {:?}", plan.change)
    };
    assert_eq!(from_revision, 1);
    assert_eq!(
        diff.nodes,
        vec![NodeChange {
            node: "pressure_avg".into(),
            change: NodeChangeKind::Changed
        }]
    );
    let second = graphs.publish(definition(semantic_edit())).await.unwrap();
    assert_ne!(second.semantics_hash, first.semantics_hash);
    let a = graphs.activate("pump-7-graph", 1).await.unwrap();
    let b = graphs.activate("pump-7-graph", 2).await.unwrap();
    assert_ne!(
        services.get(a.service_id).await.unwrap().config_fingerprint,
        services.get(b.service_id).await.unwrap().config_fingerprint
    );
}

#[tokio::test]
async fn publishing_the_same_definition_twice_is_refused() {
    let db = db::migrated_database("graph_identical").await;
    let (graphs, _) = graph_store(&db).await;
    graphs.publish(definition(example())).await.unwrap();
    let plan = graphs.plan(&definition(example())).await.unwrap();
    assert_eq!(plan.change, PlanChange::Identical { revision: 1 });
    let err = graphs.publish(definition(example())).await.unwrap_err();
    assert!(
        matches!(err, GraphStoreError::IdenticalRevision { revision: 1, .. }),
        "{err}"
    );
}

#[tokio::test]
async fn re_activating_an_old_revision_creates_a_new_service_and_run() {
    let db = db::migrated_database("graph_reactivate").await;
    let (graphs, services) = graph_store(&db).await;
    graphs.publish(definition(example())).await.unwrap();
    graphs.publish(definition(semantic_edit())).await.unwrap();
    let first = graphs.activate("pump-7-graph", 1).await.unwrap();
    let second = graphs.activate("pump-7-graph", 2).await.unwrap();
    let back = graphs.activate("pump-7-graph", 1).await.unwrap();
    assert_eq!(
        (first.generation, second.generation, back.generation),
        (1, 2, 3)
    );
    assert_ne!(back.service_id, first.service_id);
    assert_ne!(back.run_id, first.run_id);
    let monitor = services.get(back.service_id).await.unwrap();
    let binding = monitor.monitor_config().unwrap().graph.unwrap();
    assert_eq!((binding.revision, binding.run_id), (1, back.run_id));
    // Fresh: the new monitor has no snapshot, whatever the old one holds.
    let mut conn = db::connect(&db).await;
    put_snapshot(&mut conn, first.service_id, &[7; 32]).await;
    assert!(snapshot_row(&mut conn, back.service_id).await.is_empty());
    assert_eq!(
        graphs
            .run_for_service(back.service_id)
            .await
            .unwrap()
            .unwrap()
            .id,
        back.run_id
    );
}

#[tokio::test]
async fn published_revisions_cannot_be_changed_or_deleted() {
    let db = db::migrated_database("graph_immutable").await;
    let (graphs, _) = graph_store(&db).await;
    graphs.publish(definition(example())).await.unwrap();
    let mut conn = db::connect(&db).await;
    for sql in [
        "UPDATE graph_revisions SET semantics_hash = repeat('0', 64)",
        "UPDATE graph_revisions SET definition = '{}'::jsonb",
        "DELETE FROM graph_revisions",
        "TRUNCATE graph_revisions CASCADE",
    ] {
        let err = diesel::sql_query(sql).execute(&mut conn).await.unwrap_err();
        assert!(err.to_string().contains("immutable"), "{sql}: {err}");
    }
}

#[tokio::test]
async fn inspect_shows_status_coverage_and_the_last_snapshot_envelope() {
    let db = db::migrated_database("graph_inspect").await;
    let (graphs, _) = graph_store(&db).await;
    graphs.publish(definition(example())).await.unwrap();
    let run = graphs.activate("pump-7-graph", 1).await.unwrap();
    let inspection = graphs.inspect(run.run_id).await.unwrap();
    assert_eq!(inspection.run.status, "starting");
    assert!(inspection.last_snapshot.is_none() && inspection.operational.is_none());

    let mut conn = db::connect(&db).await;
    put_snapshot(&mut conn, run.service_id, &[0xee; 32]).await;
    diesel::sql_query(
        "INSERT INTO radar_operational_status (service_id, worker_id, state, coverage) \
         VALUES ($1, 'worker-a', 'running', $2::jsonb)",
    )
    .bind::<SqlUuid, _>(run.service_id)
    .bind::<Text, _>(r#"{"version": 3, "gaps": [{"cause": "startup"}]}"#)
    .execute(&mut conn)
    .await
    .unwrap();
    let inspection = graphs.inspect(run.run_id).await.unwrap();
    let snapshot = inspection.last_snapshot.unwrap();
    assert_eq!(snapshot.processed_count, 42);
    assert_eq!(snapshot.signature_prefix, "ee".repeat(8));
    assert_eq!(
        inspection.operational.unwrap().coverage.unwrap()["version"],
        3
    );
    assert_eq!(inspection.semantics_hash, run.semantics_hash);
    let listed = graphs.list_runs().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].graph, "pump-7-graph");
}

#[tokio::test]
async fn an_invalid_graph_is_refused_before_anything_is_stored() {
    let db = db::migrated_database("graph_invalid").await;
    let (graphs, _) = graph_store(&db).await;
    let mut value = example();
    node_mut(&mut value, "temperature_ewma")["params"]["alpha"] = serde_json::json!(0);
    let err = graphs.publish(definition(value)).await.unwrap_err();
    assert!(
        err.to_string()
            .contains("nodes.temperature_ewma.params.alpha"),
        "{err}"
    );
    assert!(graphs.list_runs().await.unwrap().is_empty());
    assert!(matches!(
        graphs.graph_id("pump-7-graph").await,
        Err(GraphStoreError::GraphNotFound(_))
    ));
}
