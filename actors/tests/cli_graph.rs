//! The `radar graph` commands through the binary against real PostgreSQL.

use std::process::Output;

use radar_testkit::{db, graph::field, worker::radar_command};

const EXAMPLE: &str = include_str!("../../config/graphs/pump-7.json");

fn radar(db: &db::TestDb, args: &[&str]) -> Output {
    radar_command(&db.url)
        .args(args)
        .output()
        .expect("run radar")
}

fn ok(out: Output) -> String {
    assert!(
        out.status.success(),
        "radar failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn write(dir: &tempfile::TempDir, name: &str, edit: impl FnOnce(&mut serde_json::Value)) -> String {
    let mut value: serde_json::Value = serde_json::from_str(EXAMPLE).unwrap();
    edit(&mut value);
    let path = dir.path().join(name);
    std::fs::write(&path, serde_json::to_string_pretty(&value).unwrap()).unwrap();
    path.display().to_string()
}

fn node<'a>(value: &'a mut serde_json::Value, id: &str) -> &'a mut serde_json::Value {
    value["nodes"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|n| n["id"] == id)
        .unwrap()
}

#[tokio::test]
async fn publish_dry_run_activate_runs_inspect_and_stop_work_through_the_binary() {
    let db = db::migrated_database("cli_graph").await;
    ok(radar(&db, &["graph", "authoring", "enable"]));
    let dir = tempfile::tempdir().unwrap();
    let base = write(&dir, "base.json", |_| {});
    let out = ok(radar(&db, &["graph", "publish", "--file", &base]));
    assert!(out.contains("revision 1"), "{out}");
    let hash = field(&out, "semantics hash");
    assert_eq!(hash.len(), 64);

    let moved = write(&dir, "moved.json", |v| {
        node(v, "worst")["layout"]["x"] = 812.into()
    });
    let out = ok(radar(
        &db,
        &["graph", "publish", "--dry-run", "--file", &moved],
    ));
    assert!(
        out.contains("layout-only") && out.contains("checkpoints stay valid"),
        "{out}"
    );
    let changed = write(&dir, "changed.json", |v| {
        node(v, "temperature_ewma")["params"]["alpha"] = 0.5.into()
    });
    let out = ok(radar(
        &db,
        &["graph", "publish", "--dry-run", "--file", &changed],
    ));
    assert!(
        out.contains("semantic change") && out.contains("fresh calibration"),
        "{out}"
    );
    assert!(out.contains("node temperature_ewma changed"), "{out}");
    assert!(
        !out.contains("node pump "),
        "only changed nodes are listed: {out}"
    );
    let runs: serde_json::Value =
        serde_json::from_str(&ok(radar(&db, &["graph", "runs", "--json"]))).unwrap();
    assert_eq!(
        runs.as_array().unwrap().len(),
        0,
        "a dry run publishes nothing"
    );

    let out = ok(radar(&db, &["graph", "publish", "--file", &moved]));
    assert!(
        out.contains("revision 2") && field(&out, "semantics hash") == hash,
        "{out}"
    );

    let out = ok(radar(
        &db,
        &["graph", "activate", "pump-7-graph", "--revision", "1"],
    ));
    let run = field(&out, "run");
    let service = field(&out, "service");
    let out = ok(radar(
        &db,
        &["graph", "activate", "pump-7-graph", "--revision", "1"],
    ));
    assert_ne!(field(&out, "run"), run, "re-activation is a new run");
    assert_ne!(field(&out, "service"), service, "on a new monitor");

    let runs: serde_json::Value =
        serde_json::from_str(&ok(radar(&db, &["graph", "runs", "--json"]))).unwrap();
    assert_eq!(runs.as_array().unwrap().len(), 2);
    assert!(ok(radar(&db, &["graph", "runs"])).contains(&run));

    let inspected: serde_json::Value =
        serde_json::from_str(&ok(radar(&db, &["graph", "inspect", &run, "--json"]))).unwrap();
    assert_eq!(inspected["run"]["status"], "starting");
    assert_eq!(inspected["semantics_hash"], hash.as_str());
    assert!(ok(radar(&db, &["graph", "inspect", &run])).contains("last snapshot:   none"));

    assert!(ok(radar(&db, &["graph", "stop", &run])).contains("stopped"));
    let inspected: serde_json::Value =
        serde_json::from_str(&ok(radar(&db, &["graph", "inspect", &run, "--json"]))).unwrap();
    assert_eq!(inspected["run"]["status"], "stopped");
    let monitors: serde_json::Value =
        serde_json::from_str(&ok(radar(&db, &["monitor", "list", "--all", "--json"]))).unwrap();
    let stopped = monitors
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["id"] == service.as_str())
        .unwrap();
    assert!(
        stopped["retired_at"].is_string(),
        "a stopped run's monitor is retired"
    );
}

