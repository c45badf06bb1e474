//! A private PostgreSQL cluster for a test that stops and restarts the
//! database: `initdb` into a temporary directory (as the `postgres` user when
//! the tests run as root, since PostgreSQL refuses to run as root) and
//! `pg_ctl` on a free loopback port with trust authentication. The shared
//! cluster on 5432 is never touched. It can be stopped (cleanly or as a
//! crash) and frozen (SIGSTOP), as `scripts/chaos` does.

use std::{
    net::TcpStream,
    path::{Path, PathBuf},
    process::{Command, Output},
    time::Duration,
};

use anyhow::{Context, Result, bail};

/// How long the cluster may take to accept connections after a start.
const START_DEADLINE: Duration = Duration::from_secs(60);

pub struct PrivatePostgres {
    /// Holds the data directory and the socket directory.
    dir: tempfile::TempDir,
    pub port: u16,
    running: bool,
    /// Processes frozen by [`PrivatePostgres::pause`], in the order stopped.
    paused: Vec<u32>,
}

/// How [`PrivatePostgres::stop_with`] ends the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopMode {
    /// Rolls back open transactions, disconnects and shuts down cleanly.
    Fast,
    /// Like a crash: the next start runs recovery.
    Immediate,
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
        let port = crate::http::free_port();
        let mut cluster = Self {
            dir,
            port,
            running: false,
            paused: Vec::new(),
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
        let port = self.port;
        crate::poll::within(START_DEADLINE)
            .every(Duration::from_millis(50))
            .try_blocking(&format!("the private cluster listens on {port}"), || {
                TcpStream::connect(("127.0.0.1", port)).map(drop)
            })
    }

    /// Restarts the cluster with TLS on, serving `cert` and `key` (PEM).
    /// With `tls_only`, TCP connections without TLS are refused, so a client
    /// that connects proves it used TLS.
    pub fn enable_ssl(&mut self, cert: &Path, key: &Path, tls_only: bool) -> Result<()> {
        use std::os::unix::fs::PermissionsExt;
        self.stop_with(StopMode::Fast)?;
        let data = self.data();
        std::fs::copy(cert, data.join("server.crt")).context("copying the certificate")?;
        std::fs::copy(key, data.join("server.key")).context("copying the key")?;
        // PostgreSQL refuses a key others can read.
        std::fs::set_permissions(
            data.join("server.key"),
            std::fs::Permissions::from_mode(0o600),
        )?;
        let mut conf = std::fs::read_to_string(data.join("postgresql.conf"))?;
        conf.push_str("\nssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\n");
        std::fs::write(data.join("postgresql.conf"), conf)?;
        if tls_only {
            std::fs::write(
                data.join("pg_hba.conf"),
                "local all all trust\nhostssl all all 127.0.0.1/32 trust\nhostssl all all ::1/128 trust\n",
            )?;
        }
        if as_root() {
            run(Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(&data))
            .context("giving the TLS files to the postgres user")?;
        }
        self.restart()
    }

    /// Stops the cluster at once, as a crash or a lost host would: every
    /// connection is cut and new ones are refused until [`Self::restart`].
    pub fn stop(&mut self) -> Result<()> {
        self.stop_with(StopMode::Immediate)
    }

    pub fn stop_with(&mut self, mode: StopMode) -> Result<()> {
        self.resume()?;
        let mode = match mode {
            StopMode::Fast => "fast",
            StopMode::Immediate => "immediate",
        };
        run(command("pg_ctl")?
            .arg("-D")
            .arg(self.data())
            .args(["-m", mode, "-w", "stop"]))
        .context("stopping the private cluster")?;
        self.running = false;
        Ok(())
    }

    /// Freezes the server as a stalled host would: SIGSTOP to the postmaster
    /// (so it starts nothing new), then to every backend and background
    /// process. Connections stay open and hang until [`Self::resume`].
    pub fn pause(&mut self) -> Result<()> {
        let pidfile = std::fs::read_to_string(self.data().join("postmaster.pid"))
            .context("reading postmaster.pid (is the private cluster running?)")?;
        let postmaster: u32 = pidfile
            .lines()
            .next()
            .and_then(|l| l.trim().parse().ok())
            .context("postmaster.pid has no pid on its first line")?;
        signal("STOP", &[postmaster])?;
        self.paused.push(postmaster);
        let children = children(postmaster);
        if !children.is_empty() {
            signal("STOP", &children)?;
            self.paused.extend(children);
        }
        Ok(())
    }

    /// Continues what [`Self::pause`] froze, children first.
    pub fn resume(&mut self) -> Result<()> {
        if self.paused.is_empty() {
            return Ok(());
        }
        let pids: Vec<u32> = self.paused.drain(..).rev().collect();
        // A frozen backend may have been gone already: that is no error.
        let _ = Command::new("kill")
            .arg("-CONT")
            .args(pids.iter().map(u32::to_string))
            .output();
        Ok(())
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        let _ = self.resume();
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

fn signal(name: &str, pids: &[u32]) -> Result<()> {
    run(Command::new("kill")
        .arg(format!("-{name}"))
        .args(pids.iter().map(u32::to_string)))
    .map(drop)
}

/// The direct children of a process, from /proc.
fn children(parent: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|stat| {
                    // The command may hold spaces; the fields resume after ')'.
                    let rest = stat.get(stat.rfind(')')? + 2..)?;
                    rest.split_whitespace().nth(1)?.parse::<u32>().ok()
                })
                == Some(parent)
        })
        .collect()
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
