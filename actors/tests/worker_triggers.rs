//! Each checkpoint trigger of a running worker on its own: every test sets
//! the other triggers out of reach (a maximum interval of ten minutes, a
//! frame interval beyond the test), so the snapshot row moves only when the
//! trigger under test fires.

use std::time::Duration;

use radar_testkit::{exposition, http, prelude::*};
use uuid::Uuid;

const START: Duration = Duration::from_secs(30);

/// No checkpoint by time during a test.
const MAX_INTERVAL: (&str, &str) = ("RADAR_CHECKPOINT_MAX_INTERVAL_SECONDS", "600");

/// A running monitor on its own worker and a publisher for it.
async fn running(
    h: &Harness,
    name: &str,
    env: &[(&str, &str)],
) -> (Uuid, String, Worker, Publisher) {
    let (id, prefix) = h.create_monitor(name);
    let worker = h.spawn_worker(&format!("w-{name}"), env, &[]);
    h.wait_status(id, START, "the monitor runs", |s| state(s) == "running")
        .await;
    let publisher = Publisher::connect(h.broker.port).await;
    (id, prefix, worker, publisher)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_frame_interval_checkpoints_after_its_count_without_waiting_for_the_maximum_interval() {
    let h = Harness::new("worker_triggers_frames").await;
    let env = [MAX_INTERVAL, ("RADAR_CHECKPOINT_INTERVAL", "7")];
    let (id, prefix, _worker, mut publisher) = running(&h, "frames", &env).await;
    let mut conn = h.connect().await;
    // The first frame ends the startup gap: a coverage checkpoint, from
    // which the frame count starts.
    publisher.frames(&prefix, 1).await;
    publisher.flush(START).await;
    wait_snapshot(&mut conn, id, START, "the first frame committed", |r| {
        r.processed_count == 1
    })
    .await;
    publisher.frames(&prefix, 7).await;
    publisher.flush(START).await;
    let row = wait_snapshot(&mut conn, id, START, "7 more frames committed", |r| {
        r.processed_count == 8
    })
    .await;
    // Fewer than the interval: processed, not checkpointed.
    publisher.frames(&prefix, 3).await;
    publisher.flush(START).await;
    h.wait_status(id, START, "11 frames processed", |s| processed(s) == 11)
        .await;
    assert_eq!(
        snapshot_row(&mut conn, id).await.map(|r| r.processed_count),
        Some(8),
        "no checkpoint before the next 7 frames"
    );
    publisher.frames(&prefix, 4).await;
    publisher.flush(START).await;
    wait_snapshot(&mut conn, id, START, "15 frames committed", |r| {
        r.processed_count == 15
    })
    .await;
    assert_eq!(row.writer_id, "w-frames");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_phase_change_checkpoints_at_once() {
    let h = Harness::new("worker_triggers_phase").await;
    let env = [MAX_INTERVAL, ("RADAR_CHECKPOINT_INTERVAL", "1000")];
    let (id, prefix, _worker, mut publisher) = running(&h, "phase", &env).await;
    let mut conn = h.connect().await;
    // The monitor trains on 20 frames: the 20th moves it to calibrating.
    publisher.frames(&prefix, 20).await;
    publisher.flush(START).await;
    wait_snapshot(
        &mut conn,
        id,
        START,
        "the calibrating phase committed",
        |r| r.processed_count == 20,
    )
    .await;
    let (inspection, code) = h.inspect(id);
    assert_eq!(code, Some(0), "{inspection:#}");
    assert_eq!(
        inspection["phase"], "calibrating",
        "the snapshot holds the new phase: {inspection:#}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_monitor_checkpoints_the_gap_when_its_broker_drops_and_when_it_returns() {
    let mut h = Harness::new("worker_triggers_coverage").await;
    let env = [
        MAX_INTERVAL,
        ("RADAR_CHECKPOINT_INTERVAL", "1000"),
        ("RADAR_TEST_MQTT_BACKOFF_MS", "100,1000"),
    ];
    let (id, prefix, worker, mut publisher) = running(&h, "coverage", &env).await;
    let mut conn = h.connect().await;
    // The first frame ends the startup gap, itself a coverage change.
    publisher.frames(&prefix, 3).await;
    publisher.flush(START).await;
    h.wait_status(id, START, "3 frames processed", |s| processed(s) == 3)
        .await;
    let first = wait_snapshot(&mut conn, id, START, "the first frame committed", |r| {
        r.processed_count >= 1
    })
    .await;
    drop(publisher);

    // Idle from here on: no frame arrives, only the connection changes.
    h.broker.kill().expect("stop the broker");
    let outage = wait_snapshot(&mut conn, id, START, "a checkpoint of the outage", |r| {
        r.signature != first.signature
    })
    .await;
    let (inspection, _) = h.inspect(id);
    assert!(
        gaps(&inspection["coverage"]).contains(&("mqtt_outage".to_string(), false)),
        "the committed snapshot holds the open outage gap: {inspection:#}"
    );

    h.broker.restart().await.expect("start the broker again");
    wait_snapshot(&mut conn, id, START, "a checkpoint of the recovery", |r| {
        r.signature != outage.signature
    })
    .await;
    let (inspection, _) = h.inspect(id);
    assert!(
        gaps(&inspection["coverage"]).contains(&("mqtt_outage".to_string(), true)),
        "the committed snapshot holds the closed outage gap: {inspection:#}"
    );
    let me = [("monitor_id", id.to_string())];
    let labels = [(me[0].0, me[0].1.as_str())];
    let cause = [("cause", "mqtt_outage")];
    // The monitor's total, and the worker's breakdown by cause.
    wait_until(START, "the closed gap's length is in the metrics", || {
        http::http_get(worker.metrics_port, "/metrics").is_some_and(|(_, text)| {
            let total =
                exposition::sample(&text, "radar_coverage_gap_duration_seconds_total", &labels);
            let by_cause = exposition::sample(
                &text,
                "radar_coverage_gap_duration_by_cause_seconds_total",
                &cause,
            );
            total.is_some_and(|s| s > 0.0) && by_cause.is_some_and(|s| s > 0.0)
        })
    })
    .await
    .unwrap_or_else(|e| panic!("{e}; log:\n{}", worker.log()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_frame_after_a_restore_checkpoints_the_end_of_the_restart_gap_at_once() {
    let h = Harness::new("worker_triggers_rollback").await;
    let env = [MAX_INTERVAL, ("RADAR_CHECKPOINT_INTERVAL", "1000")];
    let (id, prefix, mut first, mut publisher) = running(&h, "rollback", &env).await;
    publisher.frames(&prefix, 3).await;
    publisher.flush(START).await;
    h.wait_status(id, START, "3 frames processed", |s| processed(s) == 3)
        .await;
    first.stop_cleanly(START).await;
    let mut conn = h.connect().await;
    let stopped = wait_snapshot(&mut conn, id, START, "the last snapshot", |r| {
        r.processed_count == 3
    })
    .await;

    // The successor restores it: input after the save was not seen, so a
    // restart_rollback gap is open until its first frame.
    let second = h.spawn_worker("w-rollback-2", &env, &[]);
    h.wait_status(id, START, "the restored monitor runs", |s| {
        state(s) == "running" && s["worker_id"] == "w-rollback-2"
    })
    .await;
    let restored = wait_snapshot(&mut conn, id, START, "the successor's first commit", |r| {
        r.writer_id == "w-rollback-2"
    })
    .await;
    assert_eq!(restored.processed_count, stopped.processed_count);
    let (inspection, _) = h.inspect(id);
    assert!(
        gaps(&inspection["coverage"]).contains(&("restart_rollback".to_string(), false)),
        "{inspection:#}"
    );

    // One frame: far from the frame interval, no phase change (training
    // takes 20), no maximum interval in reach. Only the coverage change it
    // makes can checkpoint it.
    publisher.frames(&prefix, 1).await;
    publisher.flush(START).await;
    wait_snapshot(
        &mut conn,
        id,
        START,
        "the frame that ended the gap committed",
        |r| r.processed_count == 4,
    )
    .await;
    let (inspection, _) = h.inspect(id);
    assert!(
        gaps(&inspection["coverage"]).contains(&("restart_rollback".to_string(), true)),
        "the committed snapshot holds the closed gap: {inspection:#}"
    );
    drop(second);
}

/// When an evidence row committed, and under which fencing token.
#[derive(Debug, diesel::QueryableByName)]
struct EvidenceCommit {
    #[diesel(sql_type = diesel::sql_types::Timestamptz)]
    committed_at: chrono::DateTime<chrono::Utc>,
    #[diesel(sql_type = diesel::sql_types::Bytea)]
    writer_signature: Vec<u8>,
}

/// The snapshot a flagged frame fires carries the frame's evidence in the
/// same message (issue #19), so the evidence commits in that snapshot's
/// transaction, not in a background evidence batch after it: same token,
/// and the same transaction time (`now()`) on both rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_evidence_of_the_frame_that_fires_a_checkpoint_commits_in_that_checkpoints_transaction()
{
    use diesel_async::RunQueryDsl;

    let h = Harness::new("worker_triggers_results").await;
    let env = [MAX_INTERVAL, ("RADAR_CHECKPOINT_INTERVAL", "1")];
    let (id, prefix, worker, mut publisher) = running(&h, "results", &env).await;
    let mut conn = h.connect().await;
    // Warm up, then one normal frame: once it is committed, so are the
    // fit's checkpoints, and the writer is idle when the flagged frame's
    // snapshot arrives.
    let warm = WARMUP_FRAMES as i64 + 1;
    publisher.frames(&prefix, warm as usize).await;
    publisher.flush(START).await;
    wait_snapshot(&mut conn, id, START, "the warm-up committed", |r| {
        r.processed_count == warm
    })
    .await;
    publisher.shift = 50.0;
    let flagged = publisher.frames(&prefix, 1).await;
    publisher.flush(START).await;
    let ts = chrono::DateTime::from_timestamp_millis(flagged[0]).expect("a valid source time");
    let evidence: EvidenceCommit = poll::within(START)
        .wait_async("the flagged frame's evidence lands", async || {
            diesel::sql_query(
                "SELECT committed_at, writer_signature FROM radar_evidence \
                 WHERE service_id = $1 AND frame_ts = $2",
            )
            .bind::<diesel::sql_types::Uuid, _>(id)
            .bind::<diesel::sql_types::Timestamptz, _>(ts)
            .get_result(&mut conn)
            .await
            .map_err(|e| format!("{e}; log:\n{}", worker.log()))
        })
        .await;
    let row = snapshot_row(&mut conn, id).await.expect("a snapshot row");
    assert_eq!(
        row.processed_count,
        warm + 1,
        "the snapshot row is the one the flagged frame fired"
    );
    assert_eq!(
        evidence.writer_signature, row.signature,
        "the evidence was committed under another token than its snapshot's"
    );
    assert_eq!(
        evidence.committed_at, row.committed_at,
        "the evidence committed in a later transaction than its snapshot (a background batch)"
    );
}
