//! Scrapes a running worker: after a known stream of good and bad
//! observations, `/metrics` carries the exact counts, the connection and
//! phase gauges and the queue capacity, and `promtool` accepts it.

use std::time::Duration;

use radar_testkit::{
    broker::Mosquitto, db, exposition::promtool_check, exposition::sample,
    telemetry::create_monitor, telemetry::now_ms, telemetry::wait_for, worker::Worker,
};

const GOOD: usize = 25;
const CAPACITY: &str = "77";

#[tokio::test]
async fn a_scrape_after_known_observations_carries_exact_counts_and_passes_promtool() {
    let db = db::migrated_database("telemetry_scrape").await;
    let dir = tempfile::tempdir().unwrap();
    let topic = format!("{}/a", db::unique_name("scrape"));
    let id = create_monitor(&db, dir.path(), "scraped", &topic);
    let broker = Mosquitto::start_anonymous();
    let worker = Worker::spawn(
        &db,
        &broker,
        dir.path(),
        &[&id],
        &[("RADAR_INGRESS_QUEUE_CAPACITY", CAPACITY)],
    );
    let me = [("monitor_id", id.as_str())];

    // Publish only once the subscription is acknowledged.
    worker.wait_connected(&id);
    let received = publish_good_and_bad(&broker, &topic);
    let text = wait_for(
        Duration::from_secs(30),
        "every published message is counted as received and the frames are out",
        || {
            let text = worker.metrics();
            let got = sample(&text, "radar_observations_received_total", &me);
            let frames = sample(&text, "radar_frames_emitted_total", &me);
            (got == Some(received as f64) && frames == Some(GOOD as f64)).then_some(text)
        },
    );

    let scrape = Scrape {
        text: &text,
        me: &me,
    };
    scrape.counts_each_fate(received);
    scrape.shows_the_connection_phase_and_queue();
    scrape.names_the_monitor_and_no_payload();
    promtool_check(&text);
}

