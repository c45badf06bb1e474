//! Graph runs executed by `radar worker` (the real binary, with the
//! fault-injection node of test builds) against real PostgreSQL and
//! Mosquitto: checkpoints and restores bound to the revision's semantics,
//! fresh runs on re-activation, quarantine after an uncertain node failure
//! with the snapshot row left byte for byte, the failure record retried
//! while PostgreSQL is down or frozen, late admission of a failed
//! generation, and a failure while a run is stopping that leaves its
//! successor alone.

use std::time::Duration;

use diesel::sql_types::{Bytea, Jsonb, Uuid as SqlUuid};
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use radar_testkit::graph::{field, node_mut, small_graph, snapshot_row};
use radar_testkit::postgres::PrivatePostgres;
use radar_testkit::prelude::*;
use serde_json::Value;
use uuid::Uuid;

const START: Duration = Duration::from_secs(30);

/// Points a run's monitor at another revision of its graph, as a rebinding
/// of the run would (radar has no command for it: `activate` always starts
/// a new run). The stored fingerprint follows the new config.
async fn rebind(
    h: &Harness,
    conn: &mut AsyncPgConnection,
    service: Uuid,
    revision: i32,
    hash: &str,
) {
    let pool = radar::store::connect(&h.db.url, 1, db::STATEMENT_TIMEOUT)
        .await
        .expect("pool");
    let row = radar::store::Services::new(pool)
        .get(service)
        .await
        .expect("monitor row");
    let mut config: Value = row.config;
    config["graph"]["revision"] = revision.into();
    config["graph"]["semantics_hash"] = hash.into();
    let fingerprint = radar::config::MonitorConfig::from_json(config.clone())
        .expect("rebound config")
        .fingerprint();
    diesel::sql_query("UPDATE services SET config = $2, config_fingerprint = $3 WHERE id = $1")
        .bind::<SqlUuid, _>(service)
        .bind::<Jsonb, _>(config)
        .bind::<Bytea, _>(fingerprint.to_vec())
        .execute(conn)
        .await
        .expect("rebind the monitor");
}

