//! `radar worker` against real PostgreSQL and Mosquitto: a hard kill resumes
//! from the last committed snapshot, a graceful stop commits every processed
//! frame, and a corrupted snapshot fails only its own monitor.

use std::time::{Duration, Instant};

use diesel_async::RunQueryDsl;
use radar_testkit::prelude::*;
use uuid::Uuid;

const START: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_worker_resumes_from_the_last_committed_snapshot_and_rejects_stale_redeliveries() {
    let h = Harness::new("worker_kill9").await;
    // An hour of maximum age: every redelivery below is far younger, so only
    // the restored watermark can refuse it (a source time older than the
    // maximum age is `too_old` first, whatever the watermark says, and the
    // loaded machine may take longer than the usual 30 s to get here).
    let (id, prefix) = h.create_monitor_edited("kill9", |file, _| file.max_age_ms(3_600_000));
    let (mut publisher, first, committed) = run_and_kill_mid_stream(&h, id, &prefix).await;
    // A retained message with an old source time: the broker delivers it
    // when the restarted monitor subscribes, and it must be rejected as stale.
    publisher
        .raw(&format!("{prefix}/a"), first[0], 1.0, true)
        .await;
    publisher.flush(START).await;

    let _worker = h.spawn_worker("w-kill-2", &[], &[]);
    let restored = h
        .wait_status(id, START, "the restarted monitor runs", |s| {
            state(s) == "running" && s["worker_id"] == "w-kill-2"
        })
        .await;
    restored_from_the_committed_snapshot_with_its_gap(&restored, &committed);

    redeliver_covered_frames_and_a_replay(&mut publisher, &prefix, &first).await;
    publisher.frames(&prefix, 10).await;
    publisher.flush(START).await;
    let mut conn = h.connect().await;
    let expected = committed.processed_count as u64 + 10;
    h.wait_status(
        id,
        START,
        "10 new frames on top of the restored count",
        |s| processed(s) == expected,
    )
    .await;
    let row = wait_snapshot(
        &mut conn,
        id,
        START,
        "a snapshot after the new frames",
        |r| r.processed_count as u64 == expected,
    )
    .await;
    assert_eq!(row.writer_id, "w-kill-2");
    stale_and_too_old_are_counted(&h, id);
}

/// Runs a worker through 60 committed frames, publishes 30 more and kills
/// it mid-stream; returns the publisher, the first 60 frames' times and the
/// snapshot row the kill left.
async fn run_and_kill_mid_stream(
    h: &Harness,
    id: Uuid,
    prefix: &str,
) -> (Publisher, Vec<i64>, SnapshotRow) {
    let mut worker = h.spawn_worker("w-kill-1", &[], &[]);
    h.wait_status(id, START, "the monitor runs", |s| state(s) == "running")
        .await;

    let mut publisher = Publisher::connect(h.broker.port).await;
    let first = publisher.frames(prefix, 60).await;
    publisher.flush(START).await;
    h.wait_status(id, START, "60 frames are processed", |s| processed(s) == 60)
        .await;
    let mut conn = h.connect().await;
    wait_snapshot(&mut conn, id, START, "a snapshot with 60 frames", |r| {
        r.processed_count == 60
    })
    .await;

    // Kill mid-stream: frames are still arriving.
    let streaming = publisher.frames(prefix, 30).await;
    publisher.flush(START).await;
    worker.kill9();
    wait_for_no_other_sessions(&mut conn, START).await;
    let committed = snapshot_row(&mut conn, id)
        .await
        .expect("a committed snapshot");
    assert!(committed.processed_count >= 60, "{committed:?}");
    eprintln!(
        "killed with {} frames committed of {} published",
        committed.processed_count,
        60 + streaming.len()
    );

    (publisher, first, committed)
}

