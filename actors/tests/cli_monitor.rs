//! The `radar` binary's migrate and monitor commands against real PostgreSQL.

use std::process::Output;

use radar_testkit::{db, worker::radar_command};

const PUMP: &str = include_str!("../../config/monitors/pump.toml");

fn radar(db: &db::TestDb, args: &[&str]) -> Output {
    radar_command(&db.url)
        .args(args)
        .output()
        .expect("run radar")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn write_monitor(dir: &tempfile::TempDir, name: &str, text: &str) -> String {
    let path = dir.path().join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

#[tokio::test]
async fn the_monitor_lifecycle_works_end_to_end_through_the_binary() {
    let db = db::empty_database("cli_lifecycle").await;
    let out = radar(&db, &["migrate"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("Applied 5 migration"));
    let out = radar(&db, &["migrate"]);
    assert!(stdout(&out).contains("up to date"), "{}", stdout(&out));

    let dir = tempfile::tempdir().unwrap();
    let file = write_monitor(&dir, "pump.toml", PUMP);
    let out = radar(&db, &["monitor", "create", "--config", &file]);
    assert!(out.status.success(), "{}", stderr(&out));
    let id = stdout(&out).trim().to_string();
    assert_eq!(id.len(), 36, "prints the new id: {id}");

    let out = radar(&db, &["monitor", "list", "--json"]);
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(rows[0]["id"], id.as_str());
    assert_eq!(rows[0]["name"], "pump-7");
    assert!(stdout(&radar(&db, &["monitor", "list"])).contains("pump-7"));

    let out = radar(&db, &["monitor", "show", &id, "--json"]);
    let row: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(row["config"]["readings"].as_array().unwrap().len(), 5);
    assert!(stdout(&radar(&db, &["monitor", "show", &id])).contains("plant/hall-b/pump-7/flow"));

    assert!(radar(&db, &["monitor", "retire", &id]).status.success());
    let listed: serde_json::Value =
        serde_json::from_slice(&radar(&db, &["monitor", "list", "--json"]).stdout).unwrap();
    assert_eq!(
        listed.as_array().unwrap().len(),
        0,
        "retired monitors are hidden"
    );
    let all: serde_json::Value =
        serde_json::from_slice(&radar(&db, &["monitor", "list", "--all", "--json"]).stdout)
            .unwrap();
    assert!(all[0]["retired_at"].is_string());

    let refused = radar(&db, &["monitor", "delete", &id]);
    assert!(!refused.status.success());
    assert!(stderr(&refused).contains("--yes"));
    assert!(
        radar(&db, &["monitor", "delete", &id, "--yes"])
            .status
            .success()
    );
    let gone = radar(&db, &["monitor", "show", &id]);
    assert!(!gone.status.success());
    assert!(
        stderr(&gone).contains("no monitor with id"),
        "{}",
        stderr(&gone)
    );
}

#[tokio::test]
async fn invalid_monitor_files_are_rejected_naming_the_field() {
    let db = db::migrated_database("cli_invalid").await;
    let dir = tempfile::tempdir().unwrap();
    let cases: &[(&str, &str, &str)] = &[
        ("name = \"pump-7\"", "name = \"\"", "name"),
        ("name = \"pressure\"", "name = \"flow\"", "readings[1].name"),
        (
            "topic = \"plant/hall-b/pump-7/flow\"",
            "topic = \"plant/hall-b/pump-7/pressure\"",
            "readings[1].topic",
        ),
        (
            "topic = \"plant/hall-b/pump-7/flow\"",
            "topic = \"plant/+/flow\"",
            "readings[1].topic",
        ),
        (
            "topic = \"plant/hall-b/pump-7/flow\"",
            "topic = \"plant/#\"",
            "readings[1].topic",
        ),
        (
            "freshness_ms = 5000",
            "freshness_ms = 0",
            "alignment.freshness_ms",
        ),
        (
            "max_age_ms = 30000",
            "max_age_ms = 0",
            "alignment.max_age_ms",
        ),
        (
            "training_frames = 600",
            "training_frames = 2",
            "detector.training_frames",
        ),
        (
            "calibration_frames = 300",
            "calibration_frames = 10",
            "detector.calibration_frames",
        ),
        (
            "false_alarm_rate = 0.01",
            "false_alarm_rate = 2.0",
            "detector.false_alarm_rate",
        ),
        ("open_k = 3", "open_k = 9", "detector.alarm.open_k"),
        ("close_m = 10", "close_m = 0", "detector.alarm.close_m"),
        ("freshness_ms = 5000", "freshness_ms = -1", "line "),
        ("open_n = 5", "open_n = 0", "detector.alarm.open_n"),
        (
            "false_alarm_rate = 0.01",
            "false_alarm_rate = 0.01\nfalse_alarm = 0.2",
            "false_alarm",
        ),
    ];
    for (i, (find, replace, field)) in cases.iter().enumerate() {
        assert!(PUMP.contains(find), "{find}");
        let file = write_monitor(
            &dir,
            &format!("bad{i}.toml"),
            &PUMP.replacen(find, replace, 1),
        );
        let out = radar(&db, &["monitor", "create", "--config", &file]);
        assert!(!out.status.success(), "case {i} ({replace}) was accepted");
        assert!(
            stderr(&out).contains(field),
            "case {i}: {field:?} not named in {:?}",
            stderr(&out)
        );
    }
    let rows: serde_json::Value =
        serde_json::from_slice(&radar(&db, &["monitor", "list", "--all", "--json"]).stdout)
            .unwrap();
    assert_eq!(
        rows.as_array().unwrap().len(),
        0,
        "nothing invalid was stored"
    );
}

#[tokio::test]
async fn migrate_refuses_a_database_migrated_by_a_newer_binary() {
    let db = db::migrated_database("cli_newer").await;
    db::mark_migrated_by_newer_binary(&db).await;
    for args in [&["migrate"][..], &["monitor", "list"][..]] {
        let out = radar(&db, args);
        assert!(!out.status.success(), "{args:?} ran against a newer schema");
        assert!(stderr(&out).contains("29991231000000"), "{}", stderr(&out));
        assert!(stderr(&out).contains("newer radar"), "{}", stderr(&out));
    }
}

#[tokio::test]
async fn monitor_commands_ask_for_migrate_on_an_unmigrated_database() {
    let db = db::empty_database("cli_behind").await;
    let out = radar(&db, &["monitor", "list"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("radar migrate"), "{}", stderr(&out));
}
