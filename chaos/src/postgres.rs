//! A PostgreSQL cluster private to one run: initdb into a scratch
//! directory, pg_ctl on a free loopback port, so the run may stop, crash,
//! restart and pause it without touching anybody else's database.

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context, Result, bail};

use crate::broker::free_port;

/// How pg_ctl stops the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopMode {
    /// Rolls back open transactions and shuts down cleanly.
    Fast,
    /// Like a crash: the next start runs recovery.
    Immediate,
}

impl StopMode {
    fn arg(self) -> &'static str {
        match self {
            Self::Fast => "fast",
            Self::Immediate => "immediate",
        }
    }
}

pub struct Cluster {
    pub port: u16,
    bin: PathBuf,
    data: PathBuf,
    log: PathBuf,
    /// Processes stopped by [`Cluster::pause`], to continue later.
    paused: Vec<i32>,
    running: bool,
}

impl Cluster {
    /// Creates and starts a cluster under `dir` (trust authentication for
    /// the `postgres` user on 127.0.0.1 only).
    pub fn start(dir: &Path) -> Result<Self> {
        let bin = bin_dir()?;
        let root = dir.join("postgres");
        fs::create_dir_all(&root)?;
        let data = root.join("data");
        if as_root() {
            // initdb refuses to run as root; the cluster belongs to postgres.
            chown_postgres(&root)?;
        }
        run(
            &bin,
            "initdb",
            &[
                "-D",
                path_str(&data)?,
                "-U",
                "postgres",
                "-A",
                "trust",
                "--no-sync",
                "-E",
                "UTF8",
            ],
        )
        .context("initdb of the chaos cluster")?;
        let settings = format!(
            "listen_addresses = '127.0.0.1'\nunix_socket_directories = '{}'\n\
             max_connections = 200\nfsync = on\nlog_min_messages = warning\n",
            root.display()
        );
        fs::OpenOptions::new()
            .append(true)
            .open(data.join("postgresql.conf"))
            .and_then(|mut f| std::io::Write::write_all(&mut f, settings.as_bytes()))
            .context("configuring the chaos cluster")?;
        let mut cluster = Self {
            port: free_port()?,
            log: root.join("postgres.log"),
            bin,
            data,
            paused: Vec::new(),
            running: false,
        };
        cluster.start_again()?;
        Ok(cluster)
    }

    pub fn url(&self, database: &str, application: &str) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{}/{database}?application_name={application}",
            self.port
        )
    }

    /// Starts the stopped server on the same port; pg_ctl waits until it
    /// accepts connections. Blocking.
    pub fn start_again(&mut self) -> Result<()> {
        let options = format!("-p {} -c listen_addresses=127.0.0.1", self.port);
        run(
            &self.bin,
            "pg_ctl",
            &[
                "-D",
                path_str(&self.data)?,
                "-l",
                path_str(&self.log)?,
                "-o",
                &options,
                "-w",
                "-t",
                "60",
                "start",
            ],
        )
        .with_context(|| format!("starting the chaos cluster on port {}", self.port))?;
        self.running = true;
        Ok(())
    }

    /// Blocking.
    pub fn stop(&mut self, mode: StopMode) -> Result<()> {
        self.resume()?;
        run(
            &self.bin,
            "pg_ctl",
            &[
                "-D",
                path_str(&self.data)?,
                "-m",
                mode.arg(),
                "-w",
                "-t",
                "60",
                "stop",
            ],
        )
        .context("stopping the chaos cluster")?;
        self.running = false;
        Ok(())
    }

    /// Freezes the whole server with SIGSTOP: the postmaster first (so it
    /// forks nothing new), then every backend and auxiliary process. Open
    /// connections stay open and hang, as on a stalled host.
    pub fn pause(&mut self) -> Result<()> {
        let postmaster = self.postmaster()?;
        signal(postmaster, libc::SIGSTOP)?;
        self.paused.push(postmaster);
        for child in children(postmaster) {
            if signal(child, libc::SIGSTOP).is_ok() {
                self.paused.push(child);
            }
        }
        Ok(())
    }

    /// Continues what [`Cluster::pause`] stopped, children first.
    pub fn resume(&mut self) -> Result<()> {
        for pid in self.paused.drain(..).rev() {
            // A process may have been gone already; nothing to continue.
            let _ = signal(pid, libc::SIGCONT);
        }
        Ok(())
    }

    fn postmaster(&self) -> Result<i32> {
        let pidfile = fs::read_to_string(self.data.join("postmaster.pid"))
            .context("reading postmaster.pid (is the chaos cluster running?)")?;
        pidfile
            .lines()
            .next()
            .and_then(|l| l.trim().parse().ok())
            .context("postmaster.pid has no pid on its first line")
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self.resume();
        if self.running {
            let _ = self.stop(StopMode::Immediate);
        }
    }
}

