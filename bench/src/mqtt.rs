//! Both ends of the MQTT stream the ingest benchmark drives: a publisher
//! that sends complete frames as fast as the broker takes them, and the
//! bare rumqttc subscribers that only count what arrives (the ceiling).

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::{Result, bail};
use rumqttc::{AsyncClient, Event, MqttOptions, Outgoing, Packet, QoS};
use tokio::task::JoinHandle;
use uuid::Uuid;

use crate::{
    db::Monitor,
    workload::{self, Signal, SourceClock},
};

/// How long a connection or subscription handshake may take.
const HANDSHAKE: Duration = Duration::from_secs(60);

/// Counters shared with an event loop task.
#[derive(Debug, Default)]
struct Counts {
    /// PUBLISH packets written (QoS 0) or sent (QoS 1).
    written: AtomicU64,
    acked: AtomicU64,
    received: AtomicU64,
    subscribed: AtomicU64,
    connected: AtomicU64,
    disconnects_sent: AtomicU64,
    errors: AtomicU64,
}

/// Drives one client's event loop until the task is aborted, counting.
fn spawn_loop(mut eventloop: rumqttc::EventLoop, counts: Arc<Counts>) -> JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            match eventloop.poll().await {
                Ok(Event::Incoming(Packet::Publish(_))) => {
                    counts.received.fetch_add(1, Ordering::Relaxed);
                }
                Ok(Event::Incoming(Packet::PubAck(_))) => {
                    counts.acked.fetch_add(1, Ordering::Relaxed);
                }
                Ok(Event::Incoming(Packet::SubAck(_))) => {
                    counts.subscribed.fetch_add(1, Ordering::Relaxed);
                }
                Ok(Event::Incoming(Packet::ConnAck(_))) => {
                    counts.connected.fetch_add(1, Ordering::Relaxed);
                }
                Ok(Event::Outgoing(Outgoing::Publish(_))) => {
                    counts.written.fetch_add(1, Ordering::Relaxed);
                }
                Ok(Event::Outgoing(Outgoing::Disconnect)) => {
                    counts.disconnects_sent.fetch_add(1, Ordering::Relaxed);
                }
                Ok(_) => {}
                Err(_) => {
                    counts.errors.fetch_add(1, Ordering::Relaxed);
                    // rumqttc reconnects on the next poll at once; do not spin.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    })
}

/// Waits until `done` holds, failing with `what` after `within`.
async fn wait(within: Duration, what: &str, done: impl Fn() -> bool) -> Result<()> {
    let deadline = Instant::now() + within;
    while !done() {
        if Instant::now() > deadline {
            bail!("timed out after {within:?} waiting until {what}");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok(())
}

/// One publishing connection that sends complete frames.
pub struct Publisher {
    client: AsyncClient,
    counts: Arc<Counts>,
    qos: QoS,
    sent: u64,
    clock: SourceClock,
    signal: Signal,
    task: JoinHandle<()>,
}

impl Publisher {
    pub async fn connect(port: u16, qos: QoS) -> Result<Self> {
        let mut options = MqttOptions::new(
            format!("radar-bench-pub-{}", Uuid::new_v4().simple()),
            "127.0.0.1",
            port,
        );
        options.set_keep_alive(Duration::from_secs(60));
        options.set_inflight(1000);
        let (client, eventloop) = AsyncClient::new(options, 10_000);
        let counts = Arc::new(Counts::default());
        let task = spawn_loop(eventloop, counts.clone());
        let c = counts.clone();
        wait(HANDSHAKE, "the publisher connected", move || {
            c.connected.load(Ordering::Relaxed) > 0
        })
        .await?;
        Ok(Self {
            client,
            counts,
            qos,
            sent: 0,
            clock: SourceClock::default(),
            signal: Signal::new(42),
            task,
        })
    }

    /// Publishes `frames` complete frames to each monitor, round robin (one
    /// frame to every monitor, then the next), all readings of a frame at
    /// one source time. Returns once every message is queued in the client.
    pub async fn frames(
        &mut self,
        monitors: &[Monitor],
        readings: usize,
        frames: usize,
    ) -> Result<()> {
        let topics: Vec<Vec<String>> = monitors
            .iter()
            .map(|m| {
                (0..readings)
                    .map(|r| workload::topic(&m.prefix, r))
                    .collect()
            })
            .collect();
        for _ in 0..frames {
            for monitor_topics in &topics {
                let ts = self.clock.next_time();
                for (reading, topic) in monitor_topics.iter().enumerate() {
                    let body = workload::payload(ts, self.signal.value(reading));
                    self.client
                        .publish(topic.as_str(), self.qos, false, body.into_bytes())
                        .await?;
                    self.sent += 1;
                }
            }
        }
        Ok(())
    }

    /// Waits until the broker has every message (PUBACK at QoS 1, written to
    /// the socket at QoS 0).
    pub async fn flush(&self, within: Duration) -> Result<()> {
        let (counts, sent, qos) = (self.counts.clone(), self.sent, self.qos);
        wait(
            within,
            "the broker took every published message",
            move || {
                let done = match qos {
                    QoS::AtMostOnce => &counts.written,
                    _ => &counts.acked,
                };
                done.load(Ordering::Relaxed) >= sent
            },
        )
        .await
    }

    /// Connection errors seen so far (a reconnect may lose QoS 0 messages).
    pub fn errors(&self) -> u64 {
        self.counts.errors.load(Ordering::Relaxed)
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One bare rumqttc client per monitor, subscribed like the product's (clean
/// session, one subscription per reading, the same QoS), that counts each
/// PUBLISH and does nothing else.
pub struct BareSubscribers {
    clients: Vec<AsyncClient>,
    counts: Arc<Counts>,
    tasks: Vec<JoinHandle<()>>,
}

impl BareSubscribers {
    /// Connects and subscribes every client; returns once every SUBACK came.
    pub async fn start(port: u16, monitors: &[Monitor], readings: usize) -> Result<Self> {
        let counts = Arc::new(Counts::default());
        let run = Uuid::new_v4().simple().to_string();
        let mut clients = Vec::with_capacity(monitors.len());
        let mut tasks = Vec::with_capacity(monitors.len());
        for (i, monitor) in monitors.iter().enumerate() {
            let mut options = MqttOptions::new(
                format!("radar-bench-bare-{}-{i}", &run[..8]),
                "127.0.0.1",
                port,
            );
            options
                .set_keep_alive(Duration::from_secs(30))
                .set_clean_session(true)
                .set_max_packet_size(1024 * 1024, 1024 * 1024);
            let (client, eventloop) = AsyncClient::new(options, readings * 2 + 8);
            for r in 0..readings {
                client.try_subscribe(workload::topic(&monitor.prefix, r), QoS::AtLeastOnce)?;
            }
            tasks.push(spawn_loop(eventloop, counts.clone()));
            clients.push(client);
        }
        let (c, n) = (counts.clone(), monitors.len() as u64);
        wait(
            HANDSHAKE,
            "every bare subscriber is subscribed",
            move || c.subscribed.load(Ordering::Relaxed) >= n * readings as u64,
        )
        .await?;
        Ok(Self {
            clients,
            counts,
            tasks,
        })
    }

    /// Messages received so far, by all clients together.
    pub fn received(&self) -> u64 {
        self.counts.received.load(Ordering::Relaxed)
    }

    /// Disconnects every client and ends their event loops.
    pub async fn stop(self) {
        for client in &self.clients {
            let _ = client.try_disconnect();
        }
        // The broker ends the sessions either way once the sockets close;
        // a clean DISCONNECT just saves it noticing.
        let (c, n) = (self.counts.clone(), self.clients.len() as u64);
        let _ = wait(
            Duration::from_secs(5),
            "every DISCONNECT was sent",
            move || c.disconnects_sent.load(Ordering::Relaxed) >= n,
        )
        .await;
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// The bare subscribers in a process of their own (`radar-bench
/// bare-subscribe`), laid out like the worker: publisher, broker and
/// consumer are three processes, so the ceiling does not share a runtime
/// with the publisher.
pub struct BareProcess {
    child: tokio::process::Child,
    received: Arc<AtomicU64>,
    reader: JoinHandle<()>,
}

impl BareProcess {
    /// Starts `bench_bin bare-subscribe` for `monitors` and waits until
    /// every subscription is acknowledged.
    pub async fn start(
        bench_bin: &std::path::Path,
        port: u16,
        monitors: &[Monitor],
        readings: usize,
        scratch: &std::path::Path,
    ) -> Result<Self> {
        use tokio::io::AsyncBufReadExt;
        let prefixes = scratch.join(format!("bare-prefixes-{}", Uuid::new_v4().simple()));
        let list: Vec<&str> = monitors.iter().map(|m| m.prefix.as_str()).collect();
        std::fs::write(&prefixes, list.join("\n"))?;
        let mut child = tokio::process::Command::new(bench_bin)
            .arg("bare-subscribe")
            .args(["--port", &port.to_string()])
            .args(["--readings", &readings.to_string()])
            .arg("--prefixes")
            .arg(&prefixes)
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| anyhow::anyhow!("the bare subscriber has no stdout"))?;
        let received = Arc::new(AtomicU64::new(0));
        let ready = Arc::new(AtomicU64::new(0));
        let (r, ok) = (received.clone(), ready.clone());
        let reader = tokio::spawn(async move {
            let mut lines = tokio::io::BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if line == "ready" {
                    ok.store(1, Ordering::Relaxed);
                } else if let Some(n) = line.strip_prefix("count ").and_then(|n| n.parse().ok()) {
                    r.store(n, Ordering::Relaxed);
                }
            }
        });
        let deadline = Instant::now() + HANDSHAKE;
        while ready.load(Ordering::Relaxed) == 0 {
            if let Some(status) = child.try_wait()? {
                bail!("the bare subscriber exited with {status} before subscribing");
            }
            if Instant::now() > deadline {
                bail!("the bare subscriber did not subscribe within {HANDSHAKE:?}");
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let _ = std::fs::remove_file(&prefixes);
        Ok(Self {
            child,
            received,
            reader,
        })
    }

    /// Messages the subscribers counted, as last reported.
    pub fn received(&self) -> u64 {
        self.received.load(Ordering::Relaxed)
    }

    pub fn pid(&self) -> u32 {
        self.child.id().unwrap_or(0)
    }

    pub async fn stop(mut self) {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
        self.reader.abort();
    }
}

/// The child side of [`BareProcess`]: subscribes, says `ready`, then
/// reports its count every few milliseconds until its reader goes away.
pub async fn serve_bare(port: u16, prefixes: &[String], readings: usize) -> Result<()> {
    use std::io::Write;
    let monitors: Vec<Monitor> = prefixes
        .iter()
        .map(|prefix| Monitor {
            id: Uuid::nil(),
            prefix: prefix.clone(),
        })
        .collect();
    let subscribers = BareSubscribers::start(port, &monitors, readings).await?;
    let mut out = std::io::stdout();
    writeln!(out, "ready")?;
    out.flush()?;
    loop {
        tokio::time::sleep(Duration::from_millis(5)).await;
        if writeln!(out, "count {}", subscribers.received())
            .and_then(|()| out.flush())
            .is_err()
        {
            subscribers.stop().await;
            return Ok(());
        }
    }
}
