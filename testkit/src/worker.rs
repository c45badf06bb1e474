//! The `radar` binary from a test: one command with no stray settings from
//! whoever runs the tests, and one worker-process builder. A worker keeps
//! its stderr in a file (read for failure messages) and is killed on drop.

use std::{
    fs,
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus, Stdio},
    time::Duration,
};

use uuid::Uuid;

use crate::{
    http::{free_port, http_get},
    poll,
};

/// How long a worker may take to serve `/healthz` or to exit after SIGTERM.
const START_DEADLINE: Duration = Duration::from_secs(30);

/// The `radar` binary the tests run: `CARGO_BIN_EXE_radar` when cargo sets
/// it, else the one cargo builds next to the test (or chaos) binary.
pub fn radar_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("CARGO_BIN_EXE_radar") {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().expect("the path of the running test binary");
    let dir = exe.parent().unwrap_or(Path::new("."));
    // Test binaries live in target/<profile>/deps, binaries one level up.
    [dir.join("../radar"), dir.join("radar")]
        .into_iter()
        .find(|candidate| candidate.is_file())
        .unwrap_or_else(|| {
            panic!(
                "no radar binary beside {}; build it with `cargo build -p radar-actors`",
                exe.display()
            )
        })
}

/// A `radar` command against the database at `database_url`, with no
/// configuration file and none of the caller's radar settings.
pub fn radar_command(database_url: &str) -> Command {
    radar_command_of(&radar_binary(), database_url)
}

/// [`radar_command`] with a chosen `radar` binary (the benchmarks run the
/// release build).
pub fn radar_command_of(binary: &Path, database_url: &str) -> Command {
    let mut command = Command::new(binary);
    command
        .env("DATABASE_URL", database_url)
        .env("RADAR_CONFIG_FILE", "/dev/null")
        .env_remove("RADAR_ENV")
        .env_remove("RADAR_CHECKPOINT_SECRET")
        .env_remove("RADAR_CHECKPOINT_SECRET_FILE")
        .env_remove("RADAR_LOG_FORMAT")
        .env_remove("RUST_LOG");
    command
}

/// A `radar worker` about to start, with its own metrics port and log file.
pub struct WorkerBuilder {
    command: Command,
    id: String,
    metrics_port: u16,
    log: PathBuf,
}

impl WorkerBuilder {
    /// `radar worker` against `database_url` and the broker at `mqtt_url`,
    /// its stderr kept in a file under `dir`, its id `test-worker-PORT`.
    pub fn new(database_url: &str, mqtt_url: &str, dir: &Path) -> Self {
        let metrics_port = free_port();
        let mut command = radar_command(database_url);
        command
            .arg("worker")
            .env("RADAR_MQTT_URL", mqtt_url)
            .env("RADAR_METRICS_ADDR", format!("127.0.0.1:{metrics_port}"));
        Self {
            command,
            id: format!("test-worker-{metrics_port}"),
            metrics_port,
            log: dir.join(format!(
                "worker-{metrics_port}-{}.log",
                Uuid::new_v4().simple()
            )),
        }
    }

    /// The port its `/metrics` will listen on.
    pub fn metrics_port(&self) -> u16 {
        self.metrics_port
    }

    /// Sets `RADAR_WORKER_ID`.
    pub fn id(mut self, id: &str) -> Self {
        self.id = id.to_string();
        self
    }

    pub fn args<S: AsRef<std::ffi::OsStr>>(mut self, args: impl IntoIterator<Item = S>) -> Self {
        self.command.args(args);
        self
    }

    /// Sets each variable, after (so over) the builder's own settings.
    pub fn envs(mut self, env: &[(&str, &str)]) -> Self {
        for (k, v) in env {
            self.command.env(k, v);
        }
        self
    }

    pub fn env_remove(mut self, key: &str) -> Self {
        self.command.env_remove(key);
        self
    }