fn restored_from_the_committed_snapshot_with_its_gap(
    restored: &serde_json::Value,
    committed: &SnapshotRow,
) {
    assert_eq!(
        restored["recovery"]["restored_processed_count"].as_u64(),
        Some(committed.processed_count as u64),
        "restored from the committed snapshot: {restored:#}"
    );
    assert_eq!(
        processed(restored),
        committed.processed_count as u64,
        "the processed count starts at the committed one, not zero: {restored:#}"
    );
    let rollback = restored["coverage"]["gaps"]
        .as_array()
        .and_then(|gaps| gaps.iter().find(|g| g["cause"] == "restart_rollback"))
        .unwrap_or_else(|| panic!("the restart gap is reported: {:#}", restored["coverage"]));
    let from: chrono::DateTime<chrono::Utc> = rollback["from"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .expect("gap start");
    assert!(
        (from - committed.saved_at).num_milliseconds().abs() <= 1,
        "the gap starts when the restored snapshot was saved ({}): {rollback:#}",
        committed.saved_at
    );
}

/// Re-deliveries of frames the snapshot already covers, and one replay
/// from before the maximum age.
async fn redeliver_covered_frames_and_a_replay(
    publisher: &mut Publisher,
    prefix: &str,
    first: &[i64],
) {
    let redelivered = [first[0], first[30], first[59]];
    for ts in redelivered {
        for reading in ["a", "b"] {
            publisher
                .raw(&format!("{prefix}/{reading}"), ts, 5.0, false)
                .await;
        }
    }
    // A replay from before the maximum age is below the watermark too, but
    // is named `too_old`: the rule that decides it comes first.
    let two_hours_before = first[0] - 2 * 3_600_000;
    publisher
        .raw(&format!("{prefix}/a"), two_hours_before, 5.0, false)
        .await;
}

fn stale_and_too_old_are_counted(h: &Harness, id: Uuid) {
    let (inspection, code) = h.inspect(id);
    assert_eq!(code, Some(0), "{inspection:#}");
    let rejected = counts(&inspection["counters"]["observations_rejected"]);
    // Two readings times three redelivered frames, plus the retained message.
    assert_eq!(
        rejected.get("stale").copied(),
        Some(7),
        "stale redeliveries are rejected and counted: {inspection:#}"
    );
    assert_eq!(
        rejected.get("too_old").copied(),
        Some(1),
        "the replay older than the maximum age is too_old: {inspection:#}"
    );
    assert!(
        gaps(&inspection["coverage"])
            .iter()
            .any(|(cause, _)| cause == "restart_rollback"),
        "{inspection:#}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_commits_a_last_snapshot_holding_every_processed_frame() {
    let h = Harness::new("worker_sigterm").await;
    let (id, prefix) = h.create_monitor("sigterm");
    // Only phase changes and the shutdown checkpoint: frames after the fit
    // (40) reach the database only through the last snapshot.
    let env = [
        ("RADAR_CHECKPOINT_INTERVAL", "100000"),
        ("RADAR_CHECKPOINT_MAX_INTERVAL_SECONDS", "3600"),
    ];
    let mut worker = h.spawn_worker("w-term", &env, &[]);
    h.wait_status(id, START, "the monitor runs", |s| state(s) == "running")
        .await;
    let mut publisher = Publisher::connect(h.broker.port).await;
    const N: u64 = 57;
    publisher.frames(&prefix, N as usize).await;
    publisher.flush(START).await;
    h.wait_status(id, START, "every frame is processed", |s| processed(s) == N)
        .await;
    let mut conn = h.connect().await;
    let before = snapshot_row(&mut conn, id).await.expect("snapshot");
    assert!(
        (before.processed_count as u64) < N,
        "the test needs frames that only the last snapshot holds: {before:?}"
    );

    let stop = Instant::now();
    worker.signal("TERM");
    let status = worker.wait_exit(Duration::from_secs(30)).await;
    eprintln!("graceful stop took {:?}", stop.elapsed());
    assert!(status.success(), "exit {status:?}; log:\n{}", worker.log());
    let row = snapshot_row(&mut conn, id).await.expect("snapshot");
    assert_eq!(
        row.processed_count as u64,
        N,
        "{row:?}; log:\n{}",
        worker.log()
    );
    assert!(row.committed_at > before.committed_at);
    let (inspection, code) = h.inspect(id);
    assert_eq!(code, Some(0), "{inspection:#}");
    assert_eq!(inspection["processed_count"].as_u64(), Some(N));
    let status = h.status_of(id);
    assert_eq!(processed(&status), N, "{status:#}");
    assert_eq!(status["connected"], false, "{status:#}");
    assert_eq!(state(&status), "stopped", "{status:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupted_snapshot_fails_only_its_monitor_and_a_single_monitor_worker_exits_non_zero() {
    let h = Harness::new("worker_corrupt").await;
    let (bad, bad_prefix) = h.create_monitor("corrupt");
    let (good, good_prefix) = h.create_monitor("healthy");
    let mut worker = h.spawn_worker("w-corrupt-1", &[], &[]);
    for id in [bad, good] {
        h.wait_status(id, START, "both monitors run", |s| state(s) == "running")
            .await;
    }
    let mut publisher = Publisher::connect(h.broker.port).await;
    publisher.frames(&bad_prefix, 5).await;
    publisher.frames(&good_prefix, 5).await;
    publisher.flush(START).await;
    for id in [bad, good] {
        h.wait_status(id, START, "5 frames processed", |s| processed(s) == 5)
            .await;
    }
    worker.stop_cleanly(Duration::from_secs(30)).await;

    let mut conn = h.connect().await;
    diesel::sql_query(
        "UPDATE radar_runtime_checkpoints \
         SET payload = set_byte(payload, 3, get_byte(payload, 3) # 255) WHERE service_id = $1",
    )
    .bind::<diesel::sql_types::Uuid, _>(bad)
    .execute(&mut conn)
    .await
    .expect("corrupt the payload");
    let (inspection, code) = h.inspect(bad);
    assert_eq!(code, Some(2), "inspect sees the corruption: {inspection:#}");

    let mut worker = h.spawn_worker("w-corrupt-2", &[], &[]);
    let failed = h
        .wait_status(
            bad,
            START,
            "the corrupted monitor reports startup_failed",
            |s| state(s) == "startup_failed",
        )
        .await;
    let reason = failed["last_error"].as_str().unwrap_or("");
    assert!(!reason.is_empty(), "the reason is persisted: {failed:#}");
    let healthy = h
        .wait_status(good, START, "the other monitor runs", |s| {
            state(s) == "running" && s["worker_id"] == "w-corrupt-2"
        })
        .await;
    assert_eq!(
        healthy["recovery"]["restored_processed_count"].as_u64(),
        Some(5)
    );
    publisher.frames(&good_prefix, 3).await;
    publisher.flush(START).await;
    h.wait_status(good, START, "the other monitor keeps processing", |s| {
        processed(s) == 8
    })
    .await;
    assert!(
        worker.running(),
        "one bad snapshot must not stop the worker"
    );
    let again = h.status_of(bad);
    assert_eq!(state(&again), "startup_failed", "not restarted: {again:#}");
    worker.stop_cleanly(Duration::from_secs(30)).await;

    let mut single = h.spawn_worker("w-corrupt-3", &[], &["--monitor", &bad.to_string()]);
    let status = single.wait_exit(START).await;
    assert!(
        !status.success(),
        "--monitor with a corrupted snapshot must fail; log:\n{}",
        single.log()
    );
    eprintln!("--monitor exit: {status:?}; reason: {reason}");
}

#[derive(Debug, diesel::QueryableByName)]
#[allow(dead_code)] // Read through Debug in failure messages.
struct AlarmRow {
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    alarm_seq: i64,
    #[diesel(sql_type = diesel::sql_types::Timestamptz)]
    opened_at: chrono::DateTime<chrono::Utc>,
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Timestamptz>)]
    closed_at: Option<chrono::DateTime<chrono::Utc>>,
}

#[derive(Debug, diesel::QueryableByName)]
#[allow(dead_code)] // alarm_seq is read through Debug in failure messages.
struct EvidenceRow {
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    frame_seq: i64,
    #[diesel(sql_type = diesel::sql_types::Timestamptz)]
    frame_ts: chrono::DateTime<chrono::Utc>,
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::BigInt>)]
    alarm_seq: Option<i64>,
}

