//! PostgreSQL over TLS: a private cluster with `ssl = on`, a certificate
//! from a CA made by the test, and plain TCP refused. The worker and
//! `radar status` connect with `sslmode=verify-full` + `sslrootcert=`; a
//! certificate for another name is refused under verify-full and accepted
//! under verify-ca; a URL that does not ask for TLS cannot connect.

use std::time::Duration;

use radar_testkit::postgres::PrivatePostgres;
use radar_testkit::{
    broker::Mosquitto, certs::TestCa, db, telemetry::create_monitor, telemetry::radar,
    telemetry::wait_for, worker::Worker,
};

fn status(url: &str, db: &db::TestDb) -> std::process::Output {
    radar(db)
        .args(["status", "--json"])
        .env("DATABASE_URL", url)
        .output()
        .unwrap()
}

#[tokio::test]
async fn the_worker_and_status_connect_with_verify_full_and_a_wrong_name_is_refused() {
    let mut pg = PrivatePostgres::start().expect("a private PostgreSQL cluster");
    let db = db::migrated_database_on(&pg.url(), "store_tls").await;
    let dir = tempfile::tempdir().unwrap();
    let topic = format!("{}/a", db::unique_name("pgtls"));
    let id = create_monitor(&db, dir.path(), "pg-tls", &topic);

    let ca = TestCa::new(dir.path(), "pg");
    let server = ca.issue("postgres-server", "IP:127.0.0.1,DNS:localhost", false);
    pg.enable_ssl(&server.cert, &server.key, true).unwrap();
    let ca_file = ca.cert.display().to_string();
    let verify_full = format!("{}?sslmode=verify-full&sslrootcert={ca_file}", db.url);

    let out = status(&verify_full, &db);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains(&id));
    let plain = status(&db.url, &db);
    assert!(
        !plain.status.success(),
        "plain TCP must be refused by this cluster"
    );
    let require = status(&format!("{}?sslmode=require", db.url), &db);
    assert!(
        require.status.success(),
        "{}",
        String::from_utf8_lossy(&require.stderr)
    );

    let broker = Mosquitto::start_anonymous();
    let worker = Worker::spawn(
        &db,
        &broker,
        dir.path(),
        &[&id],
        &[("DATABASE_URL", &verify_full)],
    );
    wait_for(Duration::from_secs(30), "/readyz answers 200", || {
        worker.get("/readyz").filter(|(c, _)| *c == 200)
    });
    drop(worker);

    // A certificate that names another host: refused by verify-full only.
    let other = ca.issue("postgres-other", "DNS:db.other.example", false);
    pg.enable_ssl(&other.cert, &other.key, true).unwrap();
    let refused = status(&verify_full, &db);
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("certificate"), "{stderr}");
    let verify_ca = format!("{}?sslmode=verify-ca&sslrootcert={ca_file}", db.url);
    let out = status(&verify_ca, &db);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
