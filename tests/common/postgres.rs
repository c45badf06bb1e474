//! A private PostgreSQL cluster for a test that stops and restarts the
//! database: `initdb` into a temporary directory (as the `postgres` user when
//! the tests run as root, since PostgreSQL refuses to run as root) and
//! `pg_ctl` on a free loopback port with trust authentication. The shared
//! cluster on 5432 is never touched.
//!
//! Include with `#[path = "common/postgres.rs"] mod postgres;`.
#![allow(dead_code)]

use std::{
    net::TcpStream,
    path::{Path, PathBuf},
    process::{Command, Output},
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};

/// How long the cluster may take to accept connections after a start.
const START_DEADLINE: Duration = Duration::from_secs(60);

pub struct PrivatePostgres {
    /// Holds the data directory and the socket directory.
    dir: tempfile::TempDir,
    pub port: u16,
    running: bool,
}

impl PrivatePostgres {
    /// Initializes a cluster and starts it.
    pub fn start() -> Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("radar-test-pg-")
            .tempdir()
            .context("temporary directory for the private cluster")?;
        if as_root() {
            run(Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(dir.path()))
            .context("giving the cluster directory to the postgres user")?;
        }
        let data = dir.path().join("data");
        run(command("initdb")?.arg("-D").arg(&data).args([
            "-U",
            "postgres",
            "--auth=trust",
            "--encoding=UTF8",
            "--no-sync",
        ]))
        .context("initdb of the private cluster")?;
        let port = super::free_port();
        let mut cluster = Self {
            dir,
            port,
            running: false,
        };
        cluster.restart()?;
        Ok(cluster)
    }

    /// The server URL, without a database name.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}", self.port)
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// Starts the (stopped) cluster and waits until it accepts connections.
    pub fn restart(&mut self) -> Result<()> {
        let options = format!(
            "-p {} -c listen_addresses=127.0.0.1 -k {} -c fsync=off",
            self.port,
            self.dir.path().display()
        );
        run(command("pg_ctl")?
            .arg("-D")
            .arg(self.data())
            .arg("-l")
            .arg(self.dir.path().join("server.log"))
            .args(["-w", "-t", "60", "-o", &options, "start"]))
        .with_context(|| format!("starting the private cluster; log:\n{}", self.log()))?;
        self.running = true;
        let deadline = Instant::now() + START_DEADLINE;
        while TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            if Instant::now() > deadline {
                bail!("the private cluster does not listen on {}", self.port);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    /// Stops the cluster at once, as a crash or a lost host would: every
    /// connection is cut and new ones are refused until [`Self::restart`].
    pub fn stop(&mut self) -> Result<()> {
        run(command("pg_ctl")?
            .arg("-D")
            .arg(self.data())
            .args(["-m", "immediate", "-w", "stop"]))
        .context("stopping the private cluster")?;
        self.running = false;
        Ok(())
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        if self.running {
            let _ = self.stop();
        }
    }
}

fn as_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// A PostgreSQL server program: from `PATH`, else the newest
/// `/usr/lib/postgresql/*/bin`; run as `postgres` when the tests are root.
fn command(program: &str) -> Result<Command> {
    let path = find(program)?;
    Ok(if as_root() {
        let mut cmd = Command::new("runuser");
        cmd.args(["-u", "postgres", "--"]).arg(path);
        cmd
    } else {
        Command::new(path)
    })
}

fn find(program: &str) -> Result<PathBuf> {
    let on_path = std::env::var_os("PATH")
        .map(|paths| {
            std::env::split_paths(&paths)
                .map(|dir| dir.join(program))
                .find(|p| p.is_file())
        })
        .unwrap_or_default();
    if let Some(path) = on_path {
        return Ok(path);
    }
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin").join(program))
        .filter(|p| Path::is_file(p))
        .collect();
    versions.sort();
    versions
        .pop()
        .with_context(|| format!("{program} not found on PATH or under /usr/lib/postgresql"))
}

fn run(cmd: &mut Command) -> Result<Output> {
    let out = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(out)
}
