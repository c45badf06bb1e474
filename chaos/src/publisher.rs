//! Drives sensor data: complete frames (one value per reading, one source
//! time, strictly increasing) for every monitor at a fixed rate, with short
//! anomalous bursts so monitors flag frames, open alarms and write evidence.
//! Records the source time of every frame it handed to the broker.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use chrono::Utc;
use rumqttc::{AsyncClient, Event, MqttOptions, Packet, QoS};
use tokio::task::JoinHandle;
use uuid::Uuid;

/// One monitor fed by the publisher.
#[derive(Debug, Clone)]
pub struct Feed {
    pub monitor: Uuid,
    /// Topic prefix: readings are `{prefix}/a` and `{prefix}/b`.
    pub prefix: String,
}

/// Every this often, each monitor gets an anomalous burst...
const BURST_EVERY_MS: i64 = 12_000;
/// ...lasting this long.
const BURST_MS: i64 = 1_500;
/// Added to reading `a` during a burst (values are about 10 and 20, noise 1).
const BURST_SHIFT: f64 = 30.0;

pub struct Publisher {
    stop: Arc<AtomicBool>,
    task: JoinHandle<()>,
    events: JoinHandle<()>,
    published: Arc<Mutex<BTreeMap<Uuid, BTreeSet<i64>>>>,
}

impl Publisher {
    pub fn start(port: u16, feeds: Vec<Feed>, frames_per_second: u32) -> Self {
        let mut options = MqttOptions::new(
            format!("radar-chaos-pub-{}", Uuid::new_v4().simple()),
            "127.0.0.1",
            port,
        );
        options.set_keep_alive(Duration::from_secs(5));
        options.set_inflight(200);
        let (client, mut eventloop) = AsyncClient::new(options, 4096);
        let connected = Arc::new(AtomicBool::new(false));
        let up = Arc::clone(&connected);
        let events = tokio::spawn(async move {
            loop {
                match eventloop.poll().await {
                    Ok(Event::Incoming(Packet::ConnAck(_))) => up.store(true, Ordering::SeqCst),
                    Ok(_) => {}
                    Err(_) => {
                        up.store(false, Ordering::SeqCst);
                        // rumqttc reconnects on the next poll at once.
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            }
        });
        let stop = Arc::new(AtomicBool::new(false));
        let published = Arc::new(Mutex::new(BTreeMap::new()));
        let task = tokio::spawn(drive(
            client,
            feeds,
            frames_per_second,
            connected,
            Arc::clone(&stop),
            Arc::clone(&published),
        ));
        Self {
            stop,
            task,
            events,
            published,
        }
    }

    /// Stops publishing; returns the source times (ms) of every frame sent.
    pub async fn stop(self) -> BTreeMap<Uuid, BTreeSet<i64>> {
        self.stop.store(true, Ordering::SeqCst);
        let _ = self.task.await;
        self.events.abort();
        let published = self
            .published
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        published.clone()
    }
}

async fn drive(
    client: AsyncClient,
    feeds: Vec<Feed>,
    frames_per_second: u32,
    connected: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    published: Arc<Mutex<BTreeMap<Uuid, BTreeSet<i64>>>>,
) {
    let period = Duration::from_millis(1000 / u64::from(frames_per_second.max(1)));
    let mut ticker = tokio::time::interval(period);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut last_ts = 0i64;
    let mut noise = 0x9e37_79b9_7f4a_7c15u64;
    while !stop.load(Ordering::SeqCst) {
        ticker.tick().await;
        // Frames queued while the broker is down would arrive late with old
        // source times; a sensor that cannot reach the broker drops them.
        if !connected.load(Ordering::SeqCst) {
            continue;
        }
        for (i, feed) in feeds.iter().enumerate() {
            let ts = Utc::now().timestamp_millis().max(last_ts + 1);
            last_ts = ts;
            let phase =
                (ts + i as i64 * BURST_EVERY_MS / feeds.len().max(1) as i64) % BURST_EVERY_MS;
            let shift = if phase < BURST_MS { BURST_SHIFT } else { 0.0 };
            let mut sent = true;
            for (r, reading) in ["a", "b"].iter().enumerate() {
                noise = noise
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                let unit = (noise >> 11) as f64 / (1u64 << 53) as f64;
                let value = 10.0 * (r as f64 + 1.0) + unit + if r == 0 { shift } else { 0.0 };
                let body = format!(r#"{{"ts": {ts}, "value": {value}}}"#);
                sent &= client
                    .try_publish(
                        format!("{}/{reading}", feed.prefix),
                        QoS::AtLeastOnce,
                        false,
                        body.into_bytes(),
                    )
                    .is_ok();
            }
            if sent {
                published
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner())
                    .entry(feed.monitor)
                    .or_default()
                    .insert(ts);
            }
        }
    }
}
