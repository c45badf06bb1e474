//! Faults around one `radar worker` and its database rows: a heartbeat in
//! flight at shutdown, a successor committed while this worker's write
//! waits, evidence batches that cannot commit, and a worker with database
//! writes disabled in front of a committed snapshot.

use std::time::Duration;

use diesel::sql_types::{BigInt, Timestamptz, Uuid as SqlUuid};
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use radar_testkit::prelude::*;
use uuid::Uuid;

const START: Duration = Duration::from_secs(30);

/// Evidence rows of monitor `id` for frames at or after `from_ms`.
async fn evidence_since(conn: &mut AsyncPgConnection, id: Uuid, from_ms: i64) -> i64 {
    #[derive(diesel::QueryableByName)]
    struct Count {
        #[diesel(sql_type = BigInt)]
        n: i64,
    }
    let from = chrono::DateTime::from_timestamp_millis(from_ms).expect("a time");
    let count: Count = diesel::sql_query(
        "SELECT count(*) AS n FROM radar_evidence WHERE service_id = $1 AND frame_ts >= $2",
    )
    .bind::<SqlUuid, _>(id)
    .bind::<Timestamptz, _>(from)
    .get_result(conn)
    .await
    .expect("count evidence");
    count.n
}

/// A log line without its ANSI colour sequences.
fn without_colours(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            chars.by_ref().find(|&c| c == 'm');
        } else {
            out.push(c);
        }
    }
    out
}

