//! A worker whose clock is two hours ahead (Debian's libfaketime): it
//! notices that its clock disagrees with the database's and reports not
//! ready, and `radar status` measures its heartbeat's age on the database's
//! clock, so the heartbeat ages (and turns stale) once the worker is gone.

#[path = "../../tests/common/mod.rs"]
mod common;
mod worker_common;

use std::time::Duration;

use worker_common::*;

const START: Duration = Duration::from_secs(30);
const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_two_hours_ahead_reports_not_ready_and_its_heartbeat_ages_on_the_database_clock() {
    assert!(
        std::path::Path::new(LIBFAKETIME).exists(),
        "this test needs Debian's libfaketime: apt-get install faketime"
    );
    let h = Harness::new("worker_clock").await;
    let (id, _) = h.create_monitor("clock");
    let mut worker = h.spawn_worker(
        "w-ahead",
        &[
            ("LD_PRELOAD", LIBFAKETIME),
            ("FAKETIME", "+2h"),
            // Timers run on the monotonic clock; only wall time is off.
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
        ],
        &[],
    );
    let not_ready = wait_until(START, "/readyz names the clock", || {
        common::http_get(worker.metrics_port, "/readyz")
            .is_some_and(|(code, body)| code == 503 && body.contains("clock_skew"))
    })
    .await;
    not_ready.unwrap_or_else(|e| panic!("{e}; log:\n{}", worker.log()));
    assert!(
        worker.log().contains("s ahead of PostgreSQL's"),
        "{}",
        worker.log()
    );

    let row = h
        .wait_status(id, START, "the skewed worker reports", |s| {
            s["worker_id"] == "w-ahead"
        })
        .await;
    let age = row["heartbeat_age_seconds"].as_i64().expect("an age");
    assert!(
        (0..=10).contains(&age),
        "the heartbeat's age is measured on the database's clock: {row:#}"
    );

    // Once the worker is gone its heartbeat ages (and turns stale at 60 s
    // by the same arithmetic); on the writer's clock it would stay two
    // hours in the future, never stale.
    worker.kill9();
    h.wait_status(id, START, "the dead worker's heartbeat ages", |s| {
        s["heartbeat_age_seconds"].as_i64().is_some_and(|a| a >= 5)
    })
    .await;
}
