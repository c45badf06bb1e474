//! `radar demo` through the real binary: the embedded broker, the simulated
//! plant and the real worker, with PostgreSQL (twice: the second run
//! restores every monitor's snapshot and reports the gap) and without it
//! (database writes disabled).

use std::{
    fs,
    path::PathBuf,
    process::{Child, Command, ExitStatus, Stdio},
    time::Duration,
};

use radar_testkit::{db, poll};
use serde_json::Value;

/// A 20 s run plus startup, database preparation and the graceful stop.
const RUN_DEADLINE: Duration = Duration::from_secs(120);

struct Run {
    status: ExitStatus,
    summary: Value,
    /// Human output (progress, alarms, summary) goes to stderr with --json.
    stderr: String,
}

/// A `radar demo --json` process, its output in files.
struct Demo {
    child: Child,
    _dir: tempfile::TempDir,
    out: PathBuf,
    err: PathBuf,
}

impl Demo {
    fn spawn(database_url: &str, args: &[&str]) -> Demo {
        let dir = tempfile::tempdir().expect("temp dir");
        let out = dir.path().join("stdout");
        let err = dir.path().join("stderr");
        let child = Command::new(env!("CARGO_BIN_EXE_radar"))
            .args(["demo", "--speed", "50", "--json"])
            .args(args)
            .env("DATABASE_URL", database_url)
            .env("RADAR_CONFIG_FILE", "/dev/null")
            .env_remove("RADAR_ENV")
            .env_remove("RADAR_CHECKPOINT_SECRET")
            .env_remove("RADAR_DB_WRITE_ENABLED")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(fs::File::create(&out).expect("stdout file"))
            .stderr(fs::File::create(&err).expect("stderr file"))
            .spawn()
            .expect("spawn radar demo");
        Demo {
            child,
            _dir: dir,
            out,
            err,
        }
    }

    fn stderr(&self) -> String {
        fs::read_to_string(&self.err).unwrap_or_default()
    }

    /// Waits for the process to end by itself.
    fn finish(mut self) -> Run {
        let ended = poll::within(RUN_DEADLINE).try_blocking("radar demo finishes", || {
            match self.child.try_wait().expect("wait for radar demo") {
                Some(status) => Ok(status),
                None => Err("still running"),
            }
        });
        let status = ended.unwrap_or_else(|timeout| {
            let _ = self.child.kill();
            let _ = self.child.wait();
            panic!("{timeout}; stderr:\n{}", self.stderr())
        });
        let stderr = self.stderr();
        let stdout = fs::read_to_string(&self.out).unwrap_or_default();
        let summary = serde_json::from_str(&stdout).unwrap_or_else(|e| {
            panic!("the --json summary does not parse ({e}):\n{stdout}\nstderr:\n{stderr}")
        });
        Run {
            status,
            summary,
            stderr,
        }
    }
}

/// Runs `radar demo --duration 20 --speed 50 --json` with `database_url`.
fn demo(database_url: &str, extra: &[&str]) -> Run {
    let mut args = vec!["--duration", "20"];
    args.extend_from_slice(extra);
    Demo::spawn(database_url, &args).finish()
}

