//! A real `radar worker` process under measurement: started from the
//! release binary, watched through `/readyz`, `/metrics` and /proc.

use std::{
    fs,
    path::{Path, PathBuf},
    process::{Child, ExitStatus, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};

use radar_testkit::{poll, worker::radar_command_of};

use crate::{broker::free_port, http, system};

/// How often readiness and metrics are polled while waiting.
const POLL: Duration = Duration::from_millis(20);

/// A running `radar worker`.
pub struct WorkerProcess {
    child: Option<Child>,
    pub port: u16,
    pub log: PathBuf,
    /// When the process was spawned.
    pub started: Instant,
}

/// What a worker process needs besides its own metrics port.
pub struct WorkerEnv<'a> {
    pub radar_bin: &'a Path,
    pub database_url: &'a str,
    pub mqtt_url: &'a str,
    pub log_dir: &'a Path,
    pub tag: &'a str,
}

impl WorkerProcess {
    /// Spawns `radar worker` with the product's default checkpoint settings
    /// and warnings-only logs.
    pub fn spawn(env: &WorkerEnv<'_>) -> Result<Self> {
        let port = free_port()?;
        let log = env.log_dir.join(format!("worker-{}-{port}.log", env.tag));
        let file = fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let started = Instant::now();
        let child = radar_command_of(env.radar_bin, env.database_url)
            .arg("worker")
            .env("RADAR_MQTT_URL", env.mqtt_url)
            .env("RADAR_METRICS_ADDR", format!("127.0.0.1:{port}"))
            .env("RADAR_WORKER_ID", format!("bench-{}", env.tag))
            .env("RUST_LOG", "warn")
            // The checkpoint settings stay at their defaults (interval 1,000
            // frames, maximum interval and timeout 30 s), as an operator runs.
            .env_remove("RADAR_CHECKPOINT_INTERVAL")
            .env_remove("RADAR_CHECKPOINT_MAX_INTERVAL_SECONDS")
            .env_remove("RADAR_CHECKPOINT_TIMEOUT_SECONDS")
            .env_remove("RADAR_SHARD")
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .with_context(|| format!("starting {}", env.radar_bin.display()))?;
        Ok(Self {
            child: Some(child),
            port,
            log,
            started,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Waits until `/readyz` says 200 with exactly `monitors` admitted;
    /// returns the time since spawn.
    pub async fn wait_ready(&mut self, monitors: usize, within: Duration) -> Result<Duration> {
        let what = format!("the worker is ready with {monitors} monitors");
        let outcome = poll::within(within)
            .every(POLL)
            .try_wait_async(&what, async || {
                // A worker that exited will never be ready: stop at once.
                if let Err(exited) = self.check_alive() {
                    return Ok(Err(exited));
                }
                match http::get(self.port, "/readyz", Duration::from_secs(5)).await {
                    Some((200, body)) if admitted(&body) == Some(monitors as u64) => {
                        Ok(Ok(self.started.elapsed()))
                    }
                    Some((status, body)) => Err(format!("{status}: {}", head(&body, 300))),
                    None => Err("no answer".to_string()),
                }
            })
            .await;
        match outcome {
            Ok(ready) => ready,
            Err(timeout) => bail!("{timeout}; log tail:\n{}", self.log_tail()),
        }
    }

    /// `/metrics` as text.
    pub async fn metrics(&self) -> Result<String> {
        match http::get(self.port, "/metrics", Duration::from_secs(10)).await {
            Some((200, body)) => Ok(body),
            Some((status, _)) => bail!("/metrics answered {status}"),
            None => bail!("/metrics did not answer on port {}", self.port),
        }
    }

    /// The sum of one metric over all monitors.
    pub async fn metric_sum(&self, name: &str) -> Result<f64> {
        Ok(http::metric_sum(&self.metrics().await?, name))
    }

    pub fn rss_kib(&self) -> Option<(u64, u64)> {
        system::rss_kib(self.pid())
    }

    pub fn holdings(&self) -> Option<system::Holdings> {
        system::holdings(self.pid())
    }

    pub fn cpu_time(&self) -> Option<Duration> {
        system::cpu_time(self.pid())
    }

    /// How often the worker's model threads went to sleep so far. Each
    /// model runs on an actix arbiter thread of its own, whose name
    /// (`actix-rt|system:N|arbiter:M`) the kernel keeps as `actix-rt|system`;
    /// the HTTP workers are `actix-server ...`, the network thread `radar`.
    pub fn model_sleeps(&self) -> Option<u64> {
        system::thread_sleeps(self.pid(), "actix-rt|system")
    }

    fn check_alive(&mut self) -> Result<()> {
        if let Some(child) = self.child.as_mut()
            && let Some(status) = child.try_wait()?
        {
            self.child = None;
            bail!(
                "the worker exited with {status}; log tail:\n{}",
                self.log_tail()
            );
        }
        Ok(())
    }

    /// SIGTERM and wait: the worker commits every monitor's last snapshot.
    pub async fn stop(&mut self, within: Duration) -> Result<ExitStatus> {
        let Some(mut child) = self.child.take() else {
            bail!("the worker is not running");
        };
        // SAFETY: kill only sends a signal to our own child.
        unsafe {
            libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
        }
        let what = "the worker exits after SIGTERM";
        let exited = poll::within(within)
            .every(POLL)
            .try_wait(what, || match child.try_wait() {
                Ok(Some(status)) => Ok(Ok(status)),
                Ok(None) => Err("still running"),
                Err(e) => Ok(Err(e)),
            })
            .await;
        match exited {
            Ok(status) => Ok(status?),
            Err(timeout) => {
                let _ = child.kill();
                let _ = child.wait();
                bail!("{timeout}; log tail:\n{}", self.log_tail())
            }
        }
    }

    pub fn log_tail(&self) -> String {
        let log = fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// Lines of the log that mention a panic or an error.
    pub fn log_errors(&self) -> Vec<String> {
        fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("panicked") || l.contains("ERROR"))
            .map(str::to_string)
            .collect()
    }
}

/// The number of monitors a `/readyz` body says are admitted.
fn admitted(body: &str) -> Option<u64> {
    serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v["monitors"].as_u64())
}

/// At most the first `chars` characters of `text`.
fn head(text: &str, chars: usize) -> String {
    text.chars().take(chars).collect()
}

impl Drop for WorkerProcess {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
