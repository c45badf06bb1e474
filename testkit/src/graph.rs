//! Helpers for the graph integration tests: the example graph, edits of it,
//! and a snapshot row written the way a checkpoint writer would leave it.

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

/// A small graph named `name` over two readings `a` and `b` under `prefix`
/// (as the worker tests' publisher sends them): `a` smoothed by a rolling
/// mean, then, with `fault = Some((updates, mode))`, through a node that
/// fails on demand (`"uncertain"` or `"rejected"`) after that many updates,
/// into a detector with `b` (monitoring after 20 training and 20
/// calibration frames), into the alarm sink.
pub fn small_graph(name: &str, prefix: &str, fault: Option<(u64, &str)>) -> Value {
    let at = |x: i32, y: i32| serde_json::json!({"x": x, "y": y});
    let mut nodes = vec![
        serde_json::json!({"id": "a", "type": "reading", "params": {"reading": "a"}, "layout": at(0, 0)}),
        serde_json::json!({"id": "b", "type": "reading", "params": {"reading": "b"}, "layout": at(0, 100)}),
        serde_json::json!({"id": "a_avg", "type": "rolling_mean", "params": {"window": 3}, "layout": at(200, 0)}),
        serde_json::json!({"id": "detector", "type": "detector", "layout": at(400, 50),
            "params": {"training_frames": 20, "calibration_frames": 20, "false_alarm_rate": 0.05}}),
        serde_json::json!({"id": "alarm", "type": "alarm", "layout": at(600, 50),
            "params": {"threshold": 1.0, "rule": {"open_k": 3, "open_n": 5, "close_m": 10}}}),
    ];
    let mut edges = vec![
        serde_json::json!({"from": "a", "to": "a_avg"}),
        serde_json::json!({"from": "b", "to": "detector"}),
        serde_json::json!({"from": "detector", "to": "alarm"}),
    ];
    match fault {
        Some((updates, mode)) => {
            nodes.push(
                serde_json::json!({"id": "fault", "type": "fail_after", "layout": at(300, 0),
                "params": {"updates": updates, "mode": mode}}),
            );
            edges.push(serde_json::json!({"from": "a_avg", "to": "fault"}));
            edges.push(serde_json::json!({"from": "fault", "to": "detector"}));
        }
        None => edges.push(serde_json::json!({"from": "a_avg", "to": "detector"})),
    }
    serde_json::json!({
        "name": name,
        "readings": [
            {"name": "a", "topic": format!("{prefix}/a")},
            {"name": "b", "topic": format!("{prefix}/b")},
        ],
        "alignment": {"freshness_ms": 5000, "max_age_ms": 30000, "future_tolerance_ms": 2000, "max_skew_ms": 1000},
        "nodes": nodes,
        "edges": edges,
    })
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
pub async fn setup(tag: &str) -> (crate::db::TestDb, GraphStore, AsyncPgConnection) {
    let db = crate::db::migrated_database(tag).await;
    crate::db::enable_graph_authoring(&db).await;
    let graphs = GraphStore::new(
        store::connect(&db.url, 4, crate::db::STATEMENT_TIMEOUT)
            .await
            .unwrap(),
    );
    graphs.publish(definition(example())).await.unwrap();
    let conn = crate::db::connect(&db).await;
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

/// The value after `key: ` on its line of `radar graph` output.
pub fn field(text: &str, key: &str) -> String {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}: ")))
        .unwrap_or_else(|| panic!("no {key} in {text}"))
        .trim()
        .to_string()
}