/// Evidence and alarms flush in batches between checkpoints, so after a
/// kill the database may hold results of frames the restored snapshot never
/// saw. The restored detector then numbers new frames and alarms from the
/// snapshot's counters again: this checks that results of the rolled-back
/// stretch and of the new one are not mixed under the same numbers.
///
/// The alarm of the rolled-back stretch is unknown to the restored
/// detector, which would never close it and would number its next alarm
/// the same: the restart closes it and numbers new alarms after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_flushed_after_the_last_snapshot_survive_a_kill_and_new_alarms_do_not_overwrite_them()
 {
    let h = Harness::new("worker_kill_results").await;
    let (id, prefix) = h.create_monitor("kill-results");
    let env = [
        ("RADAR_CHECKPOINT_INTERVAL", "100000"),
        ("RADAR_CHECKPOINT_MAX_INTERVAL_SECONDS", "3600"),
    ];
    let mut worker = h.spawn_worker("w-results-1", &env, &[]);
    h.wait_status(id, START, "the monitor runs", |s| state(s) == "running")
        .await;
    let mut publisher = Publisher::connect(h.broker.port).await;
    publisher.frames(&prefix, WARMUP_FRAMES as usize).await;
    publisher.shift = 50.0;
    let first_episode = publisher.frames(&prefix, 6).await;
    publisher.shift = 0.0;
    publisher.flush(START).await;
    let mut conn = h.connect().await;
    poll::within(START)
        .wait_async("an alarm is flushed", async || {
            let alarms: Vec<AlarmRow> =
                diesel::sql_query("SELECT alarm_seq, opened_at, closed_at FROM radar_alarms")
                    .load(&mut conn)
                    .await
                    .unwrap();
            poll::check(!alarms.is_empty(), || {
                format!("no alarm; log:\n{}", worker.log())
            })
        })
        .await;
    let snapshot = snapshot_row(&mut conn, id).await.unwrap();
    assert!(
        (snapshot.processed_count as u64) < WARMUP_FRAMES + 6,
        "the alarm must be newer than the snapshot for this test: {snapshot:?}"
    );
    worker.kill9();
    wait_for_no_other_sessions(&mut conn, START).await;

    let _worker = h.spawn_worker("w-results-2", &env, &[]);
    h.wait_status(id, START, "the restarted monitor runs", |s| {
        state(s) == "running" && s["worker_id"] == "w-results-2"
    })
    .await;
    publisher.frames(&prefix, 3).await;
    publisher.shift = 50.0;
    let second_episode = publisher.frames(&prefix, 6).await;
    publisher.shift = 0.0;
    publisher.flush(START).await;
    let newest = chrono::DateTime::from_timestamp_millis(second_episode[5]).unwrap();
    let evidence = poll::within(START)
        .wait_async("the second episode's evidence lands", async || {
            let evidence: Vec<EvidenceRow> = diesel::sql_query(
                "SELECT frame_seq, frame_ts, alarm_seq FROM radar_evidence ORDER BY frame_ts",
            )
            .load(&mut conn)
            .await
            .unwrap();
            if evidence.iter().any(|e| e.frame_ts == newest) {
                Ok(evidence)
            } else {
                Err(evidence)
            }
        })
        .await;
    let alarms: Vec<AlarmRow> = diesel::sql_query(
        "SELECT alarm_seq, opened_at, closed_at FROM radar_alarms ORDER BY alarm_seq",
    )
    .load(&mut conn)
    .await
    .unwrap();
    eprintln!(
        "alarms: {alarms:#?}\nevidence: {evidence:#?}\nfirst episode {first_episode:?}\nsecond {second_episode:?}"
    );
    // frame_seq is the processed count at the frame, so it repeats after a
    // rollback by design; a frame's identity is its source time. What must
    // hold: the evidence committed before the kill is still there.
    let first_ts: Vec<_> = first_episode
        .iter()
        .filter_map(|ms| chrono::DateTime::from_timestamp_millis(*ms))
        .collect();
    assert!(
        evidence.iter().any(|e| first_ts.contains(&e.frame_ts)),
        "evidence committed before the kill was lost: {evidence:#?}"
    );
    let episodes = [first_episode[0], second_episode[0]];
    assert!(
        alarms.len() >= 2,
        "two alarm episodes (first opened near {:?}, second near {:?}) are stored as {} alarm row(s): {alarms:#?}",
        episodes[0],
        episodes[1],
        alarms.len()
    );
    let mut seqs: Vec<i64> = alarms.iter().map(|a| a.alarm_seq).collect();
    seqs.dedup();
    assert_eq!(
        seqs.len(),
        alarms.len(),
        "alarm numbers reused: {alarms:#?}"
    );
    let second_start = chrono::DateTime::from_timestamp_millis(second_episode[0]).unwrap();
    let open: Vec<&AlarmRow> = alarms.iter().filter(|a| a.closed_at.is_none()).collect();
    assert!(
        open.iter().all(|a| a.opened_at >= second_start),
        "an alarm of the rolled-back stretch is left open, owned by no detector: {alarms:#?}"
    );
    assert!(
        open.len() <= 1,
        "one detector has one open alarm: {alarms:#?}"
    );
}