    /// Starts the worker without waiting for it.
    pub fn spawn(mut self) -> Worker {
        let stderr = fs::File::create(&self.log)
            .unwrap_or_else(|e| panic!("creating worker log {}: {e}", self.log.display()));
        let child = self
            .command
            .env("RADAR_WORKER_ID", &self.id)
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|e| panic!("spawning radar worker {}: {e}", self.id));
        Worker {
            child: Some(child),
            log: self.log,
            id: self.id,
            metrics_port: self.metrics_port,
        }
    }

    /// Starts the worker and waits until it serves `/healthz`; panics with
    /// its log when it exits first.
    pub fn spawn_healthy(self) -> Worker {
        let mut worker = self.spawn();
        poll::within(START_DEADLINE).blocking("the worker serves /healthz", || {
            if let Some(status) = worker.exited() {
                panic!(
                    "worker {} exited early with {status}: {}",
                    worker.id,
                    worker.log()
                );
            }
            match worker.get("/healthz") {
                Some((200, _)) => Ok(()),
                other => Err(other),
            }
        });
        worker
    }
}

/// A running `radar worker`.
pub struct Worker {
    child: Option<Child>,
    pub log: PathBuf,
    pub id: String,
    /// Where its `/metrics`, `/readyz` and `/healthz` listen.
    pub metrics_port: u16,
}

impl Worker {
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(Child::id).expect("worker running")
    }

    /// SIGKILL: no last snapshot, no goodbye.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().expect("kill -9");
            child.wait().expect("reap");
        }
    }

    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([&format!("-{signal}"), &self.pid().to_string()])
            .status()
            .expect("run kill");
        assert!(
            status.success(),
            "kill -{signal} of worker {} failed",
            self.id
        );
    }

    /// The exit status once the process has ended (it is reaped then).
    fn exited(&mut self) -> Option<ExitStatus> {
        let status = self.child.as_mut()?.try_wait().expect("try_wait")?;
        self.child = None;
        Some(status)
    }

    /// Waits for the process to exit.
    pub async fn wait_exit(&mut self, within: Duration) -> ExitStatus {
        let what = format!("worker {} exits", self.id);
        poll::within(within)
            .every(Duration::from_millis(20))
            .wait(&what, || self.exited().ok_or_else(|| self.log()))
            .await
    }

    /// SIGTERM, then waits (at most `within`) for the exit, which must be
    /// clean (status 0); panics with the worker's log otherwise.
    pub async fn stop_cleanly(&mut self, within: Duration) {
        self.signal("TERM");
        let status = self.wait_exit(within).await;
        assert!(
            status.success(),
            "worker {} exited with {status} after SIGTERM: {}",
            self.id,
            self.log()
        );
    }

    /// SIGTERM, then waits (blocking) for the exit: the worker stops its
    /// monitors in order.
    pub fn terminate(mut self) -> ExitStatus {
        self.signal("TERM");
        let what = format!("worker {} exits after SIGTERM", self.id);
        poll::within(START_DEADLINE).blocking(&what, || self.exited().ok_or(()))
    }

    /// Whether the process is still running.
    pub fn running(&mut self) -> bool {
        self.child.is_some() && self.exited().is_none()
    }

    /// Its stderr so far.
    pub fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Its stderr so far (the telemetry tests' name for [`Worker::log`]).
    pub fn stderr(&self) -> String {
        self.log()
    }

    /// How often the log contains `text`.
    pub fn log_count(&self, text: &str) -> usize {
        self.log().matches(text).count()
    }

    /// Waits until the log contains `text`.
    pub async fn wait_log(&self, text: &str, within: Duration) {
        let what = format!("worker {} logs {text:?}", self.id);
        poll::within(within)
            .wait(&what, || {
                let log = self.log();
                poll::check(log.contains(text), || log)
            })
            .await
    }

    /// A GET on its metrics listener; `None` while nothing answers.
    pub fn get(&self, path: &str) -> Option<(u16, String)> {
        http_get(self.metrics_port, path)
    }

    /// Its `/metrics` exposition, empty while it does not answer 200.
    pub fn metrics(&self) -> String {
        self.get("/metrics")
            .filter(|(code, _)| *code == 200)
            .map(|(_, body)| body)
            .unwrap_or_default()
    }

    /// Resident set size from /proc, in KiB.
    pub fn rss_kib(&self) -> u64 {
        let status = fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
