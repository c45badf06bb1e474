//! Publishing test data: one message with its PUBACK awaited, and a
//! long-lived publisher of complete frames for the worker tests. (Tests
//! without a runtime use [`crate::broker::Mosquitto::publish`].)

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use anyhow::{Context, Result};
use chrono::Utc;
use rumqttc::{AsyncClient, Event, MqttOptions, Outgoing, Packet, QoS};
use tokio::time::timeout;
use uuid::Uuid;

use crate::poll;

/// How long the broker may take to acknowledge one message.
const PUBACK_DEADLINE: Duration = Duration::from_secs(10);

/// Publishes one QoS 1 message and waits for the broker's PUBACK.
pub async fn publish(port: u16, topic: &str, payload: &[u8], retain: bool) -> Result<()> {
    let mut options = MqttOptions::new(
        format!("test-pub-{}", Uuid::new_v4().simple()),
        "127.0.0.1",
        port,
    );
    options.set_max_packet_size(8 * 1024 * 1024, 8 * 1024 * 1024);
    let (client, mut eventloop) = AsyncClient::new(options, 4);
    client
        .publish(topic, QoS::AtLeastOnce, retain, payload.to_vec())
        .await?;
    let acked = timeout(PUBACK_DEADLINE, async {
        loop {
            match eventloop.poll().await? {
                Event::Incoming(Packet::PubAck(_)) => return anyhow::Ok(()),
                _ => continue,
            }
        }
    })
    .await;
    acked.context("no PUBACK in time")??;
    client.disconnect().await?;
    let _ = timeout(Duration::from_secs(2), async {
        while let Ok(event) = eventloop.poll().await {
            if event == Event::Outgoing(Outgoing::Disconnect) {
                break;
            }
        }
    })
    .await;
    Ok(())
}

/// A long-lived QoS 1 publisher that sends complete frames: one value per
/// reading, all at the same source time, source times strictly increasing.
pub struct Publisher {
    client: AsyncClient,
    acked: Arc<AtomicU64>,
    published: u64,
    last_ts_ms: i64,
    seq: u64,
    task: tokio::task::JoinHandle<()>,
    /// Added to every value: a large shift makes frames anomalous.
    pub shift: f64,
}

impl Publisher {
    pub async fn connect(port: u16) -> Self {
        let mut options = MqttOptions::new(
            format!("test-frames-{}", Uuid::new_v4().simple()),
            "127.0.0.1",
            port,
        );
        options.set_keep_alive(Duration::from_secs(30));
        options.set_inflight(200);
        let (client, mut eventloop) = AsyncClient::new(options, 1000);
        let acked = Arc::new(AtomicU64::new(0));
        let counter = Arc::clone(&acked);
        let task = tokio::spawn(async move {
            loop {
                match eventloop.poll().await {
                    Ok(Event::Incoming(Packet::PubAck(_))) => {
                        counter.fetch_add(1, Ordering::SeqCst);
                    }
                    Ok(_) => {}
                    Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                }
            }
        });
        Self {
            client,
            acked,
            published: 0,
            last_ts_ms: 0,
            seq: 0,
            task,
            shift: 0.0,
        }
    }

    /// A source time after every one sent so far, close to now.
    fn next_ts(&mut self) -> i64 {
        let now = Utc::now().timestamp_millis();
        self.last_ts_ms = now.max(self.last_ts_ms + 1);
        self.last_ts_ms
    }

    /// Noise around a level, deterministic per frame.
    fn value(&mut self, reading: usize) -> f64 {
        self.seq = self
            .seq
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407 + reading as u64);
        let unit = (self.seq >> 11) as f64 / (1u64 << 53) as f64;
        10.0 * (reading as f64 + 1.0) + unit + if reading == 0 { self.shift } else { 0.0 }
    }

    /// Publishes `n` complete frames to the monitor under `prefix`; returns
    /// the source times used.
    pub async fn frames(&mut self, prefix: &str, n: usize) -> Vec<i64> {
        let mut times = Vec::with_capacity(n);
        for _ in 0..n {
            let ts = self.next_ts();
            for (i, reading) in ["a", "b"].iter().enumerate() {
                let value = self.value(i);
                self.raw(&format!("{prefix}/{reading}"), ts, value, false)
                    .await;
            }
            times.push(ts);
        }
        times
    }

    /// One observation.
    pub async fn raw(&mut self, topic: &str, ts_ms: i64, value: f64, retain: bool) {
        let body = format!(r#"{{"ts": {ts_ms}, "value": {value}}}"#);
        self.client
            .publish(topic, QoS::AtLeastOnce, retain, body.into_bytes())
            .await
            .expect("queue a publish");
        self.published += 1;
    }

    /// Waits until the broker acknowledged everything published.
    pub async fn flush(&self, within: Duration) {
        let published = self.published;
        poll::within(within)
            .every(Duration::from_millis(10))
            .wait(
                &format!("the broker acknowledges all {published} publishes"),
                || {
                    let acked = self.acked.load(Ordering::SeqCst);
                    poll::check(acked >= published, || format!("{acked} acknowledged"))
                },
            )
            .await
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        self.task.abort();
    }
}
