//! `radar worker` against real PostgreSQL and Mosquitto: five readings at
//! 100 frames/s, one publisher per topic with its own jitter, so readings of
//! consecutive ticks interleave across topics. Every frame still forms
//! (values that share a source time belong together), none is superseded.

use std::time::Duration;

use radar_testkit::prelude::*;
use tokio::time::{Instant, sleep_until};

const READINGS: [&str; 5] = ["a", "b", "c", "d", "e"];
const FRAMES: i64 = 200;
const TICK_MS: i64 = 10;
const START: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_interleaving_publishers_at_100_frames_per_second_form_every_frame() {
    let h = Harness::new("worker_interleave").await;
    let (id, prefix) = h.create_monitor_edited("interleave", |file, prefix| {
        file.readings_under(prefix, &READINGS[2..]).max_skew_ms(0)
    });
    let _worker = h.spawn_worker("w-interleave", &[], &[]);
    h.wait_status(id, START, "the monitor runs", |s| state(s) == "running")
        .await;

    let mut publishers = Vec::new();
    for _ in READINGS {
        publishers.push(Publisher::connect(h.broker.port).await);
    }
    let base_ts = chrono::Utc::now().timestamp_millis();
    let start = Instant::now() + Duration::from_millis(200);
    let mut tasks = Vec::new();
    for (i, (reading, mut publisher)) in READINGS.iter().zip(publishers).enumerate() {
        let topic = format!("{prefix}/{reading}");
        tasks.push(tokio::spawn(async move {
            for k in 0..FRAMES {
                // Each topic's own delay (0 to 16 ms, changing per tick)
                // puts tick k+1 of one topic before tick k of another.
                let jitter = ((k as u64 * 7 + i as u64 * 5) % 17) as i64;
                let due = start + Duration::from_millis((k * TICK_MS + jitter) as u64);
                sleep_until(due).await;
                let value = 10.0 * (i as f64 + 1.0) + ((k * 31 + i as i64) % 13) as f64 / 13.0;
                publisher
                    .raw(&topic, base_ts + k * TICK_MS, value, false)
                    .await;
            }
            publisher.flush(START).await;
        }));
    }
    for task in tasks {
        task.await.expect("publisher task");
    }
    h.wait_status(id, START, "all 200 frames are processed", |s| {
        processed(s) == FRAMES as u64
    })
    .await;

    let mut conn = h.connect().await;
    wait_snapshot(&mut conn, id, START, "a snapshot with every frame", |r| {
        r.processed_count == FRAMES
    })
    .await;
    let (inspection, code) = h.inspect(id);
    assert_eq!(code, Some(0), "{inspection:#}");
    let rejected = counts(&inspection["counters"]["observations_rejected"]);
    assert_eq!(
        rejected.values().sum::<u64>(),
        0,
        "no value lost, superseded or skewed: {inspection:#}"
    );
    assert_eq!(
        inspection["fates"]["received"],
        FRAMES * 5,
        "{inspection:#}"
    );
    assert_eq!(
        inspection["fates"]["accepted"],
        FRAMES * 5,
        "{inspection:#}"
    );
    assert_eq!(inspection["fates"]["unaccounted"], 0, "{inspection:#}");
}
