//! Which monitors a `radar worker` runs: its shard of the non-retired ones,
//! picked up and dropped while it runs, without a restart.

use std::{collections::HashMap, time::Duration};

use radar::config::Shard;
use radar_testkit::prelude::*;

/// Two supervisor polls (every 5 s) plus a heartbeat and a CLI round trip.
const PICKUP: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn monitors_created_and_retired_while_the_worker_runs_are_started_and_stopped() {
    let h = Harness::new("worker_admission").await;
    let (early, _) = h.create_monitor("early");
    let mut worker = h.spawn_worker("w-admit", &[], &[]);
    h.wait_status(early, PICKUP, "the first monitor runs", |s| {
        state(s) == "running"
    })
    .await;

    let (late, late_prefix) = h.create_monitor("late");
    h.wait_status(late, PICKUP, "a monitor created later is picked up", |s| {
        state(s) == "running"
    })
    .await;
    let mut publisher = Publisher::connect(h.broker.port).await;
    publisher.frames(&late_prefix, 3).await;
    publisher.flush(PICKUP).await;
    h.wait_status(late, PICKUP, "it processes data", |s| processed(s) == 3)
        .await;

    let out = h.radar(&["monitor", "retire", &late.to_string()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    worker
        .wait_log("Monitor retired, deleted or moved to another shard", PICKUP)
        .await;
    // The retired monitor's last snapshot holds its frames.
    let mut conn = h.connect().await;
    wait_snapshot(
        &mut conn,
        late,
        PICKUP,
        "the retired monitor's last snapshot",
        |r| r.processed_count == 3,
    )
    .await;
    h.wait_status(early, PICKUP, "the other monitor still runs", |s| {
        state(s) == "running"
    })
    .await;
    assert!(worker.running());
    poll::within(PICKUP)
        .every(Duration::from_millis(200))
        .value(
            "the retired monitor shows stopped and retired",
            || {
                let rows: serde_json::Value =
                    serde_json::from_slice(&h.radar(&["status", "--json", "--all"]).stdout)
                        .unwrap();
                rows.as_array()
                    .unwrap()
                    .iter()
                    .find(|r| r["monitor_id"] == late.to_string())
                    .cloned()
            },
            |row| {
                row.as_ref()
                    .is_some_and(|r| state(r) == "stopped" && r["retired"] == true)
            },
        )
        .await;
    worker.stop_cleanly(Duration::from_secs(30)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_sharded_workers_split_the_monitors_by_id() {
    let h = Harness::new("worker_shards").await;
    let monitors = h.create_monitors(20).await;
    let _one = h.spawn_worker("w-shard-1", &[("RADAR_SHARD", "1/2")], &[]);
    let _two = h.spawn_worker("w-shard-2", &[("RADAR_SHARD", "2/2")], &[]);
    let expected: HashMap<String, &str> = monitors
        .iter()
        .map(|(id, _)| {
            let shard = Shard { index: 1, count: 2 };
            (
                id.to_string(),
                if radar::runtime::owns(shard, *id) {
                    "w-shard-1"
                } else {
                    "w-shard-2"
                },
            )
        })
        .collect();
    let placed_on_their_shard = || {
        let status = h.status();
        let placed = status
            .iter()
            .filter(|s| {
                state(s) == "running"
                    && expected
                        .get(s["monitor_id"].as_str().unwrap_or(""))
                        .copied()
                        == s["worker_id"].as_str()
            })
            .count();
        let misplaced: Vec<_> = status
            .iter()
            .filter(|s| {
                s["worker_id"].is_string()
                    && expected
                        .get(s["monitor_id"].as_str().unwrap_or(""))
                        .copied()
                        != s["worker_id"].as_str()
            })
            .collect();
        assert!(
            misplaced.is_empty(),
            "a monitor runs outside its shard: {misplaced:#?}"
        );
        poll::check(placed == monitors.len(), || {
            format!("{placed} of 20 placed")
        })
    };
    poll::within(PICKUP)
        .every(Duration::from_millis(200))
        .wait("every monitor runs on its shard", placed_on_their_shard)
        .await;
    let on_one = expected.values().filter(|w| **w == "w-shard-1").count();
    assert!(
        on_one > 0 && on_one < monitors.len(),
        "both shards hold monitors"
    );
}
