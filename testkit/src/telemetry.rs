//! The telemetry and MQTT tests' way to run a worker: synchronous (no
//! runtime needed), one worker per test on a shared-settings command, the
//! monitor created through the binary, and fresh observation timestamps.

use std::{fs, path::Path, time::Duration};

use crate::{
    broker::Mosquitto,
    db::TestDb,
    monitor, poll,
    worker::{Worker, WorkerBuilder, radar_command},
};

/// Polls `probe` every 100 ms until it returns `Some`, or panics after
/// `within` naming `what` (see [`poll`] for probes that report what they saw).
pub fn wait_for<T>(within: Duration, what: &str, mut probe: impl FnMut() -> Option<T>) -> T {
    poll::within(within).blocking(what, || probe().ok_or("not yet"))
}

/// A `radar` command against a test database.
pub fn radar(db: &TestDb) -> std::process::Command {
    radar_command(&db.url)
}

/// Creates a monitor with one reading on `topic` ([`monitor::one_reading`])
/// through the binary and returns its id.
pub fn create_monitor(db: &TestDb, dir: &Path, name: &str, topic: &str) -> String {
    create_monitor_from(db, dir, name, &monitor::one_reading(name, topic))
}

/// `radar monitor create` of the monitor file `toml`, written into `dir`
/// as `NAME.toml`; returns the new monitor's id.
pub fn create_monitor_from(db: &TestDb, dir: &Path, name: &str, toml: &str) -> String {
    let file = dir.join(format!("{name}.toml"));
    fs::write(&file, toml).expect("write monitor file");
    let out = radar(db)
        .args(["monitor", "create", "--config"])
        .arg(&file)
        .output()
        .expect("run radar monitor create");
    assert!(
        out.status.success(),
        "monitor create of {name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

impl Worker {
    /// Starts a worker for `monitors` (every monitor of the database when
    /// empty) with the settings the telemetry tests share and waits until
    /// it serves `/healthz`; `extra` adds or overrides environment variables.
    pub fn spawn(
        db: &TestDb,
        broker: &Mosquitto,
        dir: &Path,
        monitors: &[&str],
        extra: &[(&str, &str)],
    ) -> Self {
        // The binary takes at most one `--monitor`.
        assert!(monitors.len() <= 1, "one monitor, or the whole shard");
        let mut builder = WorkerBuilder::new(&db.url, &broker.url(), dir);
        let id = format!("telemetry-test-{}", builder.metrics_port());
        builder = builder
            .id(&id)
            .args(monitors.iter().flat_map(|m| ["--monitor", m]))
            .envs(&[("RADAR_TEST_MQTT_BACKOFF_MS", "100,1000")])
            .envs(extra);
        if extra.contains(&("RADAR_ENV", "production")) {
            // Production refuses the test reconnect schedule.
            builder = builder.env_remove("RADAR_TEST_MQTT_BACKOFF_MS");
        }
        builder.spawn_healthy()
    }
}

impl Worker {
    /// Waits (at most 30 s) until `/metrics` shows monitor `id` connected,
    /// every subscription acknowledged: publish only after it.
    pub fn wait_connected(&self, id: &str) {
        let me = [("monitor_id", id)];
        wait_for(Duration::from_secs(30), "radar_mqtt_connected 1", || {
            (crate::exposition::sample(&self.metrics(), "radar_mqtt_connected", &me) == Some(1.0))
                .then_some(())
        });
    }

    /// Waits (at most 30 s) until `/readyz` answers 503 with a reason for
    /// its first monitor past the start's phases (the reason it stays not
    /// ready, e.g. a refused connection), and returns that reason.
    pub fn not_ready_detail(&self) -> String {
        wait_for(
            Duration::from_secs(30),
            "/readyz answers 503 with a reason",
            || {
                let (code, body) = self.get("/readyz")?;
                let json: serde_json::Value = serde_json::from_str(&body).ok()?;
                let detail = json["not_ready"][0]["detail"].as_str()?.to_string();
                // The start's own phases come first and say nothing of
                // why the monitor then stays not ready.
                let starting = detail.starts_with("starting:")
                    || detail.starts_with("waiting for a start slot");
                (code == 503 && !detail.is_empty() && !starting).then_some(detail)
            },
        )
    }
}

/// The rows of `radar status --json`; panics with the command's error if it
/// fails.
pub fn status_rows(db: &TestDb) -> Vec<serde_json::Value> {
    let out = radar(db)
        .args(["status", "--json"])
        .output()
        .expect("run radar status");
    assert!(
        out.status.success(),
        "radar status: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("status --json is a JSON array")
}

/// Monitor `id`'s row of `radar status --json`, if it has one yet.
pub fn status_row(db: &TestDb, id: &str) -> Option<serde_json::Value> {
    status_rows(db)
        .into_iter()
        .find(|r| r["monitor_id"].as_str() == Some(id))
}

/// `radar snapshot inspect ID --json` and its exit code; `Null` while the
/// monitor has no snapshot to inspect.
pub fn inspect_snapshot(db: &TestDb, id: &str) -> (serde_json::Value, Option<i32>) {
    let out = radar(db)
        .args(["snapshot", "inspect", id, "--json"])
        .output()
        .expect("run radar snapshot inspect");
    let value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    (value, out.status.code())
}

/// [`inspect_snapshot`] without the exit code.
pub fn snapshot_inspection(db: &TestDb, id: &str) -> serde_json::Value {
    inspect_snapshot(db, id).0
}

/// The coverage gaps of `cause` in monitor `id`'s snapshot, oldest first.
pub fn snapshot_gaps(db: &TestDb, id: &str, cause: &str) -> Vec<serde_json::Value> {
    let inspection = snapshot_inspection(db, id);
    inspection["coverage"]["gaps"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|g| g["cause"] == cause)
        .cloned()
        .collect()
}

/// Milliseconds since the epoch, for fresh observation timestamps.
pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}
