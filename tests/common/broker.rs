//! Brokers for MQTT integration tests: a private Mosquitto on a free
//! loopback port (killed and restarted by the test), a scripted fake broker
//! that refuses one subscription, and a small publisher.
//!
//! Include with `#[path = "common/broker.rs"] mod broker;`.
#![allow(dead_code)]

use std::{
    fs,
    net::TcpListener as StdListener,
    path::PathBuf,
    process::{Child, Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use anyhow::{Context, Result, bail};
use rumqttc::{AsyncClient, Event, MqttOptions, Outgoing, Packet, QoS};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    task::JoinHandle,
    time::{Instant, sleep, timeout},
};

/// How long a broker may take to accept connections after start.
const START_DEADLINE: Duration = Duration::from_secs(10);

/// A free TCP port on 127.0.0.1 (the OS picks it; we release it at once).
pub fn free_port() -> Result<u16> {
    let listener = StdListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}

/// Waits until something accepts TCP connections on the port.
pub async fn wait_for_port(port: u16) -> Result<()> {
    let deadline = Instant::now() + START_DEADLINE;
    loop {
        if TcpStream::connect(("127.0.0.1", port)).await.is_ok() {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("nothing listens on 127.0.0.1:{port} after {START_DEADLINE:?}");
        }
        sleep(Duration::from_millis(20)).await;
    }
}

/// A Mosquitto process private to one test, on its own loopback port.
pub struct Mosquitto {
    pub port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

impl Mosquitto {
    /// Starts Mosquitto on a free port. `max_queued` bounds the per-client
    /// queue (Mosquitto's default of 1000 silently drops for slow clients).
    pub async fn start(max_queued: u32) -> Result<Self> {
        Self::start_on(free_port()?, max_queued).await
    }

    async fn spawn(&mut self) -> Result<()> {
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("mosquitto.log"))?;
        let child = Command::new("mosquitto")
            .arg("-c")
            .arg(self.dir.join("mosquitto.conf"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .context("starting mosquitto (is it installed?)")?;
        self.child = Some(child);
        wait_for_port(self.port).await
    }

    /// Kills the broker (SIGKILL: no DISCONNECT, no goodbye) and reaps it.
    pub fn kill(&mut self) -> Result<()> {
        if let Some(mut child) = self.child.take() {
            child.kill()?;
            child.wait()?;
        }
        Ok(())
    }

    /// Starts the broker again on the same port.
    pub async fn restart(&mut self) -> Result<()> {
        self.kill()?;
        self.spawn().await
    }

    pub fn url(&self) -> String {
        format!("mqtt://127.0.0.1:{}", self.port)
    }

    /// The broker's log, for failure messages.
    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.join("mosquitto.log")).unwrap_or_default()
    }
}

impl Drop for Mosquitto {
    fn drop(&mut self) {
        let _ = self.kill();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// Publishes one QoS 1 message and waits for the broker's PUBACK.
pub async fn publish(port: u16, topic: &str, payload: &[u8], retain: bool) -> Result<()> {
    let mut options = MqttOptions::new(
        format!("test-pub-{}", uuid::Uuid::new_v4().simple()),
        "127.0.0.1",
        port,
    );
    options.set_max_packet_size(8 * 1024 * 1024, 8 * 1024 * 1024);
    let (client, mut eventloop) = AsyncClient::new(options, 4);
    client
        .publish(topic, QoS::AtLeastOnce, retain, payload.to_vec())
        .await?;
    let acked = timeout(START_DEADLINE, async {
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

/// A scripted MQTT 3.1.1 broker: accepts every CONNECT, answers SUBSCRIBE
/// with 0x80 for one chosen topic and success for the others, answers
/// PINGREQ and UNSUBSCRIBE. Enough to see how a client handles a refusal.
pub struct FakeBroker {
    pub port: u16,
    /// CONNECTs accepted so far.
    pub connections: Arc<AtomicUsize>,
    /// SUBSCRIBEs refused so far.
    pub refusals: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl FakeBroker {
    pub async fn start(refused_topic: &str) -> Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let connections = Arc::new(AtomicUsize::new(0));
        let refusals = Arc::new(AtomicUsize::new(0));
        let (c, r, refused) = (
            Arc::clone(&connections),
            Arc::clone(&refusals),
            refused_topic.to_string(),
        );
        let task = tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                let (c, r, refused) = (Arc::clone(&c), Arc::clone(&r), refused.clone());
                tokio::spawn(async move {
                    let _ = serve(socket, &refused, &c, &r).await;
                });
            }
        });
        Ok(Self {
            port,
            connections,
            refusals,
            task,
        })
    }

    pub fn url(&self) -> String {
        format!("mqtt://127.0.0.1:{}", self.port)
    }
}

impl Drop for FakeBroker {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(
    mut socket: TcpStream,
    refused: &str,
    connections: &AtomicUsize,
    refusals: &AtomicUsize,
) -> Result<()> {
    loop {
        let header = socket.read_u8().await?;
        let len = read_remaining_length(&mut socket).await?;
        let mut body = vec![0u8; len];
        socket.read_exact(&mut body).await?;
        match header >> 4 {
            1 => {
                connections.fetch_add(1, Ordering::SeqCst);
                socket.write_all(&[0x20, 0x02, 0x00, 0x00]).await?;
            }
            8 => {
                let pkid = [body[0], body[1]];
                let mut codes = Vec::new();
                let mut at = 2;
                while at + 2 <= body.len() {
                    let n = usize::from(u16::from_be_bytes([body[at], body[at + 1]]));
                    let topic = std::str::from_utf8(&body[at + 2..at + 2 + n])?;
                    if topic == refused {
                        refusals.fetch_add(1, Ordering::SeqCst);
                        codes.push(0x80);
                    } else {
                        codes.push(0x01);
                    }
                    at += 2 + n + 1;
                }
                let mut suback = vec![0x90, u8::try_from(2 + codes.len())?, pkid[0], pkid[1]];
                suback.extend(codes);
                socket.write_all(&suback).await?;
            }
            10 => socket.write_all(&[0xB0, 0x02, body[0], body[1]]).await?,
            12 => socket.write_all(&[0xD0, 0x00]).await?,
            14 => return Ok(()),
            _ => {}
        }
    }
}

async fn read_remaining_length(socket: &mut TcpStream) -> Result<usize> {
    let mut value = 0usize;
    for shift in [0, 7, 14, 21] {
        let byte = socket.read_u8().await?;
        value |= usize::from(byte & 0x7F) << shift;
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    bail!("malformed remaining length")
}

impl Mosquitto {
    /// Starts Mosquitto on a chosen port (e.g. one a client already retries).
    pub async fn start_on(port: u16, max_queued: u32) -> Result<Self> {
        Self::start_with(port, max_queued, false).await
    }

    /// Starts Mosquitto with persistence: retained messages survive a
    /// graceful restart ([`Mosquitto::restart_gracefully`]).
    pub async fn start_persistent() -> Result<Self> {
        Self::start_with(free_port()?, 1000, true).await
    }

    async fn start_with(port: u16, max_queued: u32, persistent: bool) -> Result<Self> {
        let dir =
            std::env::temp_dir().join(format!("radar-mosquitto-{}-{port}", std::process::id()));
        fs::create_dir_all(&dir)?;
        if persistent {
            // Started as root, Mosquitto drops to its own user, which must be
            // able to write the persistence file here.
            use std::os::unix::fs::PermissionsExt;
            fs::set_permissions(&dir, fs::Permissions::from_mode(0o777))?;
        }
        let persistence = if persistent {
            format!(
                "persistence true\npersistence_location {}/\n",
                dir.display()
            )
        } else {
            "persistence false\n".to_string()
        };
        let config = format!(
            "listener {port} 127.0.0.1\nallow_anonymous true\n{persistence}\
             max_queued_messages {max_queued}\nmax_queued_bytes 0\nlog_dest stderr\n\
             log_type error\nlog_type warning\nlog_type notice\nlog_type subscribe\nlog_type unsubscribe\n"
        );
        fs::write(dir.join("mosquitto.conf"), config)?;
        let mut broker = Self {
            port,
            dir,
            child: None,
        };
        broker.spawn().await?;
        Ok(broker)
    }

    /// Stops the broker with SIGTERM (it saves its persistence file and
    /// closes connections) and starts it again on the same port.
    pub async fn restart_gracefully(&mut self) -> Result<()> {
        if let Some(mut child) = self.child.take() {
            let status = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status()?;
            if !status.success() {
                bail!("kill -TERM failed: {status}");
            }
            child.wait()?;
        }
        self.spawn().await
    }

    /// The broker's process id, to read its memory use.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }
}

/// Ingestion options for tests: shrunk backoff, short handshake timeout.
pub fn test_options(url: &str) -> radar::mqtt::IngestOptions {
    let monitor = uuid::Uuid::new_v4();
    let mut options = radar::mqtt::IngestOptions::new(url, "test-worker", monitor)
        .unwrap_or_else(|e| panic!("test URL {url} rejected: {e}"));
    options.backoff = radar::mqtt::Backoff {
        initial: Duration::from_millis(50),
        max: Duration::from_millis(400),
    };
    options.handshake_timeout = Duration::from_secs(3);
    options
}

/// A topic prefix no other test (or run) uses.
pub fn unique_prefix() -> String {
    format!("radar-test/{}", uuid::Uuid::new_v4().simple())
}

/// The next connection event, or an error after `within`.
pub async fn next_event(
    events: &mut tokio::sync::mpsc::Receiver<radar::mqtt::ConnectionEvent>,
    within: Duration,
) -> Result<radar::mqtt::ConnectionEvent> {
    match timeout(within, events.recv()).await {
        Ok(Some(event)) => Ok(event),
        Ok(None) => bail!("the event channel closed"),
        Err(_) => bail!("no connection event within {within:?}"),
    }
}

/// Events until one matches, failing after `within`; returns all seen.
pub async fn events_until(
    events: &mut tokio::sync::mpsc::Receiver<radar::mqtt::ConnectionEvent>,
    within: Duration,
    done: impl Fn(&radar::mqtt::ConnectionEvent) -> bool,
) -> Result<Vec<radar::mqtt::ConnectionEvent>> {
    let deadline = Instant::now() + within;
    let mut seen = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let event = next_event(events, left)
            .await
            .with_context(|| format!("events so far: {seen:#?}"))?;
        let stop = done(&event);
        seen.push(event);
        if stop {
            return Ok(seen);
        }
    }
}

/// Polls a condition until it holds, failing after `within`.
pub async fn wait_until(
    within: Duration,
    what: &str,
    mut condition: impl FnMut() -> bool,
) -> Result<()> {
    let deadline = Instant::now() + within;
    while !condition() {
        if Instant::now() > deadline {
            bail!("timed out after {within:?} waiting until {what}");
        }
        sleep(Duration::from_millis(5)).await;
    }
    Ok(())
}

/// The next admitted message, or an error after `within`.
pub async fn next_message(
    messages: &mut tokio::sync::mpsc::Receiver<radar::mqtt::RawMessage>,
    within: Duration,
) -> Result<radar::mqtt::RawMessage> {
    match timeout(within, messages.recv()).await {
        Ok(Some(m)) => Ok(m),
        Ok(None) => bail!("the ingress queue closed"),
        Err(_) => bail!("no message within {within:?}"),
    }
}

/// Readings named after their topics; all required unless listed in `optional`.
pub fn readings(topics: &[String], optional: &[&str]) -> Vec<radar::config::ReadingConfig> {
    topics
        .iter()
        .map(|t| radar::config::ReadingConfig {
            name: t.rsplit('/').next().unwrap_or(t).to_string(),
            topic: t.clone(),
            required: !optional.contains(&t.as_str()),
        })
        .collect()
}
