//! (f) No panic in any log; (g) every monitor runs again once the faults
//! stop (a liveness check: recovery that never resumes would pass the
//! others vacuously); (l) a worker with an offset clock notices it and
//! writes nothing.

use super::{Observations, Verdict};

/// Rust's panic hook prints this; the JSON log format does not change it.
const PANIC_MARK: &str = "panicked at";
/// The exit code of a Rust process whose main thread panicked.
const PANIC_EXIT: i32 = 101;

pub fn no_panic(obs: &Observations) -> Verdict {
    let mut v = Verdict::new("(f) no panic in any log");
    for log in &obs.logs {
        let line = log.text.lines().find(|l| l.contains(PANIC_MARK));
        let ok = line.is_none() && log.exit_code != Some(PANIC_EXIT);
        v.expect(ok, || match line {
            Some(line) => format!("{}: {}", log.name, line.trim()),
            None => format!("{} exited with code {PANIC_EXIT} (a panic)", log.name),
        });
    }
    v.vacuous_fails("logs")
}

pub fn every_monitor_resumed(obs: &Observations) -> Verdict {
    let mut v = Verdict::new("(g) every monitor owned and processing again after the faults");
    for m in &obs.monitors {
        v.expect(obs.resumed.get(m).copied().unwrap_or(false), || {
            format!("monitor {m} was not owned and processing within the healing deadline")
        });
    }
    v.vacuous_fails("monitors")
}

/// The worker's log line when its clock disagrees with the database's.
const CLOCK_MARK: &str = "PostgreSQL's; source times are judged on it";
/// It never got as far as comparing clocks.
const NO_DATABASE_MARK: &str = "PostgreSQL cannot be reached";

pub fn offset_clocks_noticed(obs: &Observations) -> Verdict {
    let mut v = Verdict::new("(l) a worker with an offset clock notices it and writes nothing");
    for name in &obs.offset_workers {
        let log = obs.logs.iter().find(|l| &l.name == name);
        let noticed =
            log.is_some_and(|l| l.text.contains(CLOCK_MARK) || l.text.contains(NO_DATABASE_MARK));
        v.expect(noticed, || {
            format!("{name}: its log never says its clock disagrees with PostgreSQL's")
        });
        let writes = obs.writes.iter().filter(|w| &w.writer == name).count();
        v.expect(writes == 0, || {
            format!("{name}: wrote {writes} rows with an offset clock")
        });
    }
    v.vacuous_fails("workers with an offset clock")
}
