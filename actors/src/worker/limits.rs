//! The process limits a worker raises before it starts its monitors. Each
//! monitor holds one descriptor (its MQTT connection), so a soft
//! `RLIMIT_NOFILE` of 1,024 (a common default) stops a worker short of a
//! thousand monitors, while the hard limit, which an unprivileged process
//! may raise its soft limit to, is usually far higher.
//!
//! Each monitor also holds one thread (its model thread), parked on a futex
//! while idle. Linux 6.16 and later give a process its own futex hash table
//! sized for its CPUs (16 buckets on 2 CPUs), not its threads: with 10,000
//! parked threads every wake-up walks a chain of hundreds, and at 10,000
//! monitors that was a third of the worker's CPU at start. The worker asks
//! for a table sized for its threads instead.

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

/// `prctl` options of the process-private futex hash (linux/prctl.h,
/// Linux 6.16); not in the `libc` crate yet.
const PR_FUTEX_HASH: libc::c_int = 78;
const PR_FUTEX_HASH_SET_SLOTS: libc::c_ulong = 1;
const PR_FUTEX_HASH_GET_SLOTS: libc::c_ulong = 2;
/// Buckets of the worker's futex hash: about one per parked thread at
/// 16,000 monitors, 1 MiB of kernel memory.
pub const FUTEX_HASH_SLOTS: libc::c_ulong = 16_384;

/// The buckets of this process's private futex hash; `None` on kernels
/// without one (before 6.16), where the shared, larger table is used.
pub fn futex_hash_slots() -> Option<libc::c_ulong> {
    // SAFETY: this prctl reads no memory of ours; it returns a count.
    let slots = unsafe { libc::prctl(PR_FUTEX_HASH, PR_FUTEX_HASH_GET_SLOTS, 0, 0, 0) };
    libc::c_ulong::try_from(slots).ok()
}

/// Sizes this process's futex hash for many parked threads; returns the
/// buckets it has afterwards (`None` without a private hash).
pub fn widen_futex_hash() -> io::Result<Option<libc::c_ulong>> {
    // SAFETY: this prctl reads no memory of ours; it resizes a kernel table.
    let set = unsafe {
        libc::prctl(
            PR_FUTEX_HASH,
            PR_FUTEX_HASH_SET_SLOTS,
            FUTEX_HASH_SLOTS,
            0,
            0,
        )
    };
    if set != 0 {
        let error = io::Error::last_os_error();
        return match error.raw_os_error() {
            Some(libc::EINVAL) if futex_hash_slots().is_none() => Ok(None),
            _ => Err(error),
        };
    }
    Ok(futex_hash_slots())
}

/// Widens the futex hash and says so; a failure is logged, not fatal: the
/// worker runs, with wake-ups that cost more the more monitors it has.
pub fn widen_futex_hash_and_log() {
    match widen_futex_hash() {
        Ok(Some(slots)) => tracing::info!(
            slots,
            "Futex hash sized for one parked model thread per monitor."
        ),
        Ok(None) => tracing::debug!("This kernel has no process-private futex hash to size."),
        Err(error) => tracing::warn!(
            %error,
            "Could not size the futex hash for the monitors' model threads; thread wake-ups cost more with many monitors."
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

    #[test]
    fn the_futex_hash_is_sized_for_many_parked_threads() {
        if std::env::var_os(CHILD).is_none() {
            in_child("worker::limits::tests::the_futex_hash_is_sized_for_many_parked_threads");
            return;
        }
        // Threads make the kernel size the table for the CPUs first.
        std::thread::spawn(|| ()).join().unwrap();
        let Some(before) = futex_hash_slots() else {
            eprintln!("no process-private futex hash on this kernel; nothing to size");
            return;
        };
        assert!(
            before < FUTEX_HASH_SLOTS,
            "the default is sized for CPUs: {before}"
        );
        assert_eq!(widen_futex_hash().unwrap(), Some(FUTEX_HASH_SLOTS));
        // New threads do not shrink it back to the default.
        std::thread::spawn(|| ()).join().unwrap();
        assert_eq!(futex_hash_slots(), Some(FUTEX_HASH_SLOTS));
    }
}
