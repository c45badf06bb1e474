//! Telemetry tells the truth: every metric radar declares
//! ([`Metric::ALL`]) is written by a running worker, with samples, once
//! the worker has done what the metric measures. A per-monitor series that
//! has nothing to say yet (no alarm so far, nothing queued) is left out of
//! a scrape by design (`src/telemetry/text.rs`), so the worker is taken
//! through a life that gives every metric something to say: frames scored
//! and flagged, an alarm opened and closed, a value held for a frame, input
//! queued behind a slow fit, a stale observation, a checkpoint the database
//! refuses, a restart restored from its snapshot, and a broker restart. A
//! scraper thread keeps the union of every sample name it saw; a declared
//! metric that no running worker writes fails here by name.

use std::{
    collections::BTreeSet,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    thread::JoinHandle,
    time::Duration,
};

use diesel_async::SimpleAsyncConnection;
use radar::telemetry::{Metric, names::Kind};
use radar_testkit::{
    broker::Mosquitto,
    db,
    exposition::{promtool_check, sample, samples},
    http::http_get,
    monitor::{WARMUP_FRAMES, two_readings},
    poll,
    telemetry::{create_monitor_from, now_ms, wait_for},
    worker::Worker,
};

/// Sample names a family writes: a histogram's `_bucket`, `_sum` and
/// `_count`, every other kind its own name.
fn sample_names(metric: Metric) -> Vec<String> {
    let family = metric.prometheus_name();
    match metric.kind() {
        Kind::Histogram => ["_bucket", "_sum", "_count"]
            .iter()
            .map(|s| format!("{family}{s}"))
            .collect(),
        Kind::Counter | Kind::Gauge => vec![family],
    }
}

/// The declared metrics none of whose sample names is in `seen`.
fn missing(seen: &BTreeSet<String>) -> Vec<String> {
    Metric::ALL
        .iter()
        .filter(|m| !sample_names(**m).iter().all(|name| seen.contains(name)))
        .map(|m| m.prometheus_name())
        .collect()
}

fn names_in(text: &str) -> BTreeSet<String> {
    samples(text).into_iter().map(|s| s.name).collect()
}

