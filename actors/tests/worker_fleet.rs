//! A `radar worker` registers in the fleet with its graph support, and the
//! fleet-wide authoring switch is enabled only while every live worker
//! supports graph runs: through the binary against real PostgreSQL.

use std::time::Duration;

use diesel_async::RunQueryDsl;
use radar_testkit::prelude::*;
use serde_json::Value;

fn authoring_status(h: &Harness) -> Value {
    let out = h.radar(&["graph", "authoring", "status", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("authoring status JSON")
}

fn live_ids(status: &Value) -> Vec<String> {
    status["live_workers"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|w| w["worker_id"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_worker_without_graph_support_blocks_enable_until_it_stops() {
    let h = Harness::new("worker_fleet").await;
    let mut worker = h.spawn_worker("w-fleet-new", &[], &[]);
    wait_until(Duration::from_secs(60), "the worker registers", || {
        live_ids(&authoring_status(&h)).contains(&"w-fleet-new".to_string())
    })
    .await
    .unwrap_or_else(|e| panic!("{e}; log:\n{}", worker.log()));
    let status = authoring_status(&h);
    assert_eq!(status["enabled"], false, "authoring starts off");
    assert_eq!(
        status["live_workers"][0]["graph_launch_contract"],
        radar::graph::LAUNCH_CONTRACT_VERSION,
        "the worker advertises the launch contract it runs: {status}"
    );

    // An older binary in the fleet: registered, no graph support.
    let mut conn = h.connect().await;
    diesel::sql_query(
        "INSERT INTO radar_workers (worker_id, graph_launch_contract, binary_version, state) \
         VALUES ('w-fleet-old', NULL, '0.0.9', 'running')",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    let out = h.radar(&["graph", "authoring", "enable"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "enable ran past a worker without graphs"
    );
    assert!(
        stderr.contains("w-fleet-old") && stderr.contains("runs no graphs"),
        "the refusal names the blocking worker: {stderr}"
    );
    assert!(!stderr.contains("w-fleet-new"), "{stderr}");
    assert_eq!(authoring_status(&h)["enabled"], false);

    diesel::sql_query("UPDATE radar_workers SET state = 'stopped' WHERE worker_id = 'w-fleet-old'")
        .execute(&mut conn)
        .await
        .unwrap();
    let out = h.radar(&["graph", "authoring", "enable"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(authoring_status(&h)["enabled"], true);

    // A graceful stop takes the worker out of the live set at once.
    worker.stop_cleanly(Duration::from_secs(60)).await;
    assert!(
        live_ids(&authoring_status(&h)).is_empty(),
        "a stopped worker is not live: {}",
        authoring_status(&h)
    );
}