fn monitors(run: &Run) -> Vec<Value> {
    run.summary["monitors"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// The reading each injected fault acts on.
fn fault_reading(fault: &str) -> &'static str {
    match fault {
        "stuck_sensor" => "flow",
        "step" => "current",
        "slow_leak" => "pressure",
        other => panic!("unknown fault {other}"),
    }
}

/// What every run must show: a full run, alarms inside every injected
/// fault's window naming the faulty reading first, none on the fault-free
/// pump, and the human output with its alarm lines.
fn check_alarms(run: &Run) {
    let context = format!("summary:\n{:#}\nstderr:\n{}", run.summary, run.stderr);
    assert!(run.status.success(), "exit {:?}\n{context}", run.status);
    assert_eq!(run.summary["outcome"], "stopped", "{context}");
    assert_eq!(run.summary["simulated_seconds"], 1000, "{context}");
    let monitors = monitors(run);
    assert_eq!(monitors.len(), 4, "{context}");
    let mut faults = Vec::new();
    for m in &monitors {
        let name = m["name"].as_str().unwrap_or_default();
        assert_eq!(m["state"], "stopped", "{name}\n{context}");
        assert_eq!(m["phase"], "monitoring", "{name}\n{context}");
        // The plant waits for the monitors before each tick, so every tick
        // forms a frame (a tick is lost only if a wait timed out).
        let frames = m["frames"].as_u64().unwrap_or(0);
        assert!(
            frames >= 990,
            "{name} processed only {frames} frames\n{context}"
        );
        match m["fault"].as_str() {
            None => {
                assert_eq!(m["alarms"], 0, "fault-free {name} raised alarms\n{context}");
            }
            Some(fault) => {
                faults.push(fault.to_string());
                assert_eq!(
                    m["faults"].as_array().map(Vec::len),
                    Some(1),
                    "{name}\n{context}"
                );
                assert_eq!(
                    m["faults_detected"], true,
                    "{name} missed its {fault}\n{context}"
                );
                let inside: Vec<&Value> = m["alarm_list"]
                    .as_array()
                    .map(|a| a.iter().filter(|a| a["in_fault_window"] == true).collect())
                    .unwrap_or_default();
                assert!(!inside.is_empty(), "{name}\n{context}");
                for alarm in inside {
                    assert_eq!(
                        alarm["top_readings"][0]["reading"],
                        fault_reading(fault),
                        "{name}: the {fault} alarm names another reading first\n{context}"
                    );
                }
            }
        }
    }
    faults.sort();
    assert_eq!(faults, ["slow_leak", "step", "stuck_sensor"], "{context}");
    assert!(
        run.stderr.lines().any(
            |l| l.starts_with("ALARM demo-pump-2 [fault: step (current)]")
                && l.contains("top readings: current")
        ),
        "no alarm line for the step\n{context}"
    );
    assert!(
        run.stderr
            .lines()
            .any(|l| l.contains("demo-pump-4") && l.contains("phase=monitoring")),
        "no periodic progress lines\n{context}"
    );
}

#[test]
fn with_postgres_the_demo_alarms_on_every_fault_and_a_second_run_restores_and_reports_the_gap() {
    let database = db::unique_name("demo");
    let server = format!("{}/postgres", db::server_url());
    let first = demo(&server, &["--demo-database", &database]);
    check_alarms(&first);
    assert_eq!(first.summary["database_mode"], "postgres");
    assert_eq!(first.summary["database"], database.as_str());
    for m in monitors(&first) {
        assert_eq!(m["start"], "fresh", "{m:#}");
        assert_eq!(m["final_checkpoint"], true, "{m:#}");
    }

    let second = demo(&server, &["--demo-database", &database]);
    check_alarms(&second);
    let ids = |run: &Run| -> Vec<Value> { monitors(run).iter().map(|m| m["id"].clone()).collect() };
    assert_eq!(
        ids(&first),
        ids(&second),
        "the monitors must be the same rows"
    );
    for (before, after) in monitors(&first).iter().zip(monitors(&second)) {
        let context = format!("second run:\n{after:#}\nstderr:\n{}", second.stderr);
        assert_eq!(after["start"], "restored", "{context}");
        assert_eq!(
            after["restored_processed"], before["processed_total"],
            "{context}"
        );
        assert_eq!(after["final_checkpoint"], true, "{context}");
        let gap = after["possible_gap_seconds"].as_f64().unwrap_or(-1.0);
        assert!(gap > 0.0, "no restore gap reported\n{context}");
        let rollback = after["gaps"]
            .as_array()
            .and_then(|gaps| gaps.iter().find(|g| g["cause"] == "restart_rollback"))
            .unwrap_or_else(|| panic!("no restart_rollback gap\n{context}"));
        assert_eq!(rollback["seconds"].as_f64(), Some(gap), "{context}");
        let name = after["name"].as_str().unwrap_or_default();
        assert!(
            second
                .stderr
                .lines()
                .any(|l| l.starts_with(&format!("{name} restored from its snapshot"))),
            "{context}"
        );
        assert!(
            second
                .stderr
                .lines()
                .any(|l| l.starts_with(&format!("{name} restored "))
                    && l.contains("possible coverage gap")),
            "{context}"
        );
    }

    // Ctrl-C: without --duration the demo runs until SIGINT, then stops
    // the plant and every monitor gracefully, with a last snapshot each.
    let third = Demo::spawn(&server, &["--demo-database", &database]);
    poll::within(Duration::from_secs(60)).blocking("the demo reports progress", || {
        let stderr = third.stderr();
        let progress = stderr.lines().any(|l| {
            l.contains("demo-pump-4") && l.contains("frames=") && !l.contains("frames=0 ")
        });
        poll::check(progress, || stderr)
    });
    // SAFETY: sends a signal to the child this test spawned and still owns.
    let sent = unsafe { libc::kill(third.child.id() as libc::pid_t, libc::SIGINT) };
    assert_eq!(sent, 0, "could not send SIGINT");
    let third = third.finish();
    let context = format!("summary:\n{:#}\nstderr:\n{}", third.summary, third.stderr);
    assert!(third.status.success(), "exit {:?}\n{context}", third.status);
    assert!(
        third.stderr.contains("SIGINT: stopping gracefully"),
        "{context}"
    );
    assert_eq!(third.summary["outcome"], "stopped", "{context}");
    for (before, after) in monitors(&second).iter().zip(monitors(&third)) {
        assert_eq!(after["start"], "restored", "{context}");
        assert_eq!(
            after["restored_processed"], before["processed_total"],
            "{context}"
        );
        assert_eq!(after["state"], "stopped", "{context}");
        assert_eq!(after["final_checkpoint"], true, "{context}");
        assert!(after["frames"].as_u64().unwrap_or(0) > 0, "{context}");
    }
}

#[test]
fn without_postgres_the_demo_says_so_in_one_line_and_still_alarms_on_every_fault() {
    let port = radar_testkit::http::free_port();
    let run = demo(&format!("postgres://postgres@127.0.0.1:{port}/radar"), &[]);
    check_alarms(&run);
    assert_eq!(run.summary["database_mode"], "disabled");
    let said: Vec<&str> = run
        .stderr
        .lines()
        .filter(|l| l.starts_with("Database writes disabled"))
        .collect();
    assert_eq!(said.len(), 1, "{}", run.stderr);
    assert!(
        said[0].contains(&format!("127.0.0.1:{port}")),
        "{}",
        said[0]
    );
    for m in monitors(&run) {
        assert_eq!(m["start"], "fresh", "{m:#}");
        assert_eq!(m["final_checkpoint"], Value::Null, "{m:#}");
    }
}