/// Scrapes one metrics port every 20 ms and keeps every sample name seen,
/// so a gauge that is non-zero only for a moment (a queue, a held value)
/// is caught.
struct Scraper {
    port: u16,
    seen: Arc<Mutex<BTreeSet<String>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Scraper {
    fn start(port: u16, seen: Arc<Mutex<BTreeSet<String>>>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let thread = std::thread::spawn({
            let (seen, stop) = (seen.clone(), stop.clone());
            move || {
                while !stop.load(Ordering::Relaxed) {
                    if let Some((200, text)) = http_get(port, "/metrics") {
                        seen.lock().expect("seen lock").extend(names_in(&text));
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        });
        Self {
            port,
            seen,
            stop,
            thread: Some(thread),
        }
    }

    /// Stops the thread, then scrapes once more: what the test's last wait
    /// saw in its own scrape is in the union even when the thread's last
    /// round came just before it.
    fn finish(mut self) {
        self.stop_thread();
        let (status, text) = http_get(self.port, "/metrics").expect("the final scrape");
        assert_eq!(status, 200, "the final scrape: {text}");
        self.seen.lock().expect("seen lock").extend(names_in(&text));
    }

    fn stop_thread(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }

    fn missing(&self) -> Vec<String> {
        missing(&self.seen.lock().expect("seen lock"))
    }
}

impl Drop for Scraper {
    fn drop(&mut self) {
        self.stop_thread();
    }
}

/// Publishes one frame: both readings at `ts` with `value`.
fn frame(broker: &Mosquitto, prefix: &str, ts: i64, value: f64) {
    for reading in ["a", "b"] {
        let payload = format!(r#"{{"ts": {ts}, "value": {value}}}"#);
        broker.publish(&format!("{prefix}/{reading}"), &payload);
    }
}

fn count(worker: &Worker, me: &[(&str, &str)], name: &str) -> f64 {
    sample(&worker.metrics(), name, me).unwrap_or(0.0)
}

const REFUSE_CHECKPOINTS: &str = "
    CREATE FUNCTION test_refuse_checkpoint() RETURNS trigger AS $$
    BEGIN RAISE EXCEPTION 'test: checkpoint refused'; END $$ LANGUAGE plpgsql;
    CREATE TRIGGER test_refuse BEFORE UPDATE ON radar_runtime_checkpoints
    FOR EACH ROW EXECUTE FUNCTION test_refuse_checkpoint();";

const ACCEPT_CHECKPOINTS: &str = "
    DROP TRIGGER test_refuse ON radar_runtime_checkpoints;
    DROP FUNCTION test_refuse_checkpoint();";

#[tokio::test]
async fn every_declared_metric_is_written_by_a_running_worker() {
    let db = db::migrated_database("telemetry_declared").await;
    let dir = tempfile::tempdir().unwrap();
    let prefix = db::unique_name("declared");
    let id = create_monitor_from(
        &db,
        dir.path(),
        "declared",
        &two_readings("declared", &prefix),
    );
    let mut broker = Mosquitto::start_anonymous();
    let me = [("monitor_id", id.as_str())];
    let seen = Arc::new(Mutex::new(BTreeSet::new()));
    let mut ts = now_ms();
    let mut next = || {
        ts += 1;
        ts
    };

    // First life. The fit waits 2 s, so the frames published meanwhile
    // queue in front of the model.
    let worker = Worker::spawn(
        &db,
        &broker,
        dir.path(),
        &[&id],
        &[("RADAR_TEST_FIT_DELAY_MS", "2000")],
    );
    let scraper = Scraper::start(worker.metrics_port, seen.clone());
    worker.wait_connected(&id);
    for i in 0..WARMUP_FRAMES + 10 {
        frame(&broker, &prefix, next(), (i % 5) as f64 + 0.5);
    }
    // Anomalous frames open an alarm (3 of 5), normal ones close it (10).
    for _ in 0..6 {
        frame(&broker, &prefix, next(), 1000.0);
    }
    for i in 0..14 {
        frame(&broker, &prefix, next(), (i % 5) as f64 + 0.5);
    }
    wait_for(
        Duration::from_secs(30),
        "the alarm opened and closed",
        || (count(&worker, &me, "radar_alarms_closed_total") >= 1.0).then_some(()),
    );
    // One reading of a frame: its value is held until the other comes.
    broker.publish(
        &format!("{prefix}/a"),
        &format!(r#"{{"ts": {}, "value": 1.5}}"#, next()),
    );
    // A re-publish at the watermark is stale.
    let stale = next() - 100;
    broker.publish(
        &format!("{prefix}/b"),
        &format!(r#"{{"ts": {stale}, "value": 1.5}}"#),
    );
    wait_for(Duration::from_secs(30), "a stale rejection", || {
        (count(&worker, &me, "radar_recovery_stale_rejected_total") >= 1.0).then_some(())
    });
    scraper.finish();
    worker.terminate();

    // Second life: restored from the snapshot (the downtime is a gap), a
    // checkpoint the database refuses, and a broker restart.
    let worker = Worker::spawn(
        &db,
        &broker,
        dir.path(),
        &[&id],
        &[("RADAR_CHECKPOINT_INTERVAL", "5")],
    );
    let scraper = Scraper::start(worker.metrics_port, seen.clone());
    worker.wait_connected(&id);
    let mut conn = db::connect(&db).await;
    conn.batch_execute(REFUSE_CHECKPOINTS)
        .await
        .expect("install the refusing trigger");
    for i in 0..10 {
        frame(&broker, &prefix, next(), (i % 5) as f64 + 0.5);
    }
    wait_for(Duration::from_secs(30), "a refused checkpoint", || {
        (count(&worker, &me, "radar_checkpoint_failures_total") >= 1.0).then_some(())
    });
    conn.batch_execute(ACCEPT_CHECKPOINTS)
        .await
        .expect("drop the refusing trigger");
    broker.restart_blocking().expect("restart the broker");
    wait_for(Duration::from_secs(30), "a reconnect attempt", || {
        (count(&worker, &me, "radar_mqtt_reconnect_attempts_total") >= 1.0).then_some(())
    });
    worker.wait_connected(&id);

    poll::within(Duration::from_secs(30)).blocking(
        "every declared metric written at least once",
        || {
            let gone = scraper.missing();
            if gone.is_empty() { Ok(()) } else { Err(gone) }
        },
    );
    promtool_check(&worker.metrics());
}

/// The check above would pass vacuously if it looked for nothing: a scrape
/// without a family's samples is reported by its Prometheus name, and a
/// histogram needs its bucket, sum and count lines.
#[test]
fn a_family_without_samples_is_reported_missing() {
    let none = names_in("# TYPE radar_frames_emitted_total counter\n");
    let gone = missing(&none);
    assert!(gone.contains(&"radar_frames_emitted_total".to_string()));
    assert_eq!(gone.len(), Metric::ALL.len());
    let histogram = names_in("radar_frame_score_bucket{le=\"1\"} 1\nradar_frame_score_sum 1\n");
    assert!(missing(&histogram).contains(&"radar_frame_score".to_string()));
    let whole = names_in(
        "radar_frame_score_bucket{le=\"1\"} 1\nradar_frame_score_sum 1\nradar_frame_score_count 1\n",
    );
    assert!(!missing(&whole).contains(&"radar_frame_score".to_string()));
}