fn run_status(inspection: &Value) -> &str {
    inspection["run"]["status"].as_str().unwrap_or("")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graph_run_restores_across_a_layout_only_revision_and_refuses_a_semantic_one() {
    let h = Harness::new("worker_graph_layout").await;
    let prefix = unique_prefix();
    let graph = small_graph("wg-layout", &prefix, None);
    let first = field(&h.publish_graph(&graph), "semantics hash");
    let ids = h.activate("wg-layout", 1);
    let monitor = ids.service.to_string();

    let mut worker = h.spawn_worker("w-layout-1", &[], &["--monitor", &monitor]);
    h.wait_status(ids.service, START, "the graph run runs", |s| {
        state(s) == "running"
    })
    .await;
    worker.wait_log("Admitted graph run", START).await;
    let mut publisher = Publisher::connect(h.broker.port).await;
    publisher.frames(&prefix, 30).await;
    publisher.flush(START).await;
    let mut conn = h.connect().await;
    wait_snapshot(
        &mut conn,
        ids.service,
        START,
        "30 frames checkpointed",
        |r| r.processed_count == 30,
    )
    .await;
    let inspection = h.inspect_run(ids.run);
    assert_eq!(run_status(&inspection), "running");
    let versions = inspection["last_snapshot"]["runtime_versions"]
        .as_str()
        .unwrap_or("");
    assert!(versions.contains(",graph="), "{versions}");
    let (view, code) = h.inspect(ids.service);
    assert_eq!(
        code,
        Some(0),
        "the graph run's snapshot is restorable: {view:#}"
    );
    worker.stop_cleanly(START).await;

    // A layout-only revision: same semantics hash, the snapshot restores
    // and the graph continues where it was (a fresh graph would still be
    // training after 15 more frames; the restored one monitors).
    let mut moved = graph.clone();
    node_mut(&mut moved, "detector")["layout"] =
        serde_json::json!({"x": 420.5, "y": 10, "label": "Pump state", "color": "#2b6cb0"});
    let out = h.publish_graph(&moved);
    assert!(out.contains("Layout-only change"), "{out}");
    assert_eq!(field(&out, "semantics hash"), first);
    rebind(&h, &mut conn, ids.service, 2, &first).await;
    let mut worker = h.spawn_worker("w-layout-2", &[], &["--monitor", &monitor]);
    h.wait_status(ids.service, START, "the run restored", |s| {
        state(s) == "running" && processed(s) == 30
    })
    .await;
    publisher.frames(&prefix, 15).await;
    publisher.flush(START).await;
    h.wait_status(ids.service, START, "45 frames, monitoring", |s| {
        processed(s) == 45 && s["phase"] == "monitoring"
    })
    .await;
    worker.stop_cleanly(START).await;
    wait_snapshot(&mut conn, ids.service, START, "45 frames", |r| {
        r.processed_count == 45
    })
    .await;
    let before = snapshot_row(&mut conn, ids.service).await;

    // A semantic revision: the run's snapshot is refused, naming the
    // semantics hashes, and stays exactly as it was.
    let mut edited = graph.clone();
    node_mut(&mut edited, "a_avg")["params"]["window"] = 4.into();
    let out = h.publish_graph(&edited);
    assert!(out.contains("Semantic change"), "{out}");
    let second = field(&out, "semantics hash");
    assert_ne!(second, first);
    rebind(&h, &mut conn, ids.service, 3, &second).await;
    let mut worker = h.spawn_worker("w-layout-3", &[], &["--monitor", &monitor]);
    let exit = worker.wait_exit(START).await;
    assert_eq!(exit.code(), Some(2), "startup failed: {}", worker.log());
    let status = h
        .wait_status(ids.service, START, "startup_failed", |s| {
            state(s) == "startup_failed"
        })
        .await;
    let error = status["last_error"].as_str().unwrap_or("");
    let named = format!(
        "executable semantics hash {} in the snapshot, {} now",
        &first[..12],
        &second[..12]
    );
    assert!(error.contains(&named), "{error}");
    let (view, code) = h.inspect(ids.service);
    assert_eq!(code, Some(2));
    assert_eq!(view["reason_code"], "graph_changed", "{view:#}");
    assert_eq!(snapshot_row(&mut conn, ids.service).await, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn re_activating_an_earlier_revision_starts_a_fresh_run_and_a_stopped_run_ends_stopped() {
    let h = Harness::new("worker_graph_again").await;
    let prefix = unique_prefix();
    let graph = small_graph("wg-again", &prefix, None);
    h.publish_graph(&graph);
    let first = h.activate("wg-again", 1);
    let mut worker = h.spawn_worker("w-again", &[], &[]);
    h.wait_status(first.service, START, "the first run runs", |s| {
        state(s) == "running"
    })
    .await;
    let mut publisher = Publisher::connect(h.broker.port).await;
    publisher.frames(&prefix, 30).await;
    publisher.flush(START).await;
    let mut conn = h.connect().await;
    wait_snapshot(&mut conn, first.service, START, "30 frames", |r| {
        r.processed_count == 30
    })
    .await;

    let mut edited = graph.clone();
    node_mut(&mut edited, "a_avg")["params"]["window"] = 5.into();
    h.publish_graph(&edited);
    let out = h.graph(&["stop", &first.run.to_string()]);
    assert!(out.contains("is stopping"), "{out}");
    let stopped = h
        .wait_run(first.run, START, "the worker stopped the run", |r| {
            run_status(r) == "stopped"
        })
        .await;
    assert_eq!(stopped["run"]["lifecycle_intent"], "stopped");
    worker.wait_log("Graph run stopped.", START).await;
    let kept = snapshot_row(&mut conn, first.service).await;
    assert!(!kept.is_empty());

    // Revision 1 again: a new run on a new monitor, calibrating afresh.
    let again = h.activate("wg-again", 1);
    assert_ne!(again.service, first.service);
    assert_ne!(again.run, first.run);
    let inspection = h.inspect_run(again.run);
    assert_eq!(inspection["run"]["generation"], 2);
    assert_eq!(inspection["run"]["revision"], 1);
    h.wait_status(again.service, START, "the new run runs from nothing", |s| {
        state(s) == "running" && processed(s) == 0
    })
    .await;
    let initial = wait_snapshot(
        &mut conn,
        again.service,
        START,
        "its first snapshot",
        |_| true,
    )
    .await;
    assert_eq!(initial.processed_count, 0, "a fresh run restores nothing");
    publisher.frames(&prefix, 10).await;
    publisher.flush(START).await;
    h.wait_status(again.service, START, "10 frames, still training", |s| {
        processed(s) == 10 && s["phase"] == "training"
    })
    .await;
    assert_eq!(
        snapshot_row(&mut conn, first.service).await,
        kept,
        "the earlier run's snapshot is never restored or touched"
    );
    worker.stop_cleanly(START).await;
    assert_eq!(run_status(&h.inspect_run(again.run)), "running");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uncertain_node_failure_quarantines_the_run_and_its_snapshot_stays_byte_for_byte() {
    let h = Harness::new("worker_graph_fail").await;
    let prefix = unique_prefix();
    h.publish_graph(&small_graph("wg-fail", &prefix, Some((30, "uncertain"))));
    let ids = h.activate("wg-fail", 1);
    let mut first = h.spawn_worker("w-fail-1", &[], &[]);
    h.wait_status(ids.service, START, "the run runs", |s| {
        state(s) == "running"
    })
    .await;
    let mut publisher = Publisher::connect(h.broker.port).await;
    publisher.frames(&prefix, 30).await;
    publisher.flush(START).await;
    let mut conn = h.connect().await;
    wait_snapshot(&mut conn, ids.service, START, "30 frames", |r| {
        r.processed_count == 30
    })
    .await;
    let before = snapshot_row(&mut conn, ids.service).await;

    // The fault node's 31st update fails after it moved its state.
    publisher.frames(&prefix, 1).await;
    publisher.flush(START).await;
    let inspection = h
        .wait_run(ids.run, START, "the failure is recorded", |r| {
            run_status(r) == "failed"
        })
        .await;
    let run = &inspection["run"];
    assert_eq!(run["failed_node"], "fault");
    assert_eq!(run["diagnostics"]["node_type"], "fail_after");
    assert_eq!(run["diagnostics"]["frames_applied"], 30);
    assert!(
        run["diagnostics"]["reason"]
            .as_str()
            .unwrap_or("")
            .contains("injected uncertain failure"),
        "{run:#}"
    );
    assert!(!run["finished_at"].is_null());
    let status = h
        .wait_status(ids.service, START, "quarantined", |s| {
            state(s) == "quarantined"
        })
        .await;
    let error = status["last_error"].as_str().unwrap_or("");
    assert!(
        error.contains("\"fault\"") && error.contains("the failure is recorded"),
        "{error}"
    );
    first.wait_log("Graph run quarantined", START).await;
    assert_eq!(snapshot_row(&mut conn, ids.service).await, before);

    // Input after the failure reaches no graph and no checkpoint.
    publisher.frames(&prefix, 5).await;
    publisher.flush(START).await;

    // A worker that starts now is refused the failed generation, and the
    // running worker never starts it again.
    let mut late = h.spawn_worker("w-fail-2", &[], &["--monitor", &ids.service.to_string()]);
    let exit = late.wait_exit(START).await;
    assert_eq!(exit.code(), Some(2), "{}", late.log());
    let log = late.log();
    assert!(
        log.contains("was not admitted")
            && log.contains("is failed; a finished generation never runs again"),
        "{log}"
    );
    let status = h.status_of(ids.service);
    assert_eq!(state(&status), "startup_failed", "{status:#}");
    assert!(
        status["last_error"]
            .as_str()
            .unwrap_or("")
            .contains("was not admitted"),
        "{status:#}"
    );
    assert_eq!(snapshot_row(&mut conn, ids.service).await, before);
    assert_eq!(first.log_count("Admitted graph run"), 1);

    // A graceful shutdown exports nothing for the quarantined monitor.
    first.stop_cleanly(START).await;
    wait_for_no_other_sessions(&mut conn, START).await;
    assert_eq!(snapshot_row(&mut conn, ids.service).await, before);
    assert_eq!(run_status(&h.inspect_run(ids.run)), "failed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quarantined_worker_retries_the_failure_record_until_postgresql_is_back() {
    let mut pg = PrivatePostgres::start().expect("a private PostgreSQL cluster");
    let h = Harness::on_server(&pg.url(), "worker_graph_pgdown").await;
    let prefix = unique_prefix();
    h.publish_graph(&small_graph("wg-pgdown", &prefix, Some((30, "uncertain"))));
    let ids = h.activate("wg-pgdown", 1);
    let mut worker = h.spawn_worker("w-pgdown", &[], &[]);
    h.wait_status(ids.service, START, "the run runs", |s| {
        state(s) == "running"
    })
    .await;
    let mut publisher = Publisher::connect(h.broker.port).await;
    publisher.frames(&prefix, 30).await;
    publisher.flush(START).await;
    let mut conn = h.connect().await;
    wait_snapshot(&mut conn, ids.service, START, "30 frames", |r| {
        r.processed_count == 30
    })
    .await;
    let before = snapshot_row(&mut conn, ids.service).await;
    drop(conn);

    pg.stop().expect("stop PostgreSQL");
    publisher.frames(&prefix, 1).await;
    publisher.flush(START).await;
    worker.wait_log("Graph run quarantined", START).await;
    wait_until(START, "two failed attempts of the failure record", || {
        worker.log_count("retrying while quarantined") >= 2
    })
    .await
    .unwrap_or_else(|e| panic!("{e}; log:\n{}", worker.log()));
    // While the database is away the worker's own telemetry says so.
    let (_, metrics) =
        radar_testkit::http::http_get(worker.metrics_port, "/metrics").expect("metrics");
    assert_eq!(
        radar_testkit::exposition::sample(
            &metrics,
            "radar_monitor_state",
            &[("state", "quarantined")]
        ),
        Some(1.0),
        "{metrics}"
    );
    let (code, _) = radar_testkit::http::http_get(worker.metrics_port, "/readyz").expect("readyz");
    assert_eq!(code, 503);
    assert!(worker.running(), "the quarantined worker keeps retrying");

    pg.restart().expect("start PostgreSQL again");
    let inspection = h
        .wait_run(
            ids.run,
            Duration::from_secs(90),
            "the failure commits",
            |r| run_status(r) == "failed",
        )
        .await;
    assert_eq!(inspection["run"]["failed_node"], "fault");
    worker
        .wait_log("The graph run's failure is recorded", START)
        .await;
    h.wait_status(ids.service, START, "quarantined", |s| {
        state(s) == "quarantined"
    })
    .await;
    let mut conn = h.connect().await;
    assert_eq!(snapshot_row(&mut conn, ids.service).await, before);
    worker.stop_cleanly(START).await;
    wait_for_no_other_sessions(&mut conn, START).await;
    assert_eq!(snapshot_row(&mut conn, ids.service).await, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quarantined_worker_retries_the_failure_record_while_postgresql_hangs_and_records_it_after()
 {
    let mut pg = PrivatePostgres::start().expect("a private PostgreSQL cluster");
    let h = Harness::on_server(&pg.url(), "worker_graph_pghung").await;
    let prefix = unique_prefix();
    h.publish_graph(&small_graph("wg-pghung", &prefix, Some((30, "uncertain"))));
    let ids = h.activate("wg-pghung", 1);
    // Each attempt of the failure record is bounded by this timeout.
    let mut worker = h.spawn_worker(
        "w-pghung",
        &[("RADAR_CHECKPOINT_TIMEOUT_SECONDS", "2")],
        &[],
    );
    h.wait_status(ids.service, START, "the run runs", |s| {
        state(s) == "running"
    })
    .await;
    let mut publisher = Publisher::connect(h.broker.port).await;
    publisher.frames(&prefix, 30).await;
    publisher.flush(START).await;
    let mut conn = h.connect().await;
    wait_snapshot(&mut conn, ids.service, START, "30 frames", |r| {
        r.processed_count == 30
    })
    .await;
    let before = snapshot_row(&mut conn, ids.service).await;
    drop(conn);

    // Frozen, not down: connections are accepted by the kernel and every
    // statement hangs without an answer.
    pg.pause().expect("freeze PostgreSQL");
    publisher.frames(&prefix, 1).await;
    publisher.flush(START).await;
    worker.wait_log("Graph run quarantined", START).await;
    wait_until(
        START,
        "two timed-out attempts of the failure record",
        || worker.log_count("retrying while quarantined") >= 2,
    )
    .await
    .unwrap_or_else(|e| panic!("{e}; log:\n{}", worker.log()));
    assert!(worker.running(), "the quarantined worker keeps retrying");

    pg.resume().expect("continue PostgreSQL");
    h.wait_run(
        ids.run,
        Duration::from_secs(90),
        "the failure commits",
        |r| run_status(r) == "failed",
    )
    .await;
    worker
        .wait_log("The graph run's failure is recorded", START)
        .await;
    let mut conn = h.connect().await;
    assert_eq!(snapshot_row(&mut conn, ids.service).await, before);
    worker.stop_cleanly(START).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_while_the_run_is_stopping_is_recorded_for_that_run_and_spares_its_successor() {
    let h = Harness::new("worker_graph_stopping").await;
    let prefix = unique_prefix();
    h.publish_graph(&small_graph(
        "wg-stopping",
        &prefix,
        Some((30, "uncertain")),
    ));
    let old = h.activate("wg-stopping", 1);
    // This worker does not look for retired monitors again, so the stop
    // below reaches the run's durable intent before the worker stops it.
    let _old_worker = h.spawn_worker(
        "w-stopping-old",
        &[("RADAR_TEST_SUPERVISOR_POLL_MS", "600000")],
        &["--monitor", &old.service.to_string()],
    );
    h.wait_status(old.service, START, "the old run runs", |s| {
        state(s) == "running"
    })
    .await;
    let mut publisher = Publisher::connect(h.broker.port).await;
    publisher.frames(&prefix, 30).await;
    publisher.flush(START).await;
    let mut conn = h.connect().await;
    wait_snapshot(&mut conn, old.service, START, "30 frames", |r| {
        r.processed_count == 30
    })
    .await;

    // The successor: same revision, a new run on a new monitor.
    let successor = h.activate("wg-stopping", 1);
    let new_worker = h.spawn_worker(
        "w-stopping-new",
        &[],
        &["--monitor", &successor.service.to_string()],
    );
    h.wait_status(successor.service, START, "the successor runs", |s| {
        state(s) == "running"
    })
    .await;
    let out = h.graph(&["stop", &old.run.to_string()]);
    assert!(out.contains("is stopping"), "{out}");
    let old_before = snapshot_row(&mut conn, old.service).await;

    // The old run's 31st frame fails while it is stopping; for the
    // successor it is the first.
    publisher.frames(&prefix, 1).await;
    publisher.flush(START).await;
    let failed = h
        .wait_run(old.run, START, "the old run's failure is recorded", |r| {
            run_status(r) == "failed"
        })
        .await;
    assert_eq!(failed["run"]["lifecycle_intent"], "stopping");
    assert_eq!(failed["run"]["failed_node"], "fault");
    assert_eq!(snapshot_row(&mut conn, old.service).await, old_before);

    publisher.frames(&prefix, 5).await;
    publisher.flush(START).await;
    wait_snapshot(
        &mut conn,
        successor.service,
        START,
        "the successor's 6 frames",
        |r| r.processed_count == 6,
    )
    .await;
    let next = h.inspect_run(successor.run);
    assert_eq!(run_status(&next), "running", "{next:#}");
    assert!(next["run"]["failed_node"].is_null(), "{next:#}");
    assert!(next["run"]["diagnostics"].is_null(), "{next:#}");
    assert_eq!(next["run"]["lifecycle_intent"], "running");

    // Stopping the successor ends it stopped, after its last snapshot.
    h.graph(&["stop", &successor.run.to_string()]);
    h.wait_run(successor.run, START, "the successor stopped", |r| {
        run_status(r) == "stopped"
    })
    .await;
    new_worker
        .wait_log("Committed the last snapshot.", START)
        .await;
    assert_eq!(run_status(&h.inspect_run(old.run)), "failed");
}
