//! One worker test's world: a fresh database, a private Mosquitto and a
//! scratch directory, with the `radar` CLI and worker processes pointed at
//! them, and the reads of `radar status`, `radar snapshot inspect` and
//! `radar graph` the tests assert on. Every wait is a condition polled
//! against a deadline ([`crate::poll`]).

use std::{
    collections::BTreeMap,
    fs,
    process::{Command, Output},
    time::Duration,
};

use diesel_async::AsyncPgConnection;
use serde_json::Value;
use uuid::Uuid;

use crate::{
    broker::Mosquitto,
    db::{self, TestDb},
    ingest::unique_prefix,
    monitor, poll,
    worker::{Worker, WorkerBuilder, radar_command},
};

/// One test's world: database, broker, scratch directory.
pub struct Harness {
    pub db: TestDb,
    pub broker: Mosquitto,
    pub dir: tempfile::TempDir,
}

/// A failed test keeps its scratch directory (the worker logs, the monitor
/// files) and names it on stderr, so a failure that does not repeat can
/// still be read afterwards.
impl Drop for Harness {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.dir.disable_cleanup(true);
            eprintln!(
                "test failed: its worker logs and files are kept in {}",
                self.dir.path().display()
            );
        }
    }
}

impl Harness {
    pub async fn new(tag: &str) -> Self {
        Self::on_server(&db::server_url(), tag).await
    }

    /// A harness whose database lives on `server` (e.g. a private cluster
    /// the test stops and restarts).
    pub async fn on_server(server: &str, tag: &str) -> Self {
        let db = db::migrated_database_on(server, tag).await;
        let broker = Mosquitto::start(100_000)
            .await
            .expect("start a private mosquitto");
        Self {
            db,
            broker,
            dir: tempfile::tempdir().expect("temp dir"),
        }
    }

    fn command(&self) -> Command {
        let mut cmd = radar_command(&self.db.url);
        cmd.env("RADAR_MQTT_URL", self.broker.url());
        cmd
    }

    /// Runs a short `radar` command to completion.
    pub fn radar(&self, args: &[&str]) -> Output {
        self.command().args(args).output().expect("run radar")
    }

    /// Creates a monitor through the CLI; returns its id and topic prefix.
    pub fn create_monitor(&self, name: &str) -> (Uuid, String) {
        self.create_monitor_edited(name, |file, _| file)
    }

