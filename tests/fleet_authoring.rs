//! The fleet-wide graph authoring switch against real PostgreSQL: it starts
//! off, publication and activation check it in their own transaction, and
//! it is enabled only while every live worker supports graph runs.

use diesel::sql_types::{Integer, Nullable, Text};
use diesel_async::RunQueryDsl;
use radar::{
    graph::{GraphDefinition, LAUNCH_CONTRACT_VERSION},
    store::{
        self, GraphStore, GraphStoreError,
        fleet::{self, AuthoringError, WorkerAdvert},
    },
};
use radar_testkit::db;

const EXAMPLE: &str = include_str!("../config/graphs/pump-7.json");

async fn pool(db: &db::TestDb) -> store::Pool {
    store::connect(&db.url, 2, db::STATEMENT_TIMEOUT)
        .await
        .unwrap()
}

fn definition() -> GraphDefinition {
    GraphDefinition::from_json_str(EXAMPLE).unwrap()
}

fn advert(worker_id: &str, contract: Option<i32>) -> WorkerAdvert {
    WorkerAdvert {
        worker_id: worker_id.into(),
        graph_launch_contract: contract,
        binary_version: "test".into(),
    }
}

/// Puts a row straight into `radar_workers`, heartbeat `age_s` seconds ago
/// on the database's clock.
async fn worker_row(
    db: &db::TestDb,
    worker_id: &str,
    contract: Option<i32>,
    state: &str,
    age_s: i32,
) {
    let mut conn = db::connect(db).await;
    diesel::sql_query(
        "INSERT INTO radar_workers (worker_id, graph_launch_contract, binary_version, state, heartbeat_at) \
         VALUES ($1, $2, 'old', $3, now() - make_interval(secs => $4))",
    )
    .bind::<Text, _>(worker_id)
    .bind::<Nullable<Integer>, _>(contract)
    .bind::<Text, _>(state)
    .bind::<Integer, _>(age_s)
    .execute(&mut conn)
    .await
    .unwrap();
}

fn blocked_names(err: AuthoringError) -> (Vec<String>, String) {
    let message = err.to_string();
    match err {
        AuthoringError::Blocked { blocking } => {
            (blocking.into_iter().map(|w| w.worker_id).collect(), message)
        }
        other => panic!("expected a refusal naming workers, got {other}"),
    }
}

#[tokio::test]
async fn authoring_starts_off_and_publish_and_activate_are_refused_in_the_store() {
    let db = db::migrated_database("fleet_off").await;
    let pool = pool(&db).await;
    let status = fleet::authoring_status(&pool).await.unwrap();
    assert!(
        !status.enabled,
        "a migrated database starts with authoring off"
    );
    let graphs = GraphStore::new(pool.clone());
    let err = graphs.publish(definition()).await.unwrap_err();
    assert!(matches!(err, GraphStoreError::AuthoringDisabled), "{err}");
    assert!(
        err.to_string().contains("radar graph authoring enable"),
        "{err}"
    );

    fleet::set_authoring(&pool, true, "test").await.unwrap();
    graphs.publish(definition()).await.unwrap();
    fleet::set_authoring(&pool, false, "test").await.unwrap();
    let err = graphs.activate("pump-7-graph", 1).await.unwrap_err();
    assert!(matches!(err, GraphStoreError::AuthoringDisabled), "{err}");
    let status = fleet::authoring_status(&pool).await.unwrap();
    assert!(!status.enabled);
    assert_eq!(status.changed_by.as_deref(), Some("test"));
}

#[tokio::test]
async fn a_live_worker_without_graph_support_blocks_enabling_and_is_named() {
    let db = db::migrated_database("fleet_block").await;
    let pool = pool(&db).await;
    fleet::worker_heartbeat(&pool, &WorkerAdvert::this_binary("new-1".into()))
        .await
        .unwrap();
    fleet::worker_heartbeat(&pool, &advert("old-1", None))
        .await
        .unwrap();
    let err = fleet::set_authoring(&pool, true, "test").await.unwrap_err();
    let (names, message) = blocked_names(err);
    assert_eq!(names, ["old-1"], "{message}");
    assert!(
        message.contains("old-1") && message.contains("runs no graphs"),
        "{message}"
    );
    assert!(
        !message.contains("new-1"),
        "a capable worker is not named: {message}"
    );
    assert!(!fleet::authoring_status(&pool).await.unwrap().enabled);

    // A worker on another launch contract cannot run what this radar
    // activates either.
    fleet::worker_heartbeat(&pool, &advert("old-1", Some(LAUNCH_CONTRACT_VERSION + 1)))
        .await
        .unwrap();
    let (names, message) =
        blocked_names(fleet::set_authoring(&pool, true, "test").await.unwrap_err());
    assert_eq!(names, ["old-1"]);
    assert!(message.contains("launch contract"), "{message}");

    // Upgraded: nothing blocks any more.
    fleet::worker_heartbeat(&pool, &advert("old-1", Some(LAUNCH_CONTRACT_VERSION)))
        .await
        .unwrap();
    let status = fleet::set_authoring(&pool, true, "test").await.unwrap();
    assert!(status.enabled);
    assert_eq!(status.live_workers.len(), 2);
}

#[tokio::test]
async fn stopped_and_silent_workers_do_not_block_but_one_seen_only_by_its_status_rows_does() {
    let db = db::migrated_database("fleet_live").await;
    let pool = pool(&db).await;
    // Gone by the liveness rule: stopped, or silent for longer than it allows.
    worker_row(&db, "stopped-old", None, "stopped", 1).await;
    let silent = i32::try_from(fleet::WORKER_LIVE_FOR.as_secs()).unwrap() + 5;
    worker_row(&db, "silent-old", None, "running", silent).await;
    // Just within it: live.
    worker_row(&db, "recent-old", None, "running", silent - 15).await;
    let (names, _) = blocked_names(fleet::set_authoring(&pool, true, "test").await.unwrap_err());
    assert_eq!(names, ["recent-old"]);
    fleet::worker_stopped(&pool, "recent-old").await.unwrap();
    fleet::set_authoring(&pool, false, "test").await.unwrap();

    // A binary older than the registry writes status rows but no worker
    // row: its fresh heartbeat makes it live, and it supports nothing.
    let mut conn = db::connect(&db).await;
    diesel::sql_query(
        "INSERT INTO services (id, name, config, config_fingerprint) \
         VALUES (gen_random_uuid(), 'm', '{}', decode(repeat('00', 32), 'hex'))",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    diesel::sql_query(
        "INSERT INTO radar_operational_status (service_id, worker_id, state) \
         SELECT id, 'pre-registry-worker', 'running' FROM services",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    let (names, message) =
        blocked_names(fleet::set_authoring(&pool, true, "test").await.unwrap_err());
    assert_eq!(names, ["pre-registry-worker"]);
    assert!(message.contains("never registered"), "{message}");

    // Its last status says it stopped: gone.
    diesel::sql_query("UPDATE radar_operational_status SET state = 'stopped'")
        .execute(&mut conn)
        .await
        .unwrap();
    assert!(
        fleet::set_authoring(&pool, true, "test")
            .await
            .unwrap()
            .enabled
    );
}
