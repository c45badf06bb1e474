//! A broker that requires a user name and password (Mosquitto with
//! `allow_anonymous false` and a password file): the worker logs in with
//! `RADAR_MQTT_USERNAME` + `RADAR_MQTT_PASSWORD_FILE`; a wrong password or
//! none keeps the monitor disconnected with a reason saying so; no output of
//! any of these runs contains a password.

use std::{fs, os::unix::fs::PermissionsExt, path::Path, time::Duration};

use radar_testkit::{
    broker::Mosquitto, db, telemetry::create_monitor, telemetry::radar, telemetry::wait_for,
    worker::Worker,
};

const RIGHT: &str = "right-Pw-7f3a9c";
const WRONG: &str = "wrong-Pw-51d0e2";

/// Writes a file the broker (which drops to the `mosquitto` user) can read.
fn readable(dir: &Path, name: &str, contents: &str) -> String {
    let path = dir.join(name);
    fs::write(&path, contents).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
    path.display().to_string()
}

#[tokio::test]
async fn a_password_protected_broker_admits_the_right_login_and_names_a_refused_one() {
    let db = db::migrated_database("mqtt_credentials").await;
    let dir = tempfile::tempdir().unwrap();
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    // One monitor per worker, so no worker waits for another's claim.
    let ids: Vec<String> = ["good", "refused", "anonymous"]
        .iter()
        .map(|name| {
            let topic = format!("{}/a", db::unique_name("creds"));
            create_monitor(&db, dir.path(), name, &topic)
        })
        .collect();

    let passwd = readable(dir.path(), "passwd", "");
    let made = std::process::Command::new("mosquitto_passwd")
        .args(["-b", &passwd, "radar", RIGHT])
        .status()
        .expect("run mosquitto_passwd");
    assert!(made.success());
    fs::set_permissions(&passwd, fs::Permissions::from_mode(0o644)).unwrap();
    let broker = Mosquitto::start_with(&format!("allow_anonymous false\npassword_file {passwd}\n"));
    let right = readable(dir.path(), "right", &format!("{RIGHT}\n"));
    let wrong = readable(dir.path(), "wrong", WRONG);
    let key = readable(dir.path(), "key", &"k".repeat(48));

    // Production: the password and the checkpoint key come from files.
    let good = Worker::spawn(
        &db,
        &broker,
        dir.path(),
        &[&ids[0]],
        &[
            ("RADAR_ENV", "production"),
            ("RADAR_CHECKPOINT_SECRET_FILE", &key),
            ("RADAR_MQTT_USERNAME", "radar"),
            ("RADAR_MQTT_PASSWORD_FILE", &right),
        ],
    );
    wait_for(Duration::from_secs(30), "/readyz answers 200", || {
        good.get("/readyz").filter(|(c, _)| *c == 200)
    });
    let good_log = good.stderr();
    drop(good);

    let refused = Worker::spawn(
        &db,
        &broker,
        dir.path(),
        &[&ids[1]],
        &[
            ("RADAR_LOG_FORMAT", "json"),
            ("RADAR_MQTT_USERNAME", "radar"),
            ("RADAR_MQTT_PASSWORD_FILE", &wrong),
        ],
    );
    let detail = refused.not_ready_detail();
    assert!(
        detail.contains("refused the credentials radar sent"),
        "{detail}"
    );
    let readyz = refused.get("/readyz").map(|(_, b)| b).unwrap_or_default();
    let refused_log = refused.stderr();
    drop(refused);

    let anonymous = Worker::spawn(&db, &broker, dir.path(), &[&ids[2]], &[]);
    let detail = anonymous.not_ready_detail();
    assert!(detail.contains("radar sent none"), "{detail}");
    assert!(detail.contains("RADAR_MQTT_USERNAME"), "{detail}");
    drop(anonymous);

    // The usual URL form with user info is refused at startup, naming the
    // variables to use instead and repeating no part of the password.
    let url = format!("mqtt://radar:{RIGHT}@127.0.0.1:{}", broker.port);
    let out = radar(&db)
        .args(["worker", "--monitor", &ids[2]])
        .env("RADAR_MQTT_URL", &url)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let url_stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(
        url_stderr.contains("RADAR_MQTT_PASSWORD_FILE"),
        "{url_stderr}"
    );

    // Production refuses an inline password, without printing it.
    let out = radar(&db)
        .args(["worker", "--monitor", &ids[2]])
        .env("RADAR_ENV", "production")
        .env("RADAR_CHECKPOINT_SECRET_FILE", &key)
        .env("RADAR_MQTT_USERNAME", "radar")
        .env("RADAR_MQTT_PASSWORD", RIGHT)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let inline_stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(
        inline_stderr.contains("RADAR_MQTT_PASSWORD"),
        "{inline_stderr}"
    );

    // A misspelt variable is reported by name only.
    let out = radar(&db)
        .args(["status"])
        .env("RADAR_MQTT_PASWORD", WRONG)
        .output()
        .unwrap();
    let typo_stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(typo_stderr.contains("RADAR_MQTT_PASWORD"), "{typo_stderr}");

    for (what, text) in [
        ("production worker log", &good_log),
        ("refused worker log", &refused_log),
        ("/readyz", &readyz),
        ("user-info URL", &url_stderr),
        ("inline password", &inline_stderr),
        ("misspelt variable", &typo_stderr),
    ] {
        for secret in [RIGHT, WRONG, "Pw-"] {
            assert!(!text.contains(secret), "{what} shows a password:\n{text}");
        }
    }
}

#[tokio::test]
async fn the_cli_and_the_worker_read_the_database_url_from_its_file() {
    let db = db::migrated_database("db_url_file").await;
    let dir = tempfile::tempdir().unwrap();
    let topic = format!("{}/a", db::unique_name("dburl"));
    let id = create_monitor(&db, dir.path(), "url-file", &topic);
    let file = readable(dir.path(), "url", &format!("{}\n", db.url));
    // DATABASE_URL names a database that does not exist: only the file works.
    let wrong = "postgres://postgres@127.0.0.1:5432/radar_no_such_database";
    let out = radar(&db)
        .args(["status", "--json"])
        .env("DATABASE_URL", wrong)
        .env("RADAR_DATABASE_URL_FILE", &file)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains(&id), "{stdout}");
    let broker = Mosquitto::start_anonymous();
    let worker = Worker::spawn(
        &db,
        &broker,
        dir.path(),
        &[&id],
        &[("DATABASE_URL", wrong), ("RADAR_DATABASE_URL_FILE", &file)],
    );
    wait_for(Duration::from_secs(30), "/readyz answers 200", || {
        worker.get("/readyz").filter(|(c, _)| *c == 200)
    });
    let missing = radar(&db)
        .args(["status"])
        .env("RADAR_DATABASE_URL_FILE", "/nonexistent/radar_database_url")
        .output()
        .unwrap();
    assert!(!missing.status.success());
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert!(
        stderr.contains("/nonexistent/radar_database_url"),
        "{stderr}"
    );
}