    /// Like [`Harness::create_monitor`], with the monitor file (from
    /// [`monitor::two_readings_file`]) changed by `edit`, which also gets
    /// the topic prefix, before it is written.
    pub fn create_monitor_edited(
        &self,
        name: &str,
        edit: impl FnOnce(monitor::MonitorFile, &str) -> monitor::MonitorFile,
    ) -> (Uuid, String) {
        let prefix = unique_prefix();
        let path = self.dir.path().join(format!("{name}.toml"));
        let file = edit(monitor::two_readings_file(name, &prefix), &prefix);
        fs::write(&path, file.to_toml()).expect("write monitor file");
        let out = self.radar(&["monitor", "create", "--config", &path.display().to_string()]);
        assert!(
            out.status.success(),
            "monitor create failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let id = String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .expect("monitor id");
        (id, prefix)
    }

    /// Creates many monitors through the library (one process, one pool).
    pub async fn create_monitors(&self, count: usize) -> Vec<(Uuid, String)> {
        let pool = radar::store::connect(&self.db.url, 2, db::STATEMENT_TIMEOUT)
            .await
            .expect("pool");
        let services = radar::store::Services::new(pool);
        let mut out = Vec::with_capacity(count);
        for i in 0..count {
            let prefix = unique_prefix();
            let config = radar::config::MonitorConfig::from_toml(&monitor::two_readings(
                &format!("m{i:04}"),
                &prefix,
            ))
            .expect("valid monitor");
            out.push((
                services.create(&config).await.expect("create monitor"),
                prefix,
            ));
        }
        out
    }

    /// Starts `radar worker` with the test's checkpoint settings plus `env`.
    pub fn spawn_worker(&self, worker_id: &str, env: &[(&str, &str)], args: &[&str]) -> Worker {
        WorkerBuilder::new(&self.db.url, &self.broker.url(), self.dir.path())
            .id(worker_id)
            .args(args)
            .envs(&[
                ("RADAR_CHECKPOINT_INTERVAL", "10"),
                ("RADAR_CHECKPOINT_MAX_INTERVAL_SECONDS", "1"),
                ("RADAR_CHECKPOINT_TIMEOUT_SECONDS", "5"),
                ("RUST_LOG", "info"),
            ])
            .envs(env)
            .spawn()
    }

    /// `radar status --json`.
    pub fn status(&self) -> Vec<Value> {
        crate::telemetry::status_rows(&self.db)
    }

    /// One monitor's status object.
    pub fn status_of(&self, id: Uuid) -> Value {
        crate::telemetry::status_row(&self.db, &id.to_string()).unwrap_or(Value::Null)
    }

    /// Waits until the monitor's status satisfies `condition`; returns it.
    pub async fn wait_status(
        &self,
        id: Uuid,
        within: Duration,
        what: &str,
        condition: impl Fn(&Value) -> bool,
    ) -> Value {
        poll::within(within)
            .value(what, || self.status_of(id), condition)
            .await
    }

    /// `radar snapshot inspect ID --json` and its exit code.
    pub fn inspect(&self, id: Uuid) -> (Value, Option<i32>) {
        crate::telemetry::inspect_snapshot(&self.db, &id.to_string())
    }

    pub async fn connect(&self) -> AsyncPgConnection {
        db::connect(&self.db).await
    }

    /// `radar graph ARGS` that must succeed; its stdout.
    pub fn graph(&self, args: &[&str]) -> String {
        let out = self
            .command()
            .arg("graph")
            .args(args)
            .output()
            .expect("run radar graph");
        assert!(
            out.status.success(),
            "radar graph {args:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Publishes a graph definition through the CLI; its stdout.
    pub fn publish_graph(&self, graph: &Value) -> String {
        let path = self
            .dir
            .path()
            .join(format!("graph-{}.json", Uuid::new_v4().simple()));
        fs::write(
            &path,
            serde_json::to_string_pretty(graph).expect("graph JSON"),
        )
        .expect("write graph file");
        // Authoring starts off; every worker these tests start supports graphs.
        self.graph(&["authoring", "enable"]);
        self.graph(&["publish", "--file", &path.display().to_string()])
    }

    /// `radar graph activate`; the new run's id and its monitor's id.
    pub fn activate(&self, graph: &str, revision: i32) -> GraphRunIds {
        let out = self.graph(&["activate", graph, "--revision", &revision.to_string()]);
        let field = |key: &str| -> Uuid {
            out.lines()
                .find_map(|l| l.strip_prefix(&format!("{key}: ")))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or_else(|| panic!("no {key} in {out}"))
        };
        GraphRunIds {
            run: field("run"),
            service: field("service"),
        }
    }

    /// `radar graph inspect RUN --json`.
    pub fn inspect_run(&self, run: Uuid) -> Value {
        serde_json::from_str(&self.graph(&["inspect", &run.to_string(), "--json"]))
            .expect("graph inspect JSON")
    }

    /// Waits until the run (as `radar graph inspect` shows it) satisfies
    /// `condition`; returns the inspection.
    pub async fn wait_run(
        &self,
        run: Uuid,
        within: Duration,
        what: &str,
        condition: impl Fn(&Value) -> bool,
    ) -> Value {
        poll::within(within)
            .value(what, || self.inspect_run(run), condition)
            .await
    }
}

/// A graph run and the monitor that executes it.
#[derive(Debug, Clone, Copy)]
pub struct GraphRunIds {
    pub run: Uuid,
    pub service: Uuid,
}

/// A JSON counter map (`observations_rejected`) as numbers.
pub fn counts(value: &Value) -> BTreeMap<String, u64> {
    value
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_u64().unwrap_or(0)))
                .collect()
        })
        .unwrap_or_default()
}

/// The gap causes in a coverage history JSON, oldest first, with whether each is closed.
pub fn gaps(coverage: &Value) -> Vec<(String, bool)> {
    coverage["gaps"]
        .as_array()
        .map(|gaps| {
            gaps.iter()
                .map(|g| {
                    (
                        g["cause"].as_str().unwrap_or("").to_string(),
                        !g["to"].is_null(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Processed count in a status row.
pub fn processed(row: &Value) -> u64 {
    row["processed_count"].as_u64().unwrap_or(0)
}

pub fn state(row: &Value) -> &str {
    row["state"].as_str().unwrap_or("")
}
