//! Helpers for the `radar worker` integration tests: a private broker and a
//! fresh database per test, workers spawned from the real binary with their
//! settings in the environment, a publisher that drives complete frames,
//! and readers of the status, snapshot row and result tables. Every wait is
//! a condition polled against a deadline.
#![allow(dead_code)]

#[path = "../../../tests/common/broker.rs"]
pub mod broker;

use std::{
    collections::BTreeMap,
    fs,
    path::PathBuf,
    process::{Child, Command, ExitStatus, Output, Stdio},
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};
use chrono::{DateTime, Utc};
use diesel::sql_types::{BigInt, Bytea, Nullable, Text, Timestamptz, Uuid as SqlUuid};
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use rumqttc::{AsyncClient, Event, MqttOptions, Packet, QoS};
use serde_json::Value;
use uuid::Uuid;

use super::common::{self, TestDb};
use broker::Mosquitto;

/// How often conditions are re-checked.
const POLL: Duration = Duration::from_millis(100);

pub use super::common::monitor_toml;

/// Frames a monitor needs before it scores (training plus calibration).
pub const WARMUP_FRAMES: u64 = 40;

/// One test's world: database, broker, scratch directory.
pub struct Harness {
    pub db: TestDb,
    pub broker: Mosquitto,
    pub dir: tempfile::TempDir,
}

impl Harness {
    pub async fn new(tag: &str) -> Self {
        Self::on_server(&common::server_url(), tag).await
    }

    /// A harness whose database lives on `server` (e.g. a private cluster
    /// the test stops and restarts).
    pub async fn on_server(server: &str, tag: &str) -> Self {
        let db = common::migrated_database_on(server, tag).await;
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
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_radar"));
        cmd.env("DATABASE_URL", &self.db.url)
            .env("RADAR_CONFIG_FILE", "/dev/null")
            .env("RADAR_MQTT_URL", self.broker.url())
            .env_remove("RADAR_ENV")
            .env_remove("RADAR_CHECKPOINT_SECRET")
            .env_remove("RUST_LOG");
        cmd
    }

    /// Runs a short `radar` command to completion.
    pub fn radar(&self, args: &[&str]) -> Output {
        self.command().args(args).output().expect("run radar")
    }

    /// Creates a monitor through the CLI; returns its id and topic prefix.
    pub fn create_monitor(&self, name: &str) -> (Uuid, String) {
        self.create_monitor_edited(name, |toml| toml)
    }

