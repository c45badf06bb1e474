//! A real broker that refuses a subscription: Mosquitto with its
//! dynamic-security plugin, where radar's client may log in but has no role
//! that allows subscribing. The SUBACK carries 0x80, so the monitor stays
//! disconnected and `/readyz` answers 503 naming the topic.

use std::{fs, os::unix::fs::PermissionsExt, process::Command, time::Duration};

use radar_testkit::{
    broker::Mosquitto, db, exposition::sample, telemetry::create_monitor, telemetry::wait_for,
    worker::Worker,
};

const PLUGIN: &str = "/usr/lib/x86_64-linux-gnu/mosquitto_dynamic_security.so";

fn ctrl(port: u16, args: &[&str]) {
    let out = Command::new("mosquitto_ctrl")
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-u",
            "admin",
            "-P",
            "admin-pw",
        ])
        .args(["dynsec"])
        .args(args)
        .output()
        .expect("run mosquitto_ctrl (package mosquitto-clients)");
    assert!(
        out.status.success(),
        "mosquitto_ctrl {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn a_subscription_refused_by_dynamic_security_keeps_the_monitor_not_ready_naming_the_topic() {
    assert!(
        std::path::Path::new(PLUGIN).exists(),
        "the dynamic-security plugin is not installed at {PLUGIN}"
    );
    let db = db::migrated_database("mqtt_dynsec").await;
    let dir = tempfile::tempdir().unwrap();
    // The plugin rewrites its file next to itself as the mosquitto user.
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o777)).unwrap();
    let topic = format!("{}/a", db::unique_name("dynsec"));
    let id = create_monitor(&db, dir.path(), "dynsec", &topic);
    let config = dir.path().join("dynamic-security.json");
    let made = Command::new("mosquitto_ctrl")
        .args(["dynsec", "init"])
        .arg(&config)
        .args(["admin", "admin-pw"])
        .output()
        .expect("run mosquitto_ctrl");
    assert!(made.status.success(), "{made:?}");
    fs::set_permissions(&config, fs::Permissions::from_mode(0o666)).unwrap();
    let broker = Mosquitto::start_with(&format!(
        "allow_anonymous false\nplugin {PLUGIN}\nplugin_opt_config_file {}\n",
        config.display()
    ));
    // A client that may connect but has no role: subscribing is denied.
    ctrl(broker.port, &["createClient", "radar", "-p", "radar-pw"]);
    let password = dir.path().join("password");
    fs::write(&password, "radar-pw\n").unwrap();
    let password = password.display().to_string();

    let worker = Worker::spawn(
        &db,
        &broker,
        dir.path(),
        &[&id],
        &[
            ("RADAR_MQTT_USERNAME", "radar"),
            ("RADAR_MQTT_PASSWORD_FILE", &password),
        ],
    );
    let body = wait_for(
        Duration::from_secs(30),
        "/readyz answers 503 naming the refused topic",
        || {
            let (code, body) = worker.get("/readyz")?;
            (code == 503 && body.contains(&topic)).then_some(body)
        },
    );
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(json["not_ready"][0]["connected"], false, "{body}");
    assert!(
        json["not_ready"][0]["detail"]
            .as_str()
            .is_some_and(|d| d.contains("refused the subscription")),
        "{body}"
    );
    let me = [("monitor_id", id.as_str())];
    assert_eq!(
        sample(&worker.metrics(), "radar_mqtt_connected", &me),
        Some(0.0)
    );
    assert!(
        worker.stderr().contains("refused a subscription"),
        "{}",
        worker.stderr()
    );
}