#[tokio::test]
async fn with_authoring_off_publish_and_activate_are_refused_but_runs_inspect_and_stop_work() {
    let db = db::migrated_database("cli_graph_authoring").await;
    let dir = tempfile::tempdir().unwrap();
    let base = write(&dir, "base.json", |_| {});
    let out = radar(&db, &["graph", "publish", "--file", &base]);
    assert!(
        !out.status.success(),
        "a new database starts with authoring off"
    );
    assert!(
        stderr(&out).contains("radar graph authoring enable"),
        "{}",
        stderr(&out)
    );
    let status = ok(radar(&db, &["graph", "authoring", "status"]));
    assert!(status.contains("authoring:       disabled"), "{status}");
    assert!(status.contains("live workers:    none"), "{status}");

    let enabled = ok(radar(&db, &["graph", "authoring", "enable"]));
    assert!(enabled.contains("Graph authoring is enabled"), "{enabled}");
    ok(radar(&db, &["graph", "publish", "--file", &base]));
    let run = field(
        &ok(radar(
            &db,
            &["graph", "activate", "pump-7-graph", "--revision", "1"],
        )),
        "run",
    );
    let disabled = ok(radar(&db, &["graph", "authoring", "disable"]));
    assert!(
        disabled.contains("Graph authoring is disabled"),
        "{disabled}"
    );

    let moved = write(&dir, "moved.json", |v| {
        node(v, "worst")["layout"]["y"] = 7.into()
    });
    for args in [
        &["graph", "publish", "--file", moved.as_str()][..],
        &["graph", "activate", "pump-7-graph", "--revision", "1"][..],
    ] {
        let out = radar(&db, args);
        assert!(!out.status.success(), "{args:?} ran with authoring off");
        assert!(
            stderr(&out).contains("graph authoring is turned off for the fleet"),
            "{}",
            stderr(&out)
        );
    }
    let dry = ok(radar(
        &db,
        &["graph", "publish", "--dry-run", "--file", &moved],
    ));
    assert!(
        dry.contains("layout-only"),
        "a dry run publishes nothing, so it stays allowed: {dry}"
    );
    assert!(ok(radar(&db, &["graph", "runs"])).contains(&run));
    assert!(ok(radar(&db, &["graph", "inspect", &run])).contains("status:          starting"));
    assert!(ok(radar(&db, &["graph", "stop", &run])).contains("stopped"));
    let runs: serde_json::Value =
        serde_json::from_str(&ok(radar(&db, &["graph", "runs", "--json"]))).unwrap();
    assert_eq!(runs.as_array().unwrap().len(), 1, "nothing was activated");
    assert_eq!(runs[0]["revision"], 1, "nothing was published");
}

#[tokio::test]
async fn an_invalid_graph_file_is_refused_naming_the_node() {
    let db = db::migrated_database("cli_graph_invalid").await;
    let dir = tempfile::tempdir().unwrap();
    let bad = write(&dir, "bad.json", |v| {
        node(v, "pressure_avg")["params"]["window"] = 0.into()
    });
    let out = radar(&db, &["graph", "publish", "--file", &bad]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("nodes.pressure_avg.params.window"),
        "{}",
        stderr(&out)
    );
}

#[tokio::test]
async fn graph_commands_refuse_a_database_migrated_by_a_newer_radar() {
    let db = db::migrated_database("cli_graph_newer").await;
    db::mark_migrated_by_newer_binary(&db).await;
    let out = radar(&db, &["graph", "runs"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("newer radar") && stderr(&out).contains("restore procedure"),
        "{}",
        stderr(&out)
    );
}