    /// Like [`Harness::create_monitor`], with the monitor file's text
    /// (from [`monitor_toml`]) passed through `edit` first.
    pub fn create_monitor_edited(
        &self,
        name: &str,
        edit: impl FnOnce(String) -> String,
    ) -> (Uuid, String) {
        let prefix = broker::unique_prefix();
        let path = self.dir.path().join(format!("{name}.toml"));
        fs::write(&path, edit(monitor_toml(name, &prefix))).expect("write monitor file");
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
        let pool = radar::store::connect(&self.db.url, 2, common::STATEMENT_TIMEOUT)
            .await
            .expect("pool");
        let services = radar::store::Services::new(pool);
        let mut out = Vec::with_capacity(count);
        for i in 0..count {
            let prefix = broker::unique_prefix();
            let config = radar::config::MonitorConfig::from_toml(&monitor_toml(
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
        let log = self
            .dir
            .path()
            .join(format!("{worker_id}-{}.log", Uuid::new_v4().simple()));
        let file = fs::File::create(&log).expect("worker log");
        let port = broker::free_port().expect("free port");
        let mut cmd = self.command();
        cmd.arg("worker")
            .args(args)
            .env("RADAR_WORKER_ID", worker_id)
            .env("RADAR_METRICS_ADDR", format!("127.0.0.1:{port}"))
            .env("RADAR_CHECKPOINT_INTERVAL", "10")
            .env("RADAR_CHECKPOINT_MAX_INTERVAL_SECONDS", "1")
            .env("RADAR_CHECKPOINT_TIMEOUT_SECONDS", "5")
            .env("RUST_LOG", "info");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .expect("spawn radar worker");
        Worker {
            child: Some(child),
            log,
            id: worker_id.to_string(),
            metrics_port: port,
        }
    }

    /// `radar status --json`.
    pub fn status(&self) -> Vec<Value> {
        let out = self.radar(&["status", "--json"]);
        assert!(
            out.status.success(),
            "radar status failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let rows: Value = serde_json::from_slice(&out.stdout).expect("status JSON");
        rows.as_array().cloned().unwrap_or_default()
    }

    /// One monitor's status object.
    pub fn status_of(&self, id: Uuid) -> Value {
        self.status()
            .into_iter()
            .find(|row| row["monitor_id"] == id.to_string())
            .unwrap_or(Value::Null)
    }

    /// Waits until the monitor's status satisfies `condition`; returns it.
    pub async fn wait_status(
        &self,
        id: Uuid,
        within: Duration,
        what: &str,
        condition: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = Instant::now() + within;
        loop {
            let row = self.status_of(id);
            if condition(&row) {
                return row;
            }
            if Instant::now() > deadline {
                panic!("timed out after {within:?} waiting until {what}; last status: {row:#}");
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// `radar snapshot inspect ID --json` and its exit code.
    pub fn inspect(&self, id: Uuid) -> (Value, Option<i32>) {
        let out = self.radar(&["snapshot", "inspect", &id.to_string(), "--json"]);
        let value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        (value, out.status.code())
    }

    pub async fn connect(&self) -> AsyncPgConnection {
        common::connect(&self.db).await
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
        let deadline = Instant::now() + within;
        loop {
            let inspection = self.inspect_run(run);
            if condition(&inspection) {
                return inspection;
            }
            if Instant::now() > deadline {
                panic!("timed out after {within:?} waiting until {what}; last: {inspection:#}");
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

/// A graph run and the monitor that executes it.
#[derive(Debug, Clone, Copy)]
pub struct GraphRunIds {
    pub run: Uuid,
    pub service: Uuid,
}

/// A running `radar worker`.
pub struct Worker {
    child: Option<Child>,
    pub log: PathBuf,
    pub id: String,
    /// Where its `/metrics` and `/readyz` listen.
    pub metrics_port: u16,
}

impl Worker {
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(Child::id).expect("worker running")
    }

    /// SIGKILL: no last snapshot, no goodbye.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().expect("kill -9");
            child.wait().expect("reap");
        }
    }

    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([&format!("-{signal}"), &self.pid().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{signal} failed");
    }

    /// Waits for the process to exit.
    pub async fn wait_exit(&mut self, within: Duration) -> ExitStatus {
        let deadline = Instant::now() + within;
        let child = self.child.as_mut().expect("worker running");
        loop {
            if let Some(status) = child.try_wait().expect("try_wait") {
                self.child = None;
                return status;
            }
            if Instant::now() > deadline {
                panic!(
                    "worker {} did not exit within {within:?}; log:\n{}",
                    self.id,
                    self.log()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Whether the process is still running.
    pub fn running(&mut self) -> bool {
        match self.child.as_mut() {
            Some(child) => child.try_wait().expect("try_wait").is_none(),
            None => false,
        }
    }

    pub fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// How often the log contains `text`.
    pub fn log_count(&self, text: &str) -> usize {
        self.log().matches(text).count()
    }

    /// Waits until the log contains `text`.
    pub async fn wait_log(&self, text: &str, within: Duration) {
        let deadline = Instant::now() + within;
        while !self.log().contains(text) {
            if Instant::now() > deadline {
                panic!(
                    "worker {} never logged {text:?} within {within:?}; log:\n{}",
                    self.id,
                    self.log()
                );
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Resident set size from /proc, in KiB.
    pub fn rss_kib(&self) -> u64 {
        let status = fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A long-lived QoS 1 publisher that sends complete frames: one value per
/// reading, all at the same source time, source times strictly increasing.
pub struct Publisher {
    client: AsyncClient,
    acked: Arc<AtomicU64>,
    published: u64,
    last_ts_ms: i64,
    seq: u64,
    task: tokio::task::JoinHandle<()>,
    /// Added to every value: a large shift makes frames anomalous.
    pub shift: f64,
}

impl Publisher {
    pub async fn connect(port: u16) -> Self {
        let mut options = MqttOptions::new(
            format!("test-frames-{}", Uuid::new_v4().simple()),
            "127.0.0.1",
            port,
        );
        options.set_keep_alive(Duration::from_secs(30));
        options.set_inflight(200);
        let (client, mut eventloop) = AsyncClient::new(options, 1000);
        let acked = Arc::new(AtomicU64::new(0));
        let counter = Arc::clone(&acked);
        let task = tokio::spawn(async move {
            loop {
                match eventloop.poll().await {
                    Ok(Event::Incoming(Packet::PubAck(_))) => {
                        counter.fetch_add(1, Ordering::SeqCst);
                    }
                    Ok(_) => {}
                    Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                }
            }
        });
        Self {
            client,
            acked,
            published: 0,
            last_ts_ms: 0,
            seq: 0,
            task,
            shift: 0.0,
        }
    }

    /// A source time after every one sent so far, close to now.
    fn next_ts(&mut self) -> i64 {
        let now = Utc::now().timestamp_millis();
        self.last_ts_ms = now.max(self.last_ts_ms + 1);
        self.last_ts_ms
    }

    /// Noise around a level, deterministic per frame.
    fn value(&mut self, reading: usize) -> f64 {
        self.seq = self
            .seq
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407 + reading as u64);
        let unit = (self.seq >> 11) as f64 / (1u64 << 53) as f64;
        10.0 * (reading as f64 + 1.0) + unit + if reading == 0 { self.shift } else { 0.0 }
    }

    /// Publishes `n` complete frames to the monitor under `prefix`; returns
    /// the source times used.
    pub async fn frames(&mut self, prefix: &str, n: usize) -> Vec<i64> {
        let mut times = Vec::with_capacity(n);
        for _ in 0..n {
            let ts = self.next_ts();
            for (i, reading) in ["a", "b"].iter().enumerate() {
                let value = self.value(i);
                self.raw(&format!("{prefix}/{reading}"), ts, value, false)
                    .await;
            }
            times.push(ts);
        }
        times
    }

    /// One observation.
    pub async fn raw(&mut self, topic: &str, ts_ms: i64, value: f64, retain: bool) {
        let body = format!(r#"{{"ts": {ts_ms}, "value": {value}}}"#);
        self.client
            .publish(topic, QoS::AtLeastOnce, retain, body.into_bytes())
            .await
            .expect("queue a publish");
        self.published += 1;
    }

    /// Waits until the broker acknowledged everything published.
    pub async fn flush(&self, within: Duration) {
        let deadline = Instant::now() + within;
        while AtomicU64::load(&self.acked, Ordering::SeqCst) < self.published {
            if Instant::now() > deadline {
                panic!(
                    "the broker acknowledged {} of {} publishes within {within:?}",
                    AtomicU64::load(&self.acked, Ordering::SeqCst),
                    self.published
                );
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The snapshot row's readable columns.
#[derive(Debug, Clone, PartialEq, diesel::QueryableByName)]
pub struct SnapshotRow {
    #[diesel(sql_type = BigInt)]
    pub processed_count: i64,
    #[diesel(sql_type = Bytea)]
    pub signature: Vec<u8>,
    #[diesel(sql_type = Text)]
    pub writer_id: String,
    #[diesel(sql_type = Timestamptz)]
    pub committed_at: DateTime<Utc>,
    #[diesel(sql_type = Timestamptz)]
    pub saved_at: DateTime<Utc>,
}

pub async fn snapshot_row(conn: &mut AsyncPgConnection, id: Uuid) -> Option<SnapshotRow> {
    diesel::sql_query(
        "SELECT processed_count, signature, writer_id, committed_at, saved_at \
         FROM radar_runtime_checkpoints WHERE service_id = $1",
    )
    .bind::<SqlUuid, _>(id)
    .get_result(conn)
    .await
    .ok()
}

/// Waits until the committed snapshot satisfies `condition`.
pub async fn wait_snapshot(
    conn: &mut AsyncPgConnection,
    id: Uuid,
    within: Duration,
    what: &str,
    condition: impl Fn(&SnapshotRow) -> bool,
) -> SnapshotRow {
    let deadline = Instant::now() + within;
    loop {
        let row = snapshot_row(conn, id).await;
        if let Some(row) = row.as_ref().filter(|r| condition(r)) {
            return row.clone();
        }
        if Instant::now() > deadline {
            panic!("timed out after {within:?} waiting until {what}; last row: {row:?}");
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Waits until no other session is connected to the test database: after
/// a kill, PostgreSQL may still be finishing a commit the dead worker sent,
/// so the committed state is only final once its sessions are gone.
pub async fn wait_for_no_other_sessions(conn: &mut AsyncPgConnection, within: Duration) {
    #[derive(diesel::QueryableByName)]
    struct Count {
        #[diesel(sql_type = BigInt)]
        n: i64,
    }
    let deadline = Instant::now() + within;
    loop {
        let count: Count = diesel::sql_query(
            "SELECT count(*) AS n FROM pg_stat_activity \
             WHERE datname = current_database() AND pid <> pg_backend_pid()",
        )
        .get_result(conn)
        .await
        .expect("read pg_stat_activity");
        if count.n == 0 {
            return;
        }
        if Instant::now() > deadline {
            panic!(
                "{} other sessions still connected after {within:?}",
                count.n
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Installs triggers that log every write to the snapshot, alarm and
/// evidence tables with the wall time of the write, so a test can order
/// the writes of two workers after the fact.
pub async fn install_write_audit(conn: &mut AsyncPgConnection) {
    for statement in [
        "CREATE TABLE test_write_audit (
            seq bigserial PRIMARY KEY,
            tbl text NOT NULL,
            service_id uuid NOT NULL,
            signature bytea NOT NULL,
            writer_id text,
            processed_count bigint,
            at timestamptz NOT NULL DEFAULT clock_timestamp())",
        "CREATE FUNCTION test_audit_checkpoint() RETURNS trigger AS $$
         BEGIN
           INSERT INTO test_write_audit (tbl, service_id, signature, writer_id, processed_count)
           VALUES ('checkpoint', NEW.service_id, NEW.signature, NEW.writer_id, NEW.processed_count);
           RETURN NEW;
         END $$ LANGUAGE plpgsql",
        "CREATE FUNCTION test_audit_result() RETURNS trigger AS $$
         BEGIN
           INSERT INTO test_write_audit (tbl, service_id, signature)
           VALUES (TG_TABLE_NAME, NEW.service_id, NEW.writer_signature);
           RETURN NEW;
         END $$ LANGUAGE plpgsql",
        "CREATE TRIGGER audit AFTER INSERT OR UPDATE ON radar_runtime_checkpoints
         FOR EACH ROW EXECUTE FUNCTION test_audit_checkpoint()",
        "CREATE TRIGGER audit AFTER INSERT OR UPDATE ON radar_alarms
         FOR EACH ROW EXECUTE FUNCTION test_audit_result()",
        "CREATE TRIGGER audit AFTER INSERT OR UPDATE ON radar_evidence
         FOR EACH ROW EXECUTE FUNCTION test_audit_result()",
    ] {
        diesel::sql_query(statement)
            .execute(conn)
            .await
            .expect("install the write audit");
    }
}

/// One audited write.
#[derive(Debug, Clone, diesel::QueryableByName)]
pub struct AuditRow {
    #[diesel(sql_type = BigInt)]
    pub seq: i64,
    #[diesel(sql_type = Text)]
    pub tbl: String,
    #[diesel(sql_type = Bytea)]
    pub signature: Vec<u8>,
    #[diesel(sql_type = Nullable<Text>)]
    pub writer_id: Option<String>,
    #[diesel(sql_type = Nullable<BigInt>)]
    pub processed_count: Option<i64>,
    #[diesel(sql_type = Timestamptz)]
    pub at: DateTime<Utc>,
}

pub async fn audit(conn: &mut AsyncPgConnection) -> Vec<AuditRow> {
    diesel::sql_query(
        "SELECT seq, tbl, signature, writer_id, processed_count, at FROM test_write_audit ORDER BY seq",
    )
    .load(conn)
    .await
    .expect("read the write audit")
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

/// Opens a plain connection to a database URL.
pub async fn connect_url(url: &str) -> Result<AsyncPgConnection> {
    AsyncPgConnection::establish(url).await.context("connect")
}

/// Fails with `what` unless `condition` holds within `within`.
pub async fn wait_until(
    within: Duration,
    what: &str,
    mut condition: impl FnMut() -> bool,
) -> Result<()> {
    let deadline = Instant::now() + within;
    while !condition() {
        if Instant::now() > deadline {
            bail!("timed out after {within:?} waiting until {what}");
        }
        tokio::time::sleep(POLL).await;
    }
    Ok(())
}

/// Holds one row `FOR UPDATE` in a transaction on a connection of its own
/// (`table`'s row of monitor `id`), until that connection ends the
/// transaction: writes that need the row wait meanwhile.
pub async fn lock_row(h: &Harness, table: &str, id: Uuid) -> AsyncPgConnection {
    let mut blocker = h.connect().await;
    diesel::sql_query("BEGIN")
        .execute(&mut blocker)
        .await
        .expect("begin");
    diesel::sql_query(format!(
        "SELECT 1 FROM {table} WHERE service_id = $1 FOR UPDATE"
    ))
    .bind::<SqlUuid, _>(id)
    .execute(&mut blocker)
    .await
    .expect("lock the row");
    blocker
}

/// Holds the monitor's snapshot row `FOR UPDATE` (see [`lock_row`]).
pub async fn lock_snapshot_row(h: &Harness, id: Uuid) -> AsyncPgConnection {
    lock_row(h, "radar_runtime_checkpoints", id).await
}

/// Waits until some session of the test database waits for a row lock.
pub async fn wait_for_lock_waiter(conn: &mut AsyncPgConnection, within: Duration) {
    #[derive(diesel::QueryableByName)]
    struct Count {
        #[diesel(sql_type = BigInt)]
        n: i64,
    }
    let deadline = Instant::now() + within;
    loop {
        let count: Count = diesel::sql_query(
            "SELECT count(*) AS n FROM pg_stat_activity \
             WHERE datname = current_database() AND wait_event_type = 'Lock'",
        )
        .get_result(conn)
        .await
        .expect("read pg_stat_activity");
        if count.n > 0 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no session waited for a lock within {within:?}"
        );
        tokio::time::sleep(POLL).await;
    }
}
