//! Brokers behind TLS (private Mosquitto listeners with certificates made
//! by the test): the worker verifies the server against
//! `RADAR_MQTT_CA_FILE` and its name, presents a client pair for mutual
//! TLS, and says which side speaks TLS when the URL and the port disagree.

use std::time::Duration;

use radar_testkit::{
    broker::Mosquitto,
    certs::{Pair, TestCa},
    db,
    telemetry::create_monitor,
    telemetry::wait_for,
    worker::Worker,
};

/// Mosquitto with a TLS listener using `server`, trusting `ca` for clients.
fn tls_broker(ca: &TestCa, server: &Pair, require_certificate: bool) -> Mosquitto {
    Mosquitto::start_with(&format!(
        "allow_anonymous true\ncafile {}\ncertfile {}\nkeyfile {}\nrequire_certificate {require_certificate}\n",
        ca.cert.display(),
        server.cert.display(),
        server.key.display()
    ))
}

fn mqtts(broker: &Mosquitto) -> String {
    format!("mqtts://127.0.0.1:{}", broker.port)
}

fn ready(worker: &Worker) {
    wait_for(Duration::from_secs(30), "/readyz answers 200", || {
        worker.get("/readyz").filter(|(c, _)| *c == 200)
    });
}

#[tokio::test]
async fn a_tls_broker_is_verified_by_ca_and_name_and_mutual_tls_needs_the_client_pair() {
    let db = db::migrated_database("mqtt_tls").await;
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new(dir.path(), "main");
    let server = ca.issue("broker", "IP:127.0.0.1,DNS:localhost", false);
    let elsewhere = ca.issue("elsewhere", "DNS:other.example", false);
    let client = ca.issue("radar-client", "DNS:radar-client", true);
    let ca_file = ca.cert.display().to_string();
    let monitor = |name: &str| {
        let topic = format!("{}/a", db::unique_name(name));
        create_monitor(&db, dir.path(), name, &topic)
    };

    let broker = tls_broker(&ca, &server, false);
    let id = monitor("tls-ok");
    let worker = Worker::spawn(
        &db,
        &broker,
        dir.path(),
        &[&id],
        &[
            ("RADAR_MQTT_URL", &mqtts(&broker)),
            ("RADAR_MQTT_CA_FILE", &ca_file),
        ],
    );
    ready(&worker);
    drop(worker);

    // Without the test CA the system's roots do not know the broker.
    let id = monitor("tls-unknown-ca");
    let worker = Worker::spawn(
        &db,
        &broker,
        dir.path(),
        &[&id],
        &[("RADAR_MQTT_URL", &mqtts(&broker))],
    );
    let detail = worker.not_ready_detail();
    assert!(detail.contains("certificate"), "{detail}");
    drop(worker);

    // A plain URL on the TLS port says to use mqtts://.
    let id = monitor("tls-plain-url");
    let worker = Worker::spawn(&db, &broker, dir.path(), &[&id], &[]);
    let detail = worker.not_ready_detail();
    assert!(detail.contains("mqtts://"), "{detail}");
    drop(worker);

    // A certificate for another name is refused.
    let wrong_name = tls_broker(&ca, &elsewhere, false);
    let id = monitor("tls-wrong-name");
    let worker = Worker::spawn(
        &db,
        &wrong_name,
        dir.path(),
        &[&id],
        &[
            ("RADAR_MQTT_URL", &mqtts(&wrong_name)),
            ("RADAR_MQTT_CA_FILE", &ca_file),
        ],
    );
    let detail = worker.not_ready_detail();
    assert!(detail.contains("certificate"), "{detail}");
    drop(worker);

    // Mutual TLS: the client pair connects, its absence is refused.
    let mutual = tls_broker(&ca, &server, true);
    let cert = client.cert.display().to_string();
    let key = client.key.display().to_string();
    let id = monitor("mtls-ok");
    let worker = Worker::spawn(
        &db,
        &mutual,
        dir.path(),
        &[&id],
        &[
            ("RADAR_MQTT_URL", &mqtts(&mutual)),
            ("RADAR_MQTT_CA_FILE", &ca_file),
            ("RADAR_MQTT_CLIENT_CERT_FILE", &cert),
            ("RADAR_MQTT_CLIENT_KEY_FILE", &key),
        ],
    );
    ready(&worker);
    drop(worker);
    let id = monitor("mtls-missing");
    let worker = Worker::spawn(
        &db,
        &mutual,
        dir.path(),
        &[&id],
        &[
            ("RADAR_MQTT_URL", &mqtts(&mutual)),
            ("RADAR_MQTT_CA_FILE", &ca_file),
        ],
    );
    let detail = worker.not_ready_detail();
    assert!(detail.contains("client certificate"), "{detail}");
    drop(worker);

    // An mqtts:// URL on a plain port says the broker does not speak TLS.
    let plain = Mosquitto::start_anonymous();
    let id = monitor("tls-on-plain");
    let worker = Worker::spawn(
        &db,
        &plain,
        dir.path(),
        &[&id],
        &[
            ("RADAR_MQTT_URL", &mqtts(&plain)),
            ("RADAR_MQTT_CA_FILE", &ca_file),
        ],
    );
    let detail = worker.not_ready_detail();
    assert!(detail.contains("does not speak TLS"), "{detail}");
}
