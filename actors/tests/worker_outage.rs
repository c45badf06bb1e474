//! A private PostgreSQL cluster that goes away: failed checkpoints are
//! retried after doubling pauses instead of on every batch, and a worker
//! started while the database is down waits, not ready, and starts its
//! monitors once it answers.

use std::time::{Duration, Instant};

use radar_testkit::postgres::PrivatePostgres;
use radar_testkit::prelude::*;

const START: Duration = Duration::from_secs(30);

/// Attempts that failed, as the worker logs them (one line each).
fn failed_writes(worker: &Worker) -> usize {
    worker.log_count("Checkpoint failed; pending results stay queued.")
        + worker.log_count("An evidence batch failed; it stays queued.")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn during_a_database_outage_checkpoints_are_retried_after_doubling_pauses_not_per_batch() {
    let mut pg = PrivatePostgres::start().expect("a private PostgreSQL cluster");
    let h = Harness::on_server(&pg.url(), "worker_outage_backoff").await;
    let (id, prefix) = h.create_monitor("backoff");
    let mut worker = h.spawn_worker("w-backoff", &[], &[]);
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
    drop(conn);

    // 15 s of outage at 10 frames per second (checkpoint every 10 frames
    // or every second, timeout 5 s): pauses of 1, 2, 4, 5, 5 s allow about
    // six attempts; a retry per batch would make well over a hundred.
    pg.stop().expect("stop PostgreSQL");
    let outage = Instant::now();
    while outage.elapsed() < Duration::from_secs(15) {
        publisher.frames(&prefix, 1).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let failed = failed_writes(&worker);
    eprintln!("{failed} failed writes in 15 s of outage");
    assert!(failed >= 2, "the outage was noticed\n{}", worker.log());
    assert!(
        failed <= 14,
        "{failed} failed writes in 15 s: no backoff\n{}",
        worker.log()
    );

    // The pause never exceeds the timeout: once the database is back the
    // next checkpoint commits within it.
    pg.restart().expect("start PostgreSQL again");
    let back = Instant::now();
    let mut conn = h.connect().await;
    publisher.frames(&prefix, 10).await;
    publisher.flush(START).await;
    wait_snapshot(&mut conn, id, START, "a checkpoint after the outage", |r| {
        r.processed_count > 50
    })
    .await;
    eprintln!("committed again {:?} after the restart", back.elapsed());
    assert!(worker.running(), "{}", worker.log());
    worker.stop_cleanly(START).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_started_while_the_database_is_down_waits_not_ready_and_starts_when_it_answers() {
    let mut pg = PrivatePostgres::start().expect("a private PostgreSQL cluster");
    let h = Harness::on_server(&pg.url(), "worker_outage_start").await;
    let (id, prefix) = h.create_monitor("late");
    pg.stop().expect("stop PostgreSQL");

    let mut worker = h.spawn_worker("w-late", &[], &[]);
    worker
        .wait_log(
            "PostgreSQL cannot be reached; the worker is not ready",
            START,
        )
        .await;
    let readyz = wait_until(START, "/readyz answers 503", || {
        radar_testkit::http::http_get(worker.metrics_port, "/readyz")
            .is_some_and(|(code, _)| code == 503)
    })
    .await;
    readyz.unwrap_or_else(|e| panic!("{e}; log:\n{}", worker.log()));
    let (_, body) = radar_testkit::http::http_get(worker.metrics_port, "/readyz").expect("readyz");
    assert!(body.contains("database_unavailable"), "{body}");
    let (code, _) =
        radar_testkit::http::http_get(worker.metrics_port, "/healthz").expect("healthz");
    assert_eq!(code, 200, "the process is alive, only not ready");
    // Still waiting a few retries later.
    wait_until(START, "a second attempt", || {
        worker.log_count("PostgreSQL cannot be reached;") >= 2
    })
    .await
    .unwrap_or_else(|e| panic!("{e}; log:\n{}", worker.log()));
    assert!(
        worker.running(),
        "exited instead of waiting\n{}",
        worker.log()
    );

    pg.restart().expect("start PostgreSQL again");
    h.wait_status(id, Duration::from_secs(60), "the monitor runs", |s| {
        state(s) == "running"
    })
    .await;
    let mut publisher = Publisher::connect(h.broker.port).await;
    publisher.frames(&prefix, 20).await;
    publisher.flush(START).await;
    let mut conn = h.connect().await;
    wait_snapshot(&mut conn, id, START, "frames committed", |r| {
        r.processed_count == 20
    })
    .await;
    wait_until(START, "/readyz answers 200", || {
        radar_testkit::http::http_get(worker.metrics_port, "/readyz")
            .is_some_and(|(code, _)| code == 200)
    })
    .await
    .unwrap_or_else(|e| panic!("{e}; log:\n{}", worker.log()));
    worker.stop_cleanly(START).await;
}
