//! Each monitor's model runs on a thread of its own: a model operation that
//! blocks (the fault node's `slow` mode, test builds only) delays only its
//! own monitor, its stall is reported, and a graceful stop waits for the
//! operation before the last snapshot.

use std::time::Duration;

use radar_testkit::graph::{node_mut, small_graph};
use radar_testkit::prelude::*;
use serde_json::Value;

const START: Duration = Duration::from_secs(30);

/// A graph whose fault node blocks the model for `slow_ms` on every frame
/// after its first `updates`.
fn slow_graph(name: &str, prefix: &str, updates: u64, slow_ms: u64) -> Value {
    let mut graph = small_graph(name, prefix, Some((updates, "slow")));
    node_mut(&mut graph, "fault")["params"]["slow_ms"] = slow_ms.into();
    graph
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocked_model_delays_only_its_own_monitor_and_its_stall_is_reported() {
    let h = Harness::new("worker_model_slow").await;
    let slow_prefix = unique_prefix();
    h.publish_graph(&slow_graph("wm-slow", &slow_prefix, 25, 25_000));
    let slow = h.activate("wm-slow", 1);
    // More monitors than this machine has cores: with a shared pool of
    // model threads, one of them would share the blocked one's.
    let others = std::thread::available_parallelism().map_or(2, usize::from);
    let mut normal = Vec::new();
    for i in 0..others {
        let prefix = unique_prefix();
        let name = format!("wm-normal-{i}");
        h.publish_graph(&small_graph(&name, &prefix, None));
        normal.push((h.activate(&name, 1).service, prefix));
    }
    let worker = h.spawn_worker("w-slow", &[], &[]);
    for id in std::iter::once(slow.service).chain(normal.iter().map(|(id, _)| *id)) {
        h.wait_status(id, START, "every monitor runs", |s| state(s) == "running")
            .await;
    }

    let mut publisher = Publisher::connect(h.broker.port).await;
    publisher.frames(&slow_prefix, 28).await;
    publisher.flush(START).await;
    worker
        .wait_log("Fault node: blocking the model thread", START)
        .await;
    for (_, prefix) in &normal {
        publisher.frames(prefix, 30).await;
    }
    publisher.flush(START).await;
    // Well within the 25 s the blocked model takes for one frame.
    for (id, _) in &normal {
        h.wait_status(
            *id,
            Duration::from_secs(12),
            "every other monitor processes its frames",
            |s| processed(s) == 30 && state(s) == "running",
        )
        .await;
    }
    let stalled = h
        .wait_status(
            slow.service,
            Duration::from_secs(20),
            "the blocked monitor reports its stall",
            |s| state(s) == "stalled",
        )
        .await;
    // The view is published per batch of queued messages, so it may show
    // less than the 25 frames before the blocked one.
    assert!(processed(&stalled) <= 25, "{stalled:#}");
    for (id, _) in &normal {
        assert_eq!(state(&h.status_of(*id)), "running");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_during_a_blocked_model_operation_waits_for_it_before_the_last_snapshot() {
    let h = Harness::new("worker_model_sigterm").await;
    let prefix = unique_prefix();
    h.publish_graph(&slow_graph("wm-term", &prefix, 25, 3_000));
    let ids = h.activate("wm-term", 1);
    let mut worker = h.spawn_worker("w-term", &[("RADAR_CHECKPOINT_TIMEOUT_SECONDS", "10")], &[]);
    h.wait_status(ids.service, START, "the run runs", |s| {
        state(s) == "running"
    })
    .await;
    let mut publisher = Publisher::connect(h.broker.port).await;
    publisher.frames(&prefix, 26).await;
    publisher.flush(START).await;
    worker
        .wait_log("Fault node: blocking the model thread", START)
        .await;
    worker.stop_cleanly(START).await;
    let mut conn = h.connect().await;
    let row = snapshot_row(&mut conn, ids.service)
        .await
        .expect("snapshot");
    assert_eq!(
        row.processed_count,
        26,
        "the last snapshot holds the frame whose operation was running at SIGTERM:\n{}",
        worker.log()
    );
    assert_eq!(worker.log_count("Committed the last snapshot"), 1);
}
