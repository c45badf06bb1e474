//! Workers whose clock disagrees with the database's (Debian's
//! libfaketime): one started two hours ahead reports not ready and starts
//! no monitor; one whose clock jumps while it runs reports not ready, and
//! `radar status` measures its heartbeat's age on the database's clock, so
//! the heartbeat ages (and turns stale) once the worker is gone.

use std::time::Duration;

use radar_testkit::prelude::*;

const START: Duration = Duration::from_secs(30);
const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

fn libfaketime() -> &'static str {
    assert!(
        std::path::Path::new(LIBFAKETIME).exists(),
        "this test needs Debian's libfaketime: apt-get install faketime"
    );
    LIBFAKETIME
}

async fn wait_clock_skew(worker: &Worker) {
    wait_until(START, "/readyz names the clock", || {
        radar_testkit::http::http_get(worker.metrics_port, "/readyz")
            .is_some_and(|(code, body)| code == 503 && body.contains("clock_skew"))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}; log:\n{}", worker.log()));
    assert!(
        worker.log().contains("s ahead of PostgreSQL's"),
        "{}",
        worker.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_started_two_hours_ahead_reports_not_ready_and_starts_no_monitor() {
    let h = Harness::new("worker_clock_start").await;
    let (id, _) = h.create_monitor("clock-start");
    let worker = h.spawn_worker(
        "w-ahead",
        &[
            ("LD_PRELOAD", libfaketime()),
            ("FAKETIME", "+2h"),
            // Timers run on the monotonic clock; only wall time is off.
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
        ],
        &[],
    );
    wait_clock_skew(&worker).await;
    // A few clock checks later it still has not touched the monitor.
    wait_until(START, "/metrics answers", || {
        radar_testkit::http::http_get(worker.metrics_port, "/metrics").is_some()
    })
    .await
    .unwrap();
    let mut conn = h.connect().await;
    assert!(
        snapshot_row(&mut conn, id).await.is_none(),
        "{}",
        worker.log()
    );
    assert_eq!(state(&h.status_of(id)), "not_reported");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_whose_clock_jumps_reports_not_ready_and_its_heartbeat_ages_on_the_database_clock()
{
    let h = Harness::new("worker_clock_jump").await;
    let (id, _) = h.create_monitor("clock-jump");
    let offset = h.dir.path().join("faketime");
    std::fs::write(&offset, "+0\n").unwrap();
    let offset_file = offset.display().to_string();
    let mut worker = h.spawn_worker(
        "w-jump",
        &[
            ("LD_PRELOAD", libfaketime()),
            ("FAKETIME_TIMESTAMP_FILE", &offset_file),
            ("FAKETIME_NO_CACHE", "1"),
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
        ],
        &[],
    );
    h.wait_status(id, START, "the monitor runs", |s| state(s) == "running")
        .await;
    // The host's clock steps two hours ahead while the worker runs.
    std::fs::write(&offset, "+2h\n").unwrap();
    wait_clock_skew(&worker).await;
    let row = h
        .wait_status(id, START, "a heartbeat after the jump", |s| {
            s["heartbeat_age_seconds"].as_i64().is_some_and(|a| a <= 2)
        })
        .await;
    let age = row["heartbeat_age_seconds"].as_i64().expect("an age");
    assert!(
        age >= 0,
        "the heartbeat's age is measured on the database's clock: {row:#}"
    );

    // Once the worker is gone its heartbeat ages (and turns stale at 60 s
    // by the same arithmetic); stamped on the writer's clock it would stay
    // two hours in the future, never stale.
    worker.kill9();
    h.wait_status(id, START, "the dead worker's heartbeat ages", |s| {
        s["heartbeat_age_seconds"].as_i64().is_some_and(|a| a >= 5)
    })
    .await;
}
