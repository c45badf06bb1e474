//! A snapshot written by a real worker, inspected through the binary, then
//! tampered with in SQL; and a worker refusing a database it does not know.

use std::{
    process::{Child, Command, Output, Stdio},
    time::Duration,
};

use diesel::sql_types::BigInt;
use diesel_async::RunQueryDsl;
use radar_testkit::{db, monitor, poll, worker::radar_command};

fn radar(db: &db::TestDb) -> Command {
    radar_command(&db.url)
}

fn run(db: &db::TestDb, args: &[&str]) -> Output {
    radar(db).args(args).output().expect("run radar")
}

fn spawn_worker(db: &db::TestDb, id: &str) -> Child {
    radar(db)
        .args(["worker", "--monitor", id])
        .env(
            "RADAR_METRICS_ADDR",
            format!("127.0.0.1:{}", radar_testkit::http::free_port()),
        )
        .env("RADAR_WORKER_ID", "inspect-test")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn worker")
}

#[derive(diesel::QueryableByName)]
struct Count {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

#[tokio::test]
async fn inspect_verifies_a_worker_snapshot_and_names_the_reason_once_tampered() {
    let db = db::migrated_database("cli_inspect").await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("m.toml");
    std::fs::write(
        &file,
        monitor::one_reading("inspect-me", "radar-test/inspect/a"),
    )
    .unwrap();
    let out = run(
        &db,
        &["monitor", "create", "--config", file.to_str().unwrap()],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id = String::from_utf8(out.stdout).unwrap().trim().to_string();

    // The worker commits a snapshot before it subscribes.
    let mut worker = spawn_worker(&db, &id);
    let mut conn = db::connect(&db).await;
    poll::within(Duration::from_secs(60))
        .wait_async("the worker commits a snapshot", async || {
            let n = diesel::sql_query("SELECT count(*) AS n FROM radar_runtime_checkpoints")
                .get_result::<Count>(&mut conn)
                .await
                .unwrap()
                .n;
            assert!(worker.try_wait().unwrap().is_none(), "worker exited early");
            poll::check(n == 1, || format!("{n} snapshot rows"))
        })
        .await;
    assert!(
        Command::new("kill")
            .args(["-TERM", &worker.id().to_string()])
            .status()
            .unwrap()
            .success()
    );
    let status = worker.wait().unwrap();
    assert!(status.success(), "worker exit status {status}");

    let out = run(&db, &["snapshot", "inspect", &id, "--json"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["verified"], true);
    assert_eq!(json["compatible"], true);
    assert!(json["reason"].is_null());

    // Flip one bit of the payload in SQL: the digest no longer matches.
    diesel::sql_query(
        "UPDATE radar_runtime_checkpoints \
         SET payload = set_byte(payload, 3, get_byte(payload, 3) # 1)",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    let out = run(&db, &["snapshot", "inspect", &id, "--json"]);
    assert_eq!(out.status.code(), Some(2));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["verified"], false);
    let reason = json["reason"].as_str().unwrap_or_default().to_string();
    assert!(!reason.is_empty(), "the reason is named");
    let text = run(&db, &["snapshot", "inspect", &id]);
    assert_eq!(text.status.code(), Some(2));

    // A worker refuses to start the monitor from that row, and says why.
    let out = radar(&db)
        .args(["worker", "--monitor", &id])
        .env(
            "RADAR_METRICS_ADDR",
            format!("127.0.0.1:{}", radar_testkit::http::free_port()),
        )
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "startup failure exits 2");
    let status = run(&db, &["status", "--json"]);
    let rows: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(rows[0]["state"], "startup_failed");
    assert!(
        rows[0]["last_error"]
            .as_str()
            .unwrap_or_default()
            .contains("corrupted")
    );
}

#[tokio::test]
async fn the_worker_refuses_a_database_migrated_by_a_newer_binary() {
    let db = db::migrated_database("worker_newer").await;
    db::mark_migrated_by_newer_binary(&db).await;
    let out = radar(&db)
        .arg("worker")
        .env(
            "RADAR_METRICS_ADDR",
            format!("127.0.0.1:{}", radar_testkit::http::free_port()),
        )
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("newer radar") && stderr.contains("29991231000000"),
        "{stderr}"
    );
}
