//! Brokers for tests: a private Mosquitto on a free loopback port (killed,
//! paused and restarted by the test, with chosen listener options such as a
//! password file or TLS) and a scripted fake broker that refuses one
//! subscription. `radar-bench` starts its brokers with it too.

use std::{
    fs,
    net::{TcpListener as StdListener, TcpStream as StdStream},
    path::PathBuf,
    process::{Child, Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use anyhow::{Context, Result, bail};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    task::JoinHandle,
};

/// The listener options of a broker that lets anyone in.
const ANONYMOUS: &str = "allow_anonymous true";

/// How long a broker may take to accept connections after start.
const START_DEADLINE: Duration = Duration::from_secs(10);

/// A free TCP port on 127.0.0.1 (the OS picks it; we release it at once).
pub fn free_port() -> Result<u16> {
    let listener = StdListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}

/// Waits until something accepts TCP connections on the port.
pub async fn wait_for_port(port: u16) -> Result<()> {
    wait_for_port_blocking(port)
}

/// Blocks until something accepts TCP connections on the port.
pub fn wait_for_port_blocking(port: u16) -> Result<()> {
    crate::poll::within(START_DEADLINE)
        .every(Duration::from_millis(20))
        .try_blocking(&format!("something to listen on 127.0.0.1:{port}"), || {
            StdStream::connect(("127.0.0.1", port)).map(drop)
        })
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

    fn spawn(&mut self) -> Result<()> {
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
        wait_for_port_blocking(self.port)
            .with_context(|| format!("mosquitto did not start; its log:\n{}", self.log()))
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
        self.restart_blocking()
    }

    /// [`Mosquitto::restart`] without a runtime.
    pub fn restart_blocking(&mut self) -> Result<()> {
        self.kill()?;
        self.spawn()
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
        Self::launch(port, max_queued, false, ANONYMOUS)
    }

    /// Starts Mosquitto with persistence: retained messages survive a
    /// graceful restart ([`Mosquitto::restart_gracefully`]).
    pub async fn start_persistent() -> Result<Self> {
        Self::launch(free_port()?, 1000, true, ANONYMOUS)
    }

    /// Starts Mosquitto on a free port without a runtime, with
    /// `listener_options` (e.g. a password file or a TLS certificate)
    /// right after its `listener` line instead of `allow_anonymous true`.
    /// Files it names must be readable by the `mosquitto` user it drops to.
    pub fn start_with(listener_options: &str) -> Self {
        free_port()
            .and_then(|port| Self::launch(port, 10_000, false, listener_options))
            .unwrap_or_else(|e| panic!("starting a private mosquitto: {e:#}"))
    }

    /// [`Mosquitto::start_with`] for anonymous clients.
    pub fn start_anonymous() -> Self {
        Self::start_with(ANONYMOUS)
    }

    fn launch(
        port: u16,
        max_queued: u32,
        persistent: bool,
        listener_options: &str,
    ) -> Result<Self> {
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
            "listener {port} 127.0.0.1\n{listener_options}\n{persistence}\
             max_queued_messages {max_queued}\nmax_queued_bytes 0\nlog_dest stderr\n\
             log_type error\nlog_type warning\nlog_type notice\nlog_type subscribe\nlog_type unsubscribe\n"
        );
        fs::write(dir.join("mosquitto.conf"), config)?;
        let mut broker = Self {
            port,
            dir,
            child: None,
        };
        broker.spawn()?;
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
        self.spawn()
    }

    /// The broker's process id, to read its memory use.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Publishes one QoS 1 message with `mosquitto_pub` and waits for it to
    /// finish: for tests without a runtime (see `publisher` for the others).
    pub fn publish(&self, topic: &str, payload: &str) {
        let out = Command::new("mosquitto_pub")
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(["-q", "1", "-t", topic, "-m", payload])
            .output()
            .unwrap_or_else(|e| panic!("run mosquitto_pub (package mosquitto-clients): {e}"));
        assert!(
            out.status.success(),
            "mosquitto_pub to {topic} on port {} failed: {}",
            self.port,
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
