//! Real `radar worker` processes: spawned with their settings in the
//! environment and a JSON log each, killed with SIGKILL or stopped with
//! SIGTERM, and reaped.

use std::{
    fs,
    os::unix::process::ExitStatusExt,
    path::PathBuf,
    process::{Child, Command, ExitStatus, Stdio},
};

use anyhow::{Context, Result};
use radar_testkit::{broker::free_port, poll, worker::radar_command_of};

/// The workers' MQTT reconnect schedule: first and longest wait.
pub const MQTT_BACKOFF: (std::time::Duration, std::time::Duration) = (
    std::time::Duration::from_millis(200),
    std::time::Duration::from_secs(2),
);

/// What every worker of a run shares.
#[derive(Debug, Clone)]
pub struct WorkerEnv {
    pub radar: PathBuf,
    pub dir: PathBuf,
    pub mqtt_url: String,
    /// The database URL without `application_name`, which names the worker.
    pub database: String,
    pub pg_port: u16,
    pub shards: u32,
    pub checkpoint_timeout_secs: u64,
}

impl WorkerEnv {
    fn database_url(&self, application: &str) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{}/{}?application_name={application}",
            self.pg_port, self.database
        )
    }

    /// A `radar` command with the run's settings (for the CLI too).
    pub fn command(&self, application: &str) -> Command {
        let mut cmd = radar_command_of(&self.radar, &self.database_url(application));
        cmd.current_dir(&self.dir)
            .env("RADAR_MQTT_URL", &self.mqtt_url)
            .env("RADAR_LOG_FORMAT", "json");
        cmd
    }
}

/// How a worker process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    Code(i32),
    Signal(i32),
}

impl Ended {
    fn from_status(status: ExitStatus) -> Self {
        match (status.code(), status.signal()) {
            (Some(code), _) => Self::Code(code),
            (None, Some(signal)) => Self::Signal(signal),
            (None, None) => Self::Code(-1),
        }
    }

    pub fn code(self) -> Option<i32> {
        match self {
            Self::Code(c) => Some(c),
            Self::Signal(_) => None,
        }
    }
}

impl std::fmt::Display for Ended {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Code(c) => write!(f, "exit {c}"),
            Self::Signal(s) => write!(f, "signal {s}"),
        }
    }
}

/// One `radar worker` process.
pub struct Worker {
    /// Also its `RADAR_WORKER_ID` and its sessions' `application_name`.
    pub name: String,
    pub log: PathBuf,
    child: Option<Child>,
    pub ended: Option<Ended>,
}

impl Worker {
    pub fn spawn(env: &WorkerEnv, name: String, shard: u32) -> Result<Self> {
        Self::spawn_with(env, name, shard, &[])
    }

    /// [`Worker::spawn`] with extra environment variables.
    pub fn spawn_with(
        env: &WorkerEnv,
        name: String,
        shard: u32,
        extra: &[(&str, String)],
    ) -> Result<Self> {
        let log = env.dir.join(format!("{name}.log"));
        let file = fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let child = env
            .command(&name)
            .arg("worker")
            .env("RADAR_WORKER_ID", &name)
            .env("RADAR_SHARD", format!("{shard}/{}", env.shards))
            .env("RADAR_METRICS_ADDR", format!("127.0.0.1:{}", free_port()?))
            .env("RADAR_CHECKPOINT_INTERVAL", "10")
            .env("RADAR_CHECKPOINT_MAX_INTERVAL_SECONDS", "1")
            .env(
                "RADAR_CHECKPOINT_TIMEOUT_SECONDS",
                env.checkpoint_timeout_secs.to_string(),
            )
            // Shrinks the MQTT reconnect schedule (test-only variable).
            .env(
                "RADAR_TEST_MQTT_BACKOFF_MS",
                format!(
                    "{},{}",
                    MQTT_BACKOFF.0.as_millis(),
                    MQTT_BACKOFF.1.as_millis()
                ),
            )
            .env("RUST_LOG", "info")
            .envs(extra.iter().map(|(k, v)| (*k, v.as_str())))
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .with_context(|| format!("spawning worker {name}"))?;
        Ok(Self {
            name,
            log,
            child: Some(child),
            ended: None,
        })
    }

    pub fn alive(&mut self) -> bool {
        self.reap();
        self.child.is_some()
    }

    /// Collects the exit status if the process ended.
    pub fn reap(&mut self) -> Option<Ended> {
        if let Some(child) = self.child.as_mut()
            && let Ok(Some(status)) = child.try_wait()
        {
            self.ended = Some(Ended::from_status(status));
            self.child = None;
        }
        self.ended
    }

    /// SIGKILL: no last snapshot, no goodbye.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            if let Ok(status) = child.wait() {
                self.ended = Some(Ended::from_status(status));
            }
        }
    }

    /// SIGTERM: the worker stops ingestion, commits and exits by itself.
    pub fn term(&self) {
        self.signal(libc::SIGTERM);
    }

    /// SIGSTOP: the worker freezes wherever it is (mid-transaction too),
    /// a zombie writer once a successor takes over.
    pub fn freeze(&self) {
        self.signal(libc::SIGSTOP);
    }

    /// SIGCONT after [`Worker::freeze`].
    pub fn thaw(&self) {
        self.signal(libc::SIGCONT);
    }

    fn signal(&self, signal: i32) {
        if let Some(child) = &self.child {
            let pid = i32::try_from(child.id()).unwrap_or(i32::MAX);
            // SAFETY: kill has no memory preconditions.
            unsafe {
                libc::kill(pid, signal);
            }
        }
    }

    pub fn log_text(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        // A frozen process would not die of SIGKILL any later, but a
        // continued one leaves no stopped zombie behind either way.
        self.thaw();
        self.kill9();
    }
}

/// Debian's libfaketime, for workers with an offset clock.
pub const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// The log of every short `radar` command the run ran.
pub const CLI_LOG: &str = "radar-cli.log";

/// Runs a short `radar` command: whether it succeeded, and its stdout.
/// Gives up (and kills it) after `limit`, e.g. while the database is paused.
pub async fn radar_cli(
    env: &WorkerEnv,
    args: &[&str],
    limit: std::time::Duration,
) -> Result<(bool, String)> {
    let out_path = env
        .dir
        .join(format!("cli-{}.out", uuid::Uuid::new_v4().simple()));
    // Every command's log goes to one file, scanned for panics at the end.
    let log = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(env.dir.join(CLI_LOG))?;
    let mut child = env
        .command("radar-cli")
        .args(args)
        .stdout(fs::File::create(&out_path)?)
        .stderr(log)
        .spawn()
        .context("spawning radar")?;
    let ended = poll::within(limit)
        .every(std::time::Duration::from_millis(20))
        .try_wait("the command finishes", || match child.try_wait() {
            Ok(Some(status)) => Ok(Ok(status)),
            Ok(None) => Err("still running"),
            Err(e) => Ok(Err(e)),
        })
        .await;
    let status = match ended {
        Ok(status) => Some(status?),
        Err(_) => {
            let _ = child.kill();
            let _ = child.wait();
            None
        }
    };
    let stdout = fs::read_to_string(&out_path).unwrap_or_default();
    let _ = fs::remove_file(&out_path);
    match status {
        Some(status) => Ok((status.success(), stdout)),
        None => anyhow::bail!("radar {} did not finish within {limit:?}", args.join(" ")),
    }
}
