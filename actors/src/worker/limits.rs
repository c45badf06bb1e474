//! The process limits a worker raises before it starts its monitors. Each
//! monitor holds one descriptor (its MQTT connection), so a soft
//! `RLIMIT_NOFILE` of 1,024 (a common default) stops a worker short of a
//! thousand monitors, while the hard limit, which an unprivileged process
//! may raise its soft limit to, is usually far higher.

use std::io;

/// A process's open-file limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileLimit {
    pub soft: libc::rlim_t,
    pub hard: libc::rlim_t,
}

fn current() -> io::Result<FileLimit> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(FileLimit {
        soft: limit.rlim_cur,
        hard: limit.rlim_max,
    })
}

/// Raises the soft open-file limit to the hard one; returns the limits
/// before and after.
pub fn raise_open_files() -> io::Result<(FileLimit, FileLimit)> {
    let before = current()?;
    if before.soft < before.hard {
        let raised = libc::rlimit {
            rlim_cur: before.hard,
            rlim_max: before.hard,
        };
        // SAFETY: setrlimit reads the struct it is given.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok((before, current()?))
}

/// Raises the limit and says so once; a failure is logged, not fatal: the
/// worker still runs as many monitors as the old limit allows.
pub fn raise_and_log() {
    match raise_open_files() {
        Ok((before, after)) => tracing::info!(
            soft_before = before.soft,
            soft = after.soft,
            hard = after.hard,
            "Open-file limit (RLIMIT_NOFILE) for the monitors' connections and threads."
        ),
        Err(error) => tracing::warn!(
            %error,
            "Could not raise the open-file limit (RLIMIT_NOFILE); the worker may run out of descriptors with many monitors. Raise the hard limit the service inherits (ulimit -n, or the Docker daemon's; deploy/README.md, Scale)."
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Set in the child process that may change its own limit.
    const CHILD: &str = "RADAR_TEST_LIMITS_CHILD";

    /// Runs `test` in a re-executed copy of this test binary, so raising the
    /// limit never changes the limit of the process running other tests.
    fn in_child(test: &str) {
        let output = std::process::Command::new(std::env::current_exe().unwrap())
            .args([test, "--exact", "--nocapture", "--test-threads=1"])
            .env(CHILD, "1")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success() && stdout.contains("1 passed"),
            "the child run of {test} failed:\n{stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }

    #[test]
    fn the_soft_open_file_limit_is_raised_to_the_hard_limit() {
        if std::env::var_os(CHILD).is_none() {
            in_child("worker::limits::tests::the_soft_open_file_limit_is_raised_to_the_hard_limit");
            return;
        }
        let start = current().unwrap();
        // Lower the soft limit first, so there is something to raise.
        let lowered = libc::rlimit {
            rlim_cur: start.hard.min(256),
            rlim_max: start.hard,
        };
        // SAFETY: setrlimit reads the struct it is given.
        assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lowered) }, 0);
        let (before, after) = raise_open_files().unwrap();
        assert_eq!(before.soft, start.hard.min(256));
        assert_eq!(after.soft, start.hard, "raised to the hard limit");
        assert_eq!(after.hard, start.hard, "the hard limit is unchanged");
    }
}
