//! What the machine is and what a process uses, from /proc.

use std::{fs, time::Duration};

/// The machine a run measured on.
#[derive(Debug, Clone)]
pub struct Machine {
    pub cores: usize,
    pub cpu_model: String,
    pub mem_total_mib: u64,
    pub kernel: String,
}

impl Machine {
    pub fn read() -> Self {
        let cpuinfo = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name"))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
            .unwrap_or_else(|| "unknown".into());
        let meminfo = fs::read_to_string("/proc/meminfo").unwrap_or_default();
        Self {
            cores: std::thread::available_parallelism().map_or(1, usize::from),
            cpu_model,
            mem_total_mib: status_kib(&meminfo, "MemTotal:").unwrap_or(0) / 1024,
            kernel: fs::read_to_string("/proc/sys/kernel/osrelease")
                .map(|s| s.trim().to_string())
                .unwrap_or_default(),
        }
    }
}

/// The 1, 5 and 15 minute load averages.
pub fn load_average() -> String {
    fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| "unknown".into())
}

/// The 1 minute load average as a number.
pub fn load_1m() -> f64 {
    load_average()
        .split_whitespace()
        .next()
        .and_then(|v| v.parse().ok())
        .unwrap_or(f64::NAN)
}

/// A `Key:   123 kB` line of /proc/PID/status or /proc/meminfo, in KiB.
pub fn status_kib(text: &str, key: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// Resident and peak resident set size of a process, in KiB.
pub fn rss_kib(pid: u32) -> Option<(u64, u64)> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    Some((
        status_kib(&status, "VmRSS:")?,
        status_kib(&status, "VmHWM:")?,
    ))
}

/// What a process holds in the kernel: open descriptors (entries of
/// /proc/PID/fd), threads, and its soft open-file limit.
#[derive(Debug, Clone, Copy, Default)]
pub struct Holdings {
    pub fds: usize,
    pub threads: u64,
    pub fd_limit: Option<u64>,
}

pub fn holdings(pid: u32) -> Option<Holdings> {
    let fds = fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count();
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let threads = status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|v| v.trim().parse().ok())?;
    let limits = fs::read_to_string(format!("/proc/{pid}/limits")).unwrap_or_default();
    let fd_limit = limits
        .lines()
        .find_map(|l| l.strip_prefix("Max open files"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok());
    Some(Holdings {
        fds,
        threads,
        fd_limit,
    })
}

/// CPU time (user + system) a process has used so far.
pub fn cpu_time(pid: u32) -> Option<Duration> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let ticks = stat_cpu_ticks(&stat)?;
    // SAFETY: sysconf only reads a configuration value.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let hz = if hz > 0 { hz as f64 } else { 100.0 };
    Some(Duration::from_secs_f64(ticks as f64 / hz))
}

/// How often the threads of `pid` whose name starts with `prefix` went to
/// sleep so far: their voluntary context switches (`/proc/PID/task/*/status`).
/// Threads that ended take their counts along.
pub fn thread_sleeps(pid: u32, prefix: &str) -> Option<u64> {
    let tasks = fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut sleeps = 0;
    for task in tasks.flatten() {
        let path = task.path();
        // A thread can end between listing and reading: skip it.
        let Ok(comm) = fs::read_to_string(path.join("comm")) else {
            continue;
        };
        if !comm.starts_with(prefix) {
            continue;
        }
        let Ok(status) = fs::read_to_string(path.join("status")) else {
            continue;
        };
        sleeps += voluntary_switches(&status)?;
    }
    Some(sleeps)
}

/// `voluntary_ctxt_switches` of a /proc status file.
fn voluntary_switches(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|line| line.strip_prefix("voluntary_ctxt_switches:"))?
        .trim()
        .parse()
        .ok()
}

/// utime + stime from a /proc/PID/stat line (fields 14 and 15; the command
/// name in parentheses may contain spaces, so count from its end).
fn stat_cpu_ticks(stat: &str) -> Option<u64> {
    let after = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    // `after` starts at field 3 (state).
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn voluntary_switches_are_read_from_a_status_file() {
        let status = "Name:\tactix-rt|system\nvoluntary_ctxt_switches:\t1234\nnonvoluntary_ctxt_switches:\t56\n";
        assert_eq!(voluntary_switches(status), Some(1234));
        assert_eq!(voluntary_switches("Name:\tx\n"), None);
    }

    #[test]
    fn this_process_sleeps_are_counted_by_thread_name() {
        let pid = std::process::id();
        let name = "sleeps-probe";
        let before = thread_sleeps(pid, name).expect("this process's tasks");
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                let counted = thread_sleeps(pid, name);
                std::thread::sleep(std::time::Duration::from_millis(5));
                let after = thread_sleeps(pid, name);
                assert!(after > counted, "{counted:?} then {after:?}");
            })
            .expect("a thread")
            .join()
            .expect("the probe thread");
        assert_eq!(before, 0);
    }

    #[test]
    fn cpu_ticks_are_read_past_a_command_name_with_spaces() {
        let stat = "42 (radar worker) S 1 42 42 0 -1 4194560 500 0 0 0 150 25 0 0 20 0 9 0 100";
        assert_eq!(stat_cpu_ticks(stat), Some(175));
    }

    #[test]
    fn status_lines_are_read_in_kib() {
        let status = "Name:\tradar\nVmHWM:\t  2048 kB\nVmRSS:\t  1024 kB\n";
        assert_eq!(status_kib(status, "VmRSS:"), Some(1024));
        assert_eq!(status_kib(status, "VmSwap:"), None);
    }

    #[test]
    fn this_process_has_a_resident_set_and_cpu_time() {
        let (rss, hwm) = rss_kib(std::process::id()).unwrap();
        assert!(rss > 0 && hwm >= rss);
        assert!(cpu_time(std::process::id()).is_some());
    }
}