async fn sql(conn: &mut AsyncPgConnection, statement: &str) {
    diesel::sql_query(statement)
        .execute(conn)
        .await
        .unwrap_or_else(|e| panic!("{statement}: {e}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_final_stopped_status_is_written_even_while_a_heartbeat_is_in_flight() {
    let h = Harness::new("worker_faults_final").await;
    let (id, prefix) = h.create_monitor("final");
    let mut worker = h.spawn_worker(
        "w-final",
        &[("RADAR_CHECKPOINT_TIMEOUT_SECONDS", "30")],
        &[],
    );
    h.wait_status(id, START, "the monitor runs", |s| state(s) == "running")
        .await;
    let mut publisher = Publisher::connect(h.broker.port).await;
    publisher.frames(&prefix, 5).await;
    publisher.flush(START).await;
    h.wait_status(id, START, "5 frames processed", |s| processed(s) == 5)
        .await;

    // The next heartbeat blocks on the status row and stays in flight.
    let mut blocker = lock_row(&h, "radar_operational_status", id).await;
    let mut conn = h.connect().await;
    wait_for_lock_waiter(&mut conn, START).await;
    worker.signal("TERM");
    worker.wait_log("Committed the last snapshot", START).await;
    sql(&mut blocker, "ROLLBACK").await;
    assert!(worker.wait_exit(START).await.success(), "{}", worker.log());

    let status = h.status_of(id);
    assert_eq!(
        state(&status),
        "stopped",
        "the final row lands after the heartbeat that was in flight: {status:#}\n{}",
        worker.log()
    );
    assert_eq!(processed(&status), 5, "{status:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_successor_commits_pending_results_stay_unwritten_and_new_ones_are_rejected_with_one_summary()
 {
    let h = Harness::new("worker_faults_lost").await;
    let (id, prefix) = h.create_monitor("lost");
    // Long enough that the model keeps advancing and the blocked write
    // keeps waiting for as long as the test holds the row.
    let mut worker = h.spawn_worker("w-lost", &[("RADAR_CHECKPOINT_TIMEOUT_SECONDS", "60")], &[]);
    h.wait_status(id, START, "the monitor runs", |s| state(s) == "running")
        .await;
    let mut publisher = Publisher::connect(h.broker.port).await;
    publisher.frames(&prefix, 60).await;
    publisher.flush(START).await;
    let mut conn = h.connect().await;
    wait_snapshot(&mut conn, id, START, "60 frames committed", |r| {
        r.processed_count == 60
    })
    .await;

    let mut blocker = lock_snapshot_row(&h, id).await;
    publisher.shift = 50.0;
    let shifted = publisher.frames(&prefix, 8).await;
    publisher.flush(START).await;
    // A write with the first flagged frames now waits for the row; the
    // frames flagged meanwhile queue behind it.
    wait_for_lock_waiter(&mut conn, START).await;
    publisher.frames(&prefix, 30).await;
    publisher.flush(START).await;
    h.wait_status(id, START, "every shifted frame processed", |s| {
        processed(s) == 98
    })
    .await;

    // Another writer commits a successor: this worker's token is stale.
    sql(
        &mut blocker,
        &format!(
            "UPDATE radar_runtime_checkpoints SET signature = '\\x{}', writer_id = 'successor' \
             WHERE service_id = '{id}'",
            "ab".repeat(32)
        ),
    )
    .await;
    sql(&mut blocker, "COMMIT").await;
    worker.wait_log("Checkpoint writer halted", START).await;
    // The process outlives its monitor; its sessions end with it.
    worker.signal("TERM");
    worker.wait_exit(START).await;
    drop(blocker);
    wait_for_no_other_sessions(&mut conn, START).await;
    assert_eq!(
        evidence_since(&mut conn, id, shifted[0]).await,
        0,
        "nothing of the superseded writer lands after the successor: {}",
        worker.log()
    );
    let row = snapshot_row(&mut conn, id).await.expect("snapshot");
    assert_eq!(row.writer_id, "successor");
    let log = worker.log();
    assert_eq!(
        worker.log_count("Rejecting new results"),
        1,
        "one line for the first rejected result, not one per result:\n{log}"
    );
    let halted = log
        .lines()
        .find(|l| l.contains("Checkpoint writer halted"))
        .expect("halt line");
    let rejected: u64 = without_colours(halted)
        .rsplit_once("rejected=")
        .and_then(|(_, rest)| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no rejected count in {halted}"));
    assert!(
        rejected > 1,
        "the halt line sums the rejected results: {halted}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_evidence_batches_stall_the_model_and_their_results_commit_once_the_row_is_free() {
    let h = Harness::new("worker_faults_batch").await;
    let (id, prefix) = h.create_monitor("batch");
    // No checkpoint falls due by count or time: only evidence batches write.
    let worker = h.spawn_worker(
        "w-batch",
        &[
            ("RADAR_CHECKPOINT_INTERVAL", "100000"),
            ("RADAR_CHECKPOINT_MAX_INTERVAL_SECONDS", "600"),
            ("RADAR_CHECKPOINT_TIMEOUT_SECONDS", "3"),
        ],
        &[],
    );
    h.wait_status(id, START, "the monitor runs", |s| state(s) == "running")
        .await;
    let mut publisher = Publisher::connect(h.broker.port).await;
    publisher.frames(&prefix, 45).await;
    publisher.flush(START).await;
    h.wait_status(id, START, "monitoring after 45 frames", |s| {
        processed(s) == 45 && s["phase"] == "monitoring"
    })
    .await;
    let mut conn = h.connect().await;
    wait_snapshot(&mut conn, id, START, "the monitoring snapshot", |r| {
        r.processed_count >= 40
    })
    .await;

    let mut blocker = lock_snapshot_row(&h, id).await;
    publisher.shift = 50.0;
    let shifted = publisher.frames(&prefix, 6).await;
    publisher.shift = 0.0;
    publisher.flush(START).await;
    let stalled = poll::within(START)
        .every(Duration::from_millis(200))
        .wait_async("failing evidence batches stall the model", async || {
            let row = h.status_of(id);
            if state(&row) == "checkpoint_stalled" {
                return Ok(row);
            }
            publisher.frames(&prefix, 1).await;
            Err(format!("status {row:#}\nlog:\n{}", worker.log()))
        })
        .await;
    assert!(
        processed(&stalled) >= 51,
        "the flagged frames were scored before the stall: {stalled:#}"
    );
    assert_eq!(evidence_since(&mut conn, id, shifted[0]).await, 0);

    sql(&mut blocker, "ROLLBACK").await;
    h.wait_status(id, START, "running again", |s| state(s) == "running")
        .await;
    poll::within(START)
        .wait_async("the evidence kept during the stall commits", async || {
            let n = evidence_since(&mut conn, id, shifted[0]).await;
            poll::check(n >= shifted.len() as i64, || {
                format!("{n} rows; log:\n{}", worker.log())
            })
        })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_with_database_writes_disabled_ignores_a_committed_snapshot_and_starts_fresh() {
    let h = Harness::new("worker_faults_nowrite").await;
    let (id, prefix) = h.create_monitor("nowrite");
    let mut first = h.spawn_worker("w-writes", &[], &[]);
    h.wait_status(id, START, "the monitor runs", |s| state(s) == "running")
        .await;
    let mut publisher = Publisher::connect(h.broker.port).await;
    publisher.frames(&prefix, 50).await;
    publisher.flush(START).await;
    let mut conn = h.connect().await;
    wait_snapshot(&mut conn, id, START, "50 frames committed", |r| {
        r.processed_count == 50
    })
    .await;
    first.stop_cleanly(START).await;
    wait_for_no_other_sessions(&mut conn, START).await;
    let committed = snapshot_row(&mut conn, id).await.expect("snapshot");
    let status = h.status_of(id);

    let mut fresh = h.spawn_worker("w-nowrites", &[("RADAR_DB_WRITE_ENABLED", "false")], &[]);
    let port = fresh.metrics_port;
    let me = [("monitor_id", id.to_string())];
    let me: Vec<(&str, &str)> = me.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let metric = |name: &str| {
        radar_testkit::http::http_get(port, "/metrics")
            .and_then(|(_, text)| radar_testkit::exposition::sample(&text, name, &me))
    };
    wait_until(START, "the fresh monitor is connected", || {
        metric("radar_mqtt_connected") == Some(1.0)
    })
    .await
    .unwrap_or_else(|e| panic!("{e}; log:\n{}", fresh.log()));
    publisher.frames(&prefix, 5).await;
    publisher.flush(START).await;
    wait_until(START, "5 frames of the fresh detector", || {
        metric("radar_frames_emitted_total") == Some(5.0)
    })
    .await
    .unwrap_or_else(|e| panic!("{e}; log:\n{}", fresh.log()));
    let text = radar_testkit::http::http_get(port, "/metrics")
        .expect("metrics")
        .1;
    assert_eq!(
        radar_testkit::exposition::sample(
            &text,
            "radar_detector_phase",
            &[&me[..], &[("phase", "training")]].concat()
        ),
        Some(1.0),
        "a new detector, not the restored one (which was monitoring):\n{text}"
    );
    fresh.stop_cleanly(START).await;

    wait_for_no_other_sessions(&mut conn, START).await;
    assert_eq!(
        snapshot_row(&mut conn, id).await.as_ref(),
        Some(&committed),
        "the snapshot was neither read into nor overwritten"
    );
    assert_eq!(
        stored_part(h.status_of(id)),
        stored_part(status),
        "no status row written either"
    );
}

/// A `radar status --json` row without what the command computes from the
/// clock at the time it runs (ages, and staleness from them).
fn stored_part(mut row: serde_json::Value) -> serde_json::Value {
    if let Some(fields) = row.as_object_mut() {
        for computed in [
            "heartbeat_age_seconds",
            "last_checkpoint_age_seconds",
            "heartbeat_stale",
            "reading_ages_seconds",
        ] {
            fields.remove(computed);
        }
    }
    row
}
