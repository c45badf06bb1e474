//! PostgreSQL unavailable to a monitor for longer than the checkpoint
//! timeout (its snapshot row locked from another connection): the model
//! stops advancing while data keeps flowing, nothing committed is lost, and
//! once the row is free it resumes and reports a `checkpoint_stall` gap.

use std::time::{Duration, Instant};

use diesel_async::{AsyncPgConnection, RunQueryDsl};
use radar_testkit::prelude::*;
use uuid::Uuid;

const START: Duration = Duration::from_secs(30);

/// A monitor running on a worker of its own (`w-<name>`, settings `env`)
/// with its first `frames` frames committed.
struct Committed {
    id: Uuid,
    prefix: String,
    worker: Worker,
    publisher: Publisher,
    conn: AsyncPgConnection,
    row: SnapshotRow,
}

async fn committed_frames(
    h: &Harness,
    name: &str,
    env: &[(&str, &str)],
    frames: usize,
) -> Committed {
    let (id, prefix) = h.create_monitor(name);
    let worker = h.spawn_worker(&format!("w-{name}"), env, &[]);
    h.wait_status(id, START, "the monitor runs", |s| state(s) == "running")
        .await;
    let mut publisher = Publisher::connect(h.broker.port).await;
    publisher.frames(&prefix, frames).await;
    publisher.flush(START).await;
    let mut conn = h.connect().await;
    let row = wait_snapshot(&mut conn, id, START, "the first frames committed", |r| {
        r.processed_count == frames as i64
    })
    .await;
    Committed {
        id,
        prefix,
        worker,
        publisher,
        conn,
        row,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_locked_snapshot_row_stalls_the_model_until_it_commits_again() {
    let h = Harness::new("worker_stall").await;
    let env = [("RADAR_CHECKPOINT_TIMEOUT_SECONDS", "3")];
    let Committed {
        id,
        prefix,
        worker,
        mut publisher,
        mut conn,
        ..
    } = committed_frames(&h, "stall", &env, 50).await;
    h.wait_status(id, START, "50 frames processed", |s| processed(s) == 50)
        .await;

    // Hold the row lock: every checkpoint now waits and times out.
    let mut blocker = lock_snapshot_row(&h, id).await;
    let locked_at = Instant::now();
    let committed = snapshot_row(&mut conn, id).await.expect("snapshot");

    // Data keeps flowing while checkpoints cannot commit.
    let stalled = poll::within(START)
        .wait_async("the monitor is checkpoint_stalled", async || {
            publisher.frames(&prefix, 2).await;
            let row = h.status_of(id);
            if state(&row) == "checkpoint_stalled" {
                Ok(row)
            } else {
                Err(format!("status {row:#}\nlog:\n{}", worker.log()))
            }
        })
        .await;
    eprintln!("checkpoint_stalled after {:?} of lock", locked_at.elapsed());
    let frozen = processed(&stalled);
    // Two more heartbeats, with frames published in between: the count stays.
    let beat = stalled["heartbeat_at"].clone();
    let mut beats = 0;
    let mut last_beat = beat;
    // A stalled row whose content does not change is refreshed every 10 s.
    poll::within(START + Duration::from_secs(20))
        .wait_async("two heartbeats while stalled", async || {
            publisher.frames(&prefix, 5).await;
            publisher.flush(START).await;
            let row = h.status_of(id);
            if row["heartbeat_at"] != last_beat {
                beats += 1;
                last_beat = row["heartbeat_at"].clone();
                assert_eq!(state(&row), "checkpoint_stalled", "{row:#}");
                assert_eq!(
                    processed(&row),
                    frozen,
                    "the model must not advance while stalled: {row:#}"
                );
            }
            poll::check(beats >= 2, || {
                format!("{beats} heartbeats; last status {row:#}")
            })
        })
        .await;
    let gaps_now = gaps(&stalled["coverage"]);
    assert!(
        gaps_now.contains(&("checkpoint_stall".to_string(), false)),
        "{gaps_now:?}"
    );

    diesel::sql_query("ROLLBACK")
        .execute(&mut blocker)
        .await
        .unwrap();
    let unlocked = Instant::now();
    let after = snapshot_row(&mut conn, id).await.expect("snapshot");
    assert!(
        after.processed_count >= committed.processed_count,
        "nothing committed is lost"
    );
    h.wait_status(id, START, "the monitor runs again", |s| {
        state(s) == "running"
    })
    .await;
    eprintln!("running again {:?} after the unlock", unlocked.elapsed());
    publisher.frames(&prefix, 10).await;
    publisher.flush(START).await;
    let resumed = h
        .wait_status(id, START, "the model advances again", |s| {
            processed(s) >= frozen + 10
        })
        .await;
    assert!(
        gaps(&resumed["coverage"]).contains(&("checkpoint_stall".to_string(), true)),
        "the closed stall gap is reported: {:#}",
        resumed["coverage"]
    );
    let row = wait_snapshot(&mut conn, id, START, "a commit after the stall", |r| {
        r.processed_count as u64 >= frozen + 10
    })
    .await;
    assert!(row.processed_count >= committed.processed_count);
    let (inspection, code) = h.inspect(id);
    assert_eq!(code, Some(0), "{inspection:#}");
    let rejected = counts(&inspection["counters"]["observations_rejected"]);
    assert!(
        rejected.get("model_stopped").copied().unwrap_or(0) > 0,
        "input during the stall is drained and counted: {inspection:#}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_while_checkpoints_cannot_commit_stops_within_a_bound_and_keeps_the_committed_snapshot()
 {
    let h = Harness::new("worker_stall_term").await;
    let env = [("RADAR_CHECKPOINT_TIMEOUT_SECONDS", "3")];
    let Committed {
        id,
        prefix,
        mut worker,
        mut publisher,
        mut conn,
        ..
    } = committed_frames(&h, "stall-term", &env, 50).await;

    let mut blocker = lock_snapshot_row(&h, id).await;
    publisher.frames(&prefix, 5).await;
    publisher.flush(START).await;
    h.wait_status(id, START, "55 frames processed", |s| processed(s) == 55)
        .await;

    let stop = Instant::now();
    worker.signal("TERM");
    // The bound: checkpoint timeout plus the worker's stop grace (15 s).
    let status = worker.wait_exit(Duration::from_secs(3 + 15 + 5)).await;
    let took = stop.elapsed();
    eprintln!("stop with a locked row took {took:?}, exit {status:?}");
    diesel::sql_query("ROLLBACK")
        .execute(&mut blocker)
        .await
        .unwrap();
    let row = snapshot_row(&mut conn, id).await.expect("snapshot");
    assert_eq!(row.processed_count, 50, "the committed snapshot is intact");
    let (inspection, code) = h.inspect(id);
    assert_eq!(code, Some(0), "{inspection:#}");
    eprintln!(
        "log tail:\n{}",
        worker
            .log()
            .lines()
            .rev()
            .take(12)
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_monitor_is_not_reported_as_checkpoint_stalled() {
    let h = Harness::new("worker_idle").await;
    let env = [("RADAR_CHECKPOINT_TIMEOUT_SECONDS", "3")];
    let Committed {
        id,
        prefix,
        worker,
        mut publisher,
        row: committed,
        ..
    } = committed_frames(&h, "idle", &env, 45).await;

    // No data for well over the checkpoint timeout: nothing needs a
    // checkpoint, so nothing is stalled.
    let quiet_until = committed.committed_at + chrono::TimeDelta::seconds(8);
    let mut seen = Vec::new();
    let row = poll::within(START)
        .every(Duration::from_millis(200))
        .wait("a heartbeat after the quiet period", || {
            let row = h.status_of(id);
            seen.push(state(&row).to_string());
            let beat: Option<chrono::DateTime<chrono::Utc>> =
                row["heartbeat_at"].as_str().and_then(|s| s.parse().ok());
            if beat.is_some_and(|b| b > quiet_until) {
                Ok(row)
            } else {
                Err(row)
            }
        })
        .await;
    let stalls: Vec<_> = gaps(&row["coverage"])
        .into_iter()
        .filter(|(c, _)| c == "checkpoint_stall")
        .collect();
    assert!(
        !seen.iter().any(|s| s == "checkpoint_stalled") && stalls.is_empty(),
        "an idle monitor was reported stalled: states {seen:?}, stall gaps {stalls:?}; log:\n{}",
        worker.log()
    );
    // The first frame after the quiet period is processed, not dropped.
    publisher.frames(&prefix, 1).await;
    publisher.flush(START).await;
    h.wait_status(id, START, "the next frame is processed", |s| {
        processed(s) == 46
    })
    .await;
}

/// A slow sensor with the timeout equal to the maximum interval (as in the
/// defaults): every change waits out the maximum interval before its
/// checkpoint starts, and that must not count against the timeout, which
/// bounds how long a started write may go uncommitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sparse_monitor_checkpointing_at_the_maximum_interval_never_stalls() {
    let h = Harness::new("worker_sparse").await;
    let env = [
        ("RADAR_CHECKPOINT_TIMEOUT_SECONDS", "2"),
        ("RADAR_CHECKPOINT_MAX_INTERVAL_SECONDS", "2"),
    ];
    let Committed {
        id,
        prefix,
        worker,
        mut publisher,
        mut conn,
        ..
    } = committed_frames(&h, "sparse", &env, 45).await;

    // One frame every 3 s: each one's checkpoint is due by the maximum
    // interval only, 2 s after it, with no frame in between to start it.
    for sent in 46..=49 {
        publisher.frames(&prefix, 1).await;
        publisher.flush(START).await;
        wait_snapshot(&mut conn, id, START, "the frame committed", |r| {
            r.processed_count == sent
        })
        .await;
        // Pacing of the slow sensor, not a wait for a condition.
        tokio::time::sleep(Duration::from_millis(1000)).await;
    }

    let row = h.status_of(id);
    let stalls: Vec<_> = gaps(&row["coverage"])
        .into_iter()
        .filter(|(c, _)| c == "checkpoint_stall")
        .collect();
    assert!(
        stalls.is_empty() && state(&row) == "running",
        "a monitor whose checkpoints commit at once was reported stalled: state {}, stall gaps {stalls:?}; log:\n{}",
        state(&row),
        worker.log()
    );
    let (inspection, code) = h.inspect(id);
    assert_eq!(code, Some(0), "{inspection:#}");
    let rejected = counts(&inspection["counters"]["observations_rejected"]);
    assert_eq!(
        rejected.get("model_stopped").copied().unwrap_or(0),
        0,
        "no frame may be dropped for a stall: {inspection:#}"
    );
}

/// A status row as stored: its heartbeat time and everything else.
#[derive(diesel::QueryableByName, Debug, Clone, PartialEq)]
struct StoredStatus {
    #[diesel(sql_type = diesel::sql_types::Timestamptz)]
    heartbeat_at: chrono::DateTime<chrono::Utc>,
    /// Every column but `heartbeat_at`, as JSON text.
    #[diesel(sql_type = diesel::sql_types::Text)]
    content: String,
}

async fn stored_status(conn: &mut AsyncPgConnection, id: Uuid) -> Option<StoredStatus> {
    diesel::sql_query(
        "SELECT heartbeat_at, (to_jsonb(s) - 'heartbeat_at')::text AS content \
         FROM radar_operational_status s WHERE service_id = $1",
    )
    .bind::<diesel::sql_types::Uuid, _>(id)
    .get_result(conn)
    .await
    .ok()
}

/// An idle monitor's status row costs its database one row every 10 s, not
/// one every 2 s: while its content stays the same the row is only
/// refreshed, about every 10 s (still often enough for the take-back delay
/// and `radar status` to see a live owner). A change is written on the
/// next beat (every 2 s), however recently the row was refreshed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_monitors_row_is_refreshed_every_10_s_and_a_change_is_written_at_once() {
    let h = Harness::new("worker_refresh").await;
    let Committed {
        id,
        prefix,
        worker,
        mut publisher,
        mut conn,
        ..
    } = committed_frames(&h, "refresh", &[], 5).await;

    // Distinct stored rows, in order, until two refreshes of an unchanged
    // row have been seen.
    let mut rows: Vec<(Instant, StoredStatus)> = Vec::new();
    let refreshes = |rows: &[(Instant, StoredStatus)]| -> Vec<chrono::TimeDelta> {
        rows.windows(2)
            .filter(|w| w[0].1.content == w[1].1.content)
            .map(|w| w[1].1.heartbeat_at - w[0].1.heartbeat_at)
            .collect()
    };
    poll::within(Duration::from_secs(60))
        .every(Duration::from_millis(100))
        .wait_async("two refreshes of an unchanged row", async || {
            if let Some(now) = stored_status(&mut conn, id).await
                && rows.last().is_none_or(|(_, last)| *last != now)
            {
                rows.push((Instant::now(), now));
            }
            let seen = refreshes(&rows);
            poll::check(seen.len() >= 2, || {
                format!("refreshes {seen:?} among {} rows", rows.len())
            })
        })
        .await;
    let seen = refreshes(&rows);
    assert!(
        seen.iter()
            .all(|d| *d >= chrono::TimeDelta::milliseconds(8_500)
                && *d <= chrono::TimeDelta::milliseconds(14_000)),
        "an unchanged row must be refreshed about every 10 s: {seen:?}\n{}",
        worker.log()
    );

    // Right after a refresh, one more frame: written on the next beat,
    // not with the next refresh 10 s later.
    let (refreshed, last) = rows.last().cloned().expect("a row");
    publisher.frames(&prefix, 1).await;
    publisher.flush(START).await;
    let written = poll::within(START)
        .every(Duration::from_millis(100))
        .wait_async("the new frame's count written", async || {
            let now = stored_status(&mut conn, id).await;
            let count = now.as_ref().and_then(|n| {
                serde_json::from_str::<serde_json::Value>(&n.content).ok()?["processed_count"]
                    .as_i64()
            });
            match now {
                Some(now) if count == Some(6) && now != last => Ok(Instant::now()),
                other => Err(format!("{other:?}")),
            }
        })
        .await;
    let after = written - refreshed;
    assert!(
        after < Duration::from_secs(7),
        "a changed record waited {after:?} after the last refresh: it must be written on the next 2 s beat"
    );
}