/// The newest installed PostgreSQL's binaries (`RADAR_TEST_PG_BIN` wins).
fn bin_dir() -> Result<PathBuf> {
    if let Ok(dir) = std::env::var("RADAR_TEST_PG_BIN") {
        return Ok(PathBuf::from(dir));
    }
    let mut versions: Vec<(u32, PathBuf)> = fs::read_dir("/usr/lib/postgresql")
        .context("no /usr/lib/postgresql: install PostgreSQL or set RADAR_TEST_PG_BIN")?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let version = e.file_name().to_str()?.parse().ok()?;
            Some((version, e.path().join("bin")))
        })
        .filter(|(_, bin)| bin.join("initdb").exists())
        .collect();
    versions.sort();
    match versions.pop() {
        Some((_, bin)) => Ok(bin),
        None => bail!("no PostgreSQL with initdb under /usr/lib/postgresql"),
    }
}

fn as_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

fn chown_postgres(dir: &Path) -> Result<()> {
    let status = Command::new("chown")
        .args(["-R", "postgres:postgres"])
        .arg(dir)
        .status()
        .context("running chown")?;
    if !status.success() {
        bail!("chown postgres {} failed ({status})", dir.display());
    }
    // The scratch directory's parents must let postgres through.
    let mut parent = dir.parent();
    while let Some(p) = parent {
        if p.starts_with(std::env::temp_dir()) && p != std::env::temp_dir() {
            use std::os::unix::fs::PermissionsExt;
            let mut perms = fs::metadata(p)?.permissions();
            perms.set_mode(perms.mode() | 0o711);
            fs::set_permissions(p, perms)?;
        }
        parent = p.parent();
    }
    Ok(())
}

/// Runs a PostgreSQL tool, as the postgres user when we are root.
fn run(bin: &Path, tool: &str, args: &[&str]) -> Result<()> {
    let program = bin.join(tool);
    let mut cmd = if as_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(&program);
        c
    } else {
        Command::new(&program)
    };
    let out = cmd
        .args(args)
        .current_dir("/")
        .output()
        .with_context(|| format!("running {}", program.display()))?;
    if !out.status.success() {
        bail!(
            "{tool} failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

fn path_str(p: &Path) -> Result<&str> {
    p.to_str()
        .with_context(|| format!("{} is not UTF-8", p.display()))
}

fn signal(pid: i32, sig: i32) -> Result<()> {
    // SAFETY: kill has no memory preconditions; a bad pid is an error return.
    if unsafe { libc::kill(pid, sig) } == 0 {
        Ok(())
    } else {
        bail!(
            "kill({pid}, {sig}) failed: {}",
            std::io::Error::last_os_error()
        )
    }
}

/// Direct children of a process, from /proc.
fn children(parent: i32) -> Vec<i32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|stat| {
                    // The command may contain spaces; fields resume after ')'.
                    let rest = &stat[stat.rfind(')')? + 2..];
                    rest.split_whitespace().nth(1)?.parse::<i32>().ok()
                })
                == Some(parent)
        })
        .collect()
}
