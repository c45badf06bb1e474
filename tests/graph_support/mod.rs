//! Helpers for the graph integration tests: the example graph, edits of it,
//! and a snapshot row written the way a checkpoint writer would leave it.
#![allow(dead_code)]

use chrono::Utc;
use diesel::sql_types::{Bytea, Uuid as SqlUuid};
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use radar::graph::{FailureDiagnostics, GraphDefinition};
use radar::store::{self, Activated, Admission, GraphStore};
use serde_json::Value;
use uuid::Uuid;

pub const EXAMPLE: &str = include_str!("../../config/graphs/pump-7.json");

pub fn example() -> Value {
    serde_json::from_str(EXAMPLE).unwrap()
}

pub fn definition(value: Value) -> GraphDefinition {
    GraphDefinition::from_json(value).unwrap()
}

pub fn node_mut<'a>(graph: &'a mut Value, id: &str) -> &'a mut Value {
    graph["nodes"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|n| n["id"] == id)
        .unwrap()
}

/// The example with only its layout changed.
pub fn layout_edit() -> Value {
    let mut value = example();
    node_mut(&mut value, "pump")["layout"] =
        serde_json::json!({"x": 640.5, "y": 80, "label": "Pump", "color": "#123456"});
    value
}

/// The example with one parameter changed.
pub fn semantic_edit() -> Value {
    let mut value = example();
    node_mut(&mut value, "pressure_avg")["params"]["window"] = serde_json::json!(7);
    value
}

/// Stands in for a committed snapshot: the row a checkpoint writer leaves,
/// with `signature` as its fencing token.
pub async fn put_snapshot(conn: &mut AsyncPgConnection, service_id: Uuid, signature: &[u8]) {
    diesel::sql_query(
        "INSERT INTO radar_runtime_checkpoints (service_id, envelope, format_version, config_fingerprint, \
         runtime_versions, processed_count, observation_history_len, saved_at, payload_sha256, \
         key_id, signature, payload, writer_id) \
         VALUES ($1, '\\x01'::bytea, 1, decode(repeat('ab', 32), 'hex'), 'statrs=0.19.1', 42, 3, now(), \
         decode(repeat('cd', 32), 'hex'), 'k1', $2, '\\x00'::bytea, 'worker-a') \
         ON CONFLICT (service_id) DO UPDATE SET signature = EXCLUDED.signature",
    )
    .bind::<SqlUuid, _>(service_id)
    .bind::<Bytea, _>(signature)
    .execute(conn)
    .await
    .unwrap();
}

/// The whole snapshot row as bytes of text, to show nothing touched it.
pub async fn snapshot_row(conn: &mut AsyncPgConnection, service_id: Uuid) -> String {
    #[derive(diesel::QueryableByName)]
    struct Row {
        #[diesel(sql_type = diesel::sql_types::Text)]
        row: String,
    }
    let rows: Vec<Row> = diesel::sql_query(
        "SELECT c::text AS row FROM radar_runtime_checkpoints c WHERE service_id = $1",
    )
    .bind::<SqlUuid, _>(service_id)
    .load(conn)
    .await
    .unwrap();
    rows.into_iter().map(|r| r.row).collect()
}

/// The fencing token the tests' snapshot rows carry.
pub const TOKEN: [u8; 32] = [0x5a; 32];

/// What a quarantined run reports about its failed node.
pub fn diagnostics(node: &str) -> FailureDiagnostics {
    FailureDiagnostics {
        failed_node: node.into(),
        node_type: "fail_after".into(),
        reason: "injected uncertain failure after 3 updates".into(),
        frame_ts: Utc::now(),
        frames_applied: 3,
        semantics_hash: "0".repeat(64),
    }
}

/// A migrated database with the example graph published.
pub async fn setup(tag: &str) -> (crate::common::TestDb, GraphStore, AsyncPgConnection) {
    let db = crate::common::migrated_database(tag).await;
    let graphs = GraphStore::new(store::connect(&db.url, 4).await.unwrap());
    graphs.publish(definition(example())).await.unwrap();
    let conn = crate::common::connect(&db).await;
    (db, graphs, conn)
}

/// A run admitted by a worker that committed its first snapshot.
pub async fn running(graphs: &GraphStore, conn: &mut AsyncPgConnection) -> Activated {
    let run = graphs.activate("pump-7-graph", 1).await.unwrap();
    put_snapshot(conn, run.service_id, &TOKEN).await;
    assert!(matches!(
        graphs.admit(run.run_id, run.service_id).await.unwrap(),
        Admission::Admitted(_)
    ));
    run
}
