//! 200 monitors in one `radar worker` process stay healthy while each
//! receives data.

use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use diesel_async::RunQueryDsl;
use radar_testkit::prelude::*;

const MONITORS: usize = 200;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_monitors_in_one_process_all_run_and_process_data() {
    let h = Harness::new("worker_scale").await;
    let monitors = h.create_monitors(MONITORS).await;
    let started = Instant::now();
    let worker = h.spawn_worker("w-scale", &[], &[]);
    let mut publisher = Publisher::connect(h.broker.port).await;

    // Every monitor gets a frame per round, running or not yet.
    let outcome = poll::within(Duration::from_secs(240))
        .every(Duration::from_millis(500))
        .try_wait_async("every monitor runs with data", async || {
            for (_, prefix) in &monitors {
                publisher.frames(prefix, 1).await;
            }
            publisher.flush(Duration::from_secs(60)).await;
            let last: HashMap<String, (String, u64)> = h
                .status()
                .into_iter()
                .map(|s| {
                    (
                        s["monitor_id"].as_str().unwrap_or("").to_string(),
                        (state(&s).to_string(), processed(&s)),
                    )
                })
                .collect();
            let healthy = monitors
                .iter()
                .filter(|(id, _)| {
                    last.get(&id.to_string())
                        .is_some_and(|(state, n)| state == "running" && *n > 0)
                })
                .count();
            if healthy == MONITORS {
                return Ok(last);
            }
            let mut states: HashMap<String, usize> = HashMap::new();
            for (state, _) in last.values() {
                *states.entry(state.clone()).or_default() += 1;
            }
            Err(states)
        })
        .await;
    let elapsed = started.elapsed();
    let rss = worker.rss_kib();
    let last = outcome.unwrap_or_else(|timeout| {
        panic!(
            "not every monitor ran with data in time: {timeout}; log tail:\n{}",
            tail(&worker.log())
        )
    });
    eprintln!(
        "{MONITORS} monitors running with data after {elapsed:?}; worker RSS {} MiB",
        rss / 1024
    );

    // Still healthy a few heartbeats later, with data still flowing.
    let processed_then: HashMap<String, u64> =
        last.iter().map(|(k, (_, n))| (k.clone(), *n)).collect();
    poll::within(Duration::from_secs(60))
        .every(Duration::from_millis(500))
        .wait_async("every monitor keeps running and advancing", async || {
            for (_, prefix) in &monitors {
                publisher.frames(prefix, 1).await;
            }
            publisher.flush(Duration::from_secs(60)).await;
            let now: Vec<_> = h.status();
            let advanced = now
                .iter()
                .filter(|s| {
                    let id = s["monitor_id"].as_str().unwrap_or("");
                    state(s) == "running"
                        && processed(s) > processed_then.get(id).copied().unwrap_or(0)
                })
                .count();
            poll::check(advanced == MONITORS, || {
                format!("only {advanced} of {MONITORS} monitors running and advancing")
            })
        })
        .await;
    eprintln!(
        "{MONITORS} monitors still running and advancing; RSS {} MiB",
        worker.rss_kib() / 1024
    );

    // The worker writes its monitors' heartbeats together: every status
    // row version names the transaction that wrote it, and the rows of 200
    // monitors heartbeating every 2 s come from the last few flushes (one
    // a second), not from 200 transactions of their own.
    #[derive(diesel::QueryableByName)]
    struct Count {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        n: i64,
    }
    let writers: Count =
        diesel::sql_query("SELECT count(DISTINCT xmin::text) AS n FROM radar_operational_status")
            .get_result(&mut h.connect().await)
            .await
            .expect("count the transactions behind the status rows");
    eprintln!(
        "{MONITORS} status rows written by {} transactions",
        writers.n
    );
    assert!(
        writers.n <= 10,
        "{MONITORS} status rows come from {} transactions: heartbeats are not coalesced",
        writers.n
    );
}

fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}