/// Publishes `GOOD` observations and one each of four named rejections;
/// returns how many messages were published.
fn publish_good_and_bad(broker: &Mosquitto, topic: &str) -> usize {
    let base = now_ms();
    for i in 0..GOOD {
        let payload = format!(r#"{{"ts": {}, "value": {}.25}}"#, base + i as i64, i % 7);
        broker.publish(topic, &payload);
    }
    broker.publish(topic, "this is not json");
    broker.publish(
        topic,
        &format!(r#"{{"ts": {}, "value": "NaN"}}"#, base + 1000),
    );
    // A re-publish of an observation already taken: at the watermark.
    broker.publish(topic, &format!(r#"{{"ts": {}, "value": 3.25}}"#, base + 5));
    // Larger than RADAR_MQTT_MAX_MESSAGE_BYTES (4096): refused on the network
    // side, before the model, and still counted by reason.
    broker.publish(topic, &"x".repeat(5000));
    GOOD + 4
}

/// One scrape of the worker, read for its one monitor.
struct Scrape<'a> {
    text: &'a str,
    me: &'a [(&'a str, &'a str)],
}

impl Scrape<'_> {
    /// The monitor's sample `name` with `extra` labels besides its id.
    fn value(&self, name: &str, extra: &[(&str, &str)]) -> Option<f64> {
        let mut labels = self.me.to_vec();
        labels.extend_from_slice(extra);
        sample(self.text, name, &labels)
    }

    /// Received = accepted + each named rejection; frames as published.
    fn counts_each_fate(&self, received: usize) {
        let text = self.text;
        assert_eq!(
            self.value("radar_observations_received_total", &[]),
            Some(received as f64),
            "{text}"
        );
        assert_eq!(
            self.value("radar_observations_accepted_total", &[]),
            Some(GOOD as f64),
            "{text}"
        );
        // The worker has this one monitor, so its breakdown by reason is the
        // monitor's.
        for reason in ["not_json", "value_not_a_number", "stale", "too_large"] {
            assert_eq!(
                sample(
                    text,
                    "radar_observations_rejected_by_reason_total",
                    &[("reason", reason)]
                ),
                Some(1.0),
                "one rejection for {reason}:\n{text}"
            );
        }
        let by_reason_total: f64 = text
            .lines()
            .filter(|l| l.starts_with("radar_observations_rejected_by_reason_total{"))
            .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
            .sum();
        assert_eq!(by_reason_total, 4.0, "no other rejection:\n{text}");
        assert_eq!(
            self.value("radar_observations_rejected_total", &[]),
            Some(4.0),
            "{text}"
        );
        assert_eq!(
            self.value("radar_frames_emitted_total", &[]),
            Some(GOOD as f64),
            "{text}"
        );
    }

    /// Connected, calibrating after 20 training frames, the worker's queue
    /// capacity, and at least one checkpoint committed.
    fn shows_the_connection_phase_and_queue(&self) {
        let text = self.text;
        assert_eq!(self.value("radar_mqtt_connected", &[]), Some(1.0), "{text}");
        // 20 training frames, then calibration.
        assert_eq!(
            self.value("radar_detector_phase", &[("phase", "calibrating")]),
            Some(1.0),
            "{text}"
        );
        assert_eq!(
            self.value("radar_detector_phase", &[("phase", "training")]),
            None,
            "{text}"
        );
        // The queue capacity is a worker setting: one line, no monitor label.
        assert_eq!(
            sample(text, "radar_ingress_queue_capacity", &[]),
            Some(CAPACITY.parse().unwrap()),
            "{text}"
        );
        assert_eq!(
            self.value("radar_monitor_state", &[("state", "connected")]),
            Some(1.0),
            "{text}"
        );
        assert!(
            self.value("radar_checkpoint_commits_total", &[])
                .is_some_and(|n| n >= 1.0),
            "at least one checkpoint committed:\n{text}"
        );
    }

    /// The monitor's name is on its info series; no payload value is a label.
    fn names_the_monitor_and_no_payload(&self) {
        let text = self.text;
        assert_eq!(
            self.value("radar_monitor_info", &[("monitor_name", "scraped")]),
            Some(1.0),
            "{text}"
        );
        assert!(!text.contains("not json"), "{text}");
    }
}

/// The startup commit (before subscribing) is a checkpoint commit like the
/// others and must be counted under its own trigger.
#[tokio::test]
async fn the_commit_before_subscribing_is_counted_under_its_trigger() {
    let db = db::migrated_database("telemetry_first_commit").await;
    let dir = tempfile::tempdir().unwrap();
    let topic = format!("{}/a", db::unique_name("first_commit"));
    let id = create_monitor(&db, dir.path(), "first-commit", &topic);
    let broker = Mosquitto::start_anonymous();
    let worker = Worker::spawn(&db, &broker, dir.path(), &[&id], &[]);
    // The monitor's total, and the worker's breakdown by trigger.
    let me = [("monitor_id", id.as_str())];
    let trigger = [("trigger", "before_subscribing")];
    wait_for(
        Duration::from_secs(30),
        "radar_checkpoint_commits_by_trigger_total{trigger=\"before_subscribing\"} >= 1",
        || {
            let text = worker.metrics();
            sample(&text, "radar_checkpoint_commits_total", &me).filter(|n| *n >= 1.0)?;
            sample(&text, "radar_checkpoint_commits_by_trigger_total", &trigger)
                .filter(|n| *n >= 1.0)
        },
    );
}

/// The phase gauge shows where a monitor starts (training for a new one),
/// not only once the phase first changes.
#[tokio::test]
async fn the_phase_gauge_shows_training_from_the_start() {
    let db = db::migrated_database("telemetry_first_phase").await;
    let dir = tempfile::tempdir().unwrap();
    let topic = format!("{}/a", db::unique_name("first_phase"));
    let id = create_monitor(&db, dir.path(), "first-phase", &topic);
    let broker = Mosquitto::start_anonymous();
    let worker = Worker::spawn(&db, &broker, dir.path(), &[&id], &[]);
    let labels = [("monitor_id", id.as_str()), ("phase", "training")];
    wait_for(
        Duration::from_secs(30),
        "radar_detector_phase{phase=\"training\"} 1 before any observation",
        || (sample(&worker.metrics(), "radar_detector_phase", &labels) == Some(1.0)).then_some(()),
    );
}
