//! Helpers for the telemetry integration tests: a private Mosquitto on a
//! free loopback port, a worker process of the real binary with its own
//! metrics listener, a tiny HTTP client for `/metrics` and `/readyz`, and a
//! reader for single samples of the Prometheus exposition.
#![allow(dead_code)]

use std::{
    fs,
    io::Write,
    net::TcpStream,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

pub mod certs;
#[path = "../../../tests/common/mod.rs"]
pub mod common;

/// A monitor with one reading and a small detector (20 training, 20
/// calibration frames), so phases change after a few dozen observations.
pub fn monitor_toml(name: &str, topic: &str) -> String {
    format!(
        r#"
name = "{name}"
[[readings]]
name = "a"
topic = "{topic}"
[alignment]
freshness_ms = 5000
max_age_ms = 60000
future_tolerance_ms = 2000
max_skew_ms = 0
[detector]
training_frames = 20
calibration_frames = 20
false_alarm_rate = 0.05
"#
    )
}

/// A free TCP port on 127.0.0.1 (released at once; the caller binds it).
pub use common::free_port;

/// Polls `probe` every 100 ms until it returns `Some`, or panics after
/// `within` with `what` and the last value seen by `describe`.
pub fn wait_for<T>(within: Duration, what: &str, mut probe: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = probe() {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {within:?}: {what}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A Mosquitto process private to one test.
pub struct Broker {
    pub port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
}

impl Broker {
    pub fn start() -> Self {
        Self::start_with("allow_anonymous true\n")
    }

    /// Starts Mosquitto with `listener_options` (e.g. a password file or a
    /// TLS certificate) written right after its `listener` line. Files it
    /// names must be readable by the `mosquitto` user it drops to.
    pub fn start_with(listener_options: &str) -> Self {
        let dir = tempfile::tempdir().expect("broker dir");
        let port = free_port();
        fs::write(
            dir.path().join("mosquitto.conf"),
            format!(
                "listener {port} 127.0.0.1\n{listener_options}\nmax_queued_messages 10000\n\
                 log_dest stderr\n"
            ),
        )
        .expect("broker config");
        let mut broker = Self {
            port,
            dir,
            child: None,
        };
        broker.spawn();
        broker
    }

    fn spawn(&mut self) {
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("mosquitto.log"))
            .expect("broker log");
        let child = Command::new("mosquitto")
            .arg("-c")
            .arg(self.dir.path().join("mosquitto.conf"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start mosquitto (is it installed?)");
        self.child = Some(child);
        let port = self.port;
        wait_for(
            Duration::from_secs(10),
            "mosquitto accepts connections",
            || TcpStream::connect(("127.0.0.1", port)).ok(),
        );
    }

    /// SIGKILL: the worker sees the connection drop without a goodbye.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().expect("kill mosquitto");
            child.wait().expect("reap mosquitto");
        }
    }

    /// Starts the broker again on the same port.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    pub fn url(&self) -> String {
        format!("mqtt://127.0.0.1:{}", self.port)
    }

    /// The broker's log, for failure messages.
    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.path().join("mosquitto.log")).unwrap_or_default()
    }

    /// Publishes one QoS 1 message and waits for `mosquitto_pub` to finish.
    pub fn publish(&self, topic: &str, payload: &str) {
        let out = Command::new("mosquitto_pub")
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(["-q", "1", "-t", topic, "-m", payload])
            .output()
            .expect("run mosquitto_pub (package mosquitto-clients)");
        assert!(
            out.status.success(),
            "mosquitto_pub failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A `radar` command against a test database, with no stray settings from
/// the environment of whoever runs the tests.
pub fn radar(db: &common::TestDb) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_radar"));
    command
        .env("DATABASE_URL", &db.url)
        .env("RADAR_CONFIG_FILE", "/dev/null")
        .env_remove("RADAR_ENV")
        .env_remove("RADAR_CHECKPOINT_SECRET")
        .env_remove("RADAR_LOG_FORMAT")
        .env_remove("RUST_LOG");
    command
}

/// Creates a monitor through the binary and returns its id.
pub fn create_monitor(db: &common::TestDb, dir: &Path, name: &str, topic: &str) -> String {
    create_monitor_from(db, dir, name, &monitor_toml(name, topic))
}

/// `radar monitor create` of the monitor file `toml`, written into `dir`
/// as `NAME.toml`; returns the new monitor's id.
pub fn create_monitor_from(db: &common::TestDb, dir: &Path, name: &str, toml: &str) -> String {
    let file = dir.join(format!("{name}.toml"));
    fs::write(&file, toml).expect("write monitor file");
    let out = radar(db)
        .args(["monitor", "create", "--config"])
        .arg(&file)
        .output()
        .expect("run radar monitor create");
    assert!(
        out.status.success(),
        "monitor create: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// A running `radar worker`; killed on drop, its stderr kept in a file.
pub struct Worker {
    pub child: Child,
    pub metrics_port: u16,
    pub log: PathBuf,
}

impl Worker {
    /// Starts a worker for `monitors` (every monitor of the database when
    /// empty) with the settings the tests share; `extra` adds or overrides
    /// environment variables.
    pub fn spawn(
        db: &common::TestDb,
        broker: &Broker,
        dir: &Path,
        monitors: &[&str],
        extra: &[(&str, &str)],
    ) -> Self {
        let metrics_port = free_port();
        let log = dir.join(format!("worker-{metrics_port}.log"));
        let stderr = fs::File::create(&log).expect("worker log");
        let mut command = radar(db);
        command.arg("worker");
        // The binary takes at most one `--monitor`.
        assert!(monitors.len() <= 1, "one monitor, or the whole shard");
        if let Some(id) = monitors.first() {
            command.args(["--monitor", id]);
        }
        command
            .env("RADAR_MQTT_URL", broker.url())
            .env("RADAR_METRICS_ADDR", format!("127.0.0.1:{metrics_port}"))
            .env("RADAR_WORKER_ID", format!("telemetry-test-{metrics_port}"))
            .env("RADAR_TEST_MQTT_BACKOFF_MS", "100,1000")
            .stdout(Stdio::null())
            .stderr(stderr);
        for (k, v) in extra {
            command.env(k, v);
        }
        if extra.contains(&("RADAR_ENV", "production")) {
            // Production refuses the test reconnect schedule.
            command.env_remove("RADAR_TEST_MQTT_BACKOFF_MS");
        }
        let child = command.spawn().expect("spawn radar worker");
        let mut worker = Self {
            child,
            metrics_port,
            log,
        };
        let port = worker.metrics_port;
        let log = worker.log.clone();
        let child = &mut worker.child;
        wait_for(
            Duration::from_secs(30),
            "the worker serves /healthz",
            || {
                if let Ok(Some(status)) = child.try_wait() {
                    panic!(
                        "worker exited early with {status}: {}",
                        fs::read_to_string(&log).unwrap_or_default()
                    );
                }
                http_get(port, "/healthz").filter(|(code, _)| *code == 200)
            },
        );
        worker
    }

    pub fn get(&self, path: &str) -> Option<(u16, String)> {
        http_get(self.metrics_port, path)
    }

    pub fn metrics(&self) -> String {
        self.get("/metrics")
            .filter(|(code, _)| *code == 200)
            .map(|(_, body)| body)
            .unwrap_or_default()
    }

    pub fn stderr(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGTERM and wait: the worker stops its monitors in order.
    pub fn terminate(mut self) -> std::process::ExitStatus {
        let ok = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("run kill")
            .success();
        assert!(ok, "could not signal the worker");
        let child = &mut self.child;
        wait_for(
            Duration::from_secs(30),
            "the worker exits after SIGTERM",
            || child.try_wait().expect("wait worker"),
        )
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[allow(unused_imports)]
pub use common::{http_get, sample};

/// Runs `promtool check metrics` on an exposition; panics with its output
/// (or with how to install it) when it does not pass.
pub fn promtool_check(exposition: &str) {
    let child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => panic!(
            "promtool is required to validate /metrics but could not run ({e}); \
             install the Debian package `prometheus` (scripts/test does)"
        ),
    };
    child
        .stdin
        .take()
        .unwrap()
        .write_all(exposition.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics rejected the exposition:\n{}{}\n--- exposition ---\n{exposition}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Milliseconds since the epoch, for fresh observation timestamps.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}
