//! The schema, its ledger and the monitors' rows, against real PostgreSQL.

use diesel::sql_types::BigInt;
use diesel_async::RunQueryDsl;
use radar::{
    config::MonitorConfig,
    store::{self, Services, StoreError},
};
use radar_testkit::db;

const PUMP: &str = include_str!("../config/monitors/pump.toml");

#[derive(diesel::QueryableByName)]
struct Count {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

async fn count(conn: &mut diesel_async::AsyncPgConnection, sql: &str) -> i64 {
    diesel::sql_query(sql)
        .get_result::<Count>(conn)
        .await
        .unwrap()
        .n
}

#[tokio::test]
async fn migrations_apply_on_an_empty_database_and_are_idempotent() {
    let db = db::empty_database("migrate").await;
    let first = store::migrate(&db.url).await.unwrap();
    assert_eq!(first, store::known_migrations());
    let second = store::migrate(&db.url).await.unwrap();
    assert!(second.is_empty(), "second run applied {second:?}");
    store::check_schema(&db.url).await.unwrap();
    let mut conn = db::connect(&db).await;
    for table in [
        "services",
        "radar_runtime_checkpoints",
        "radar_alarms",
        "radar_evidence",
        "radar_operational_status",
    ] {
        let n = count(&mut conn, &format!("SELECT count(*) AS n FROM {table}")).await;
        assert_eq!(n, 0, "{table}");
    }
}

#[tokio::test]
async fn a_schema_with_an_unknown_newer_migration_is_refused() {
    let db = db::migrated_database("newer").await;
    db::mark_migrated_by_newer_binary(&db).await;
    let migrate = store::migrate(&db.url).await.unwrap_err();
    assert!(
        matches!(&migrate, StoreError::SchemaNewerThanBinary { unknown } if unknown == &["29991231000000"]),
        "{migrate}"
    );
    let check = store::check_schema(&db.url).await.unwrap_err();
    assert!(
        matches!(check, StoreError::SchemaNewerThanBinary { .. }),
        "{check}"
    );
    assert!(check.to_string().contains("newer radar"));
}

#[tokio::test]
async fn an_unmigrated_database_is_reported_as_behind() {
    let db = db::empty_database("behind").await;
    let err = store::check_schema(&db.url).await.unwrap_err();
    assert!(matches!(err, StoreError::SchemaBehind { .. }), "{err}");
    assert!(err.to_string().contains("radar migrate"));
}

#[tokio::test]
async fn monitors_round_trip_through_create_list_show_retire_and_delete() {
    let db = db::migrated_database("crud").await;
    let services = Services::new(
        store::connect(&db.url, 2, db::STATEMENT_TIMEOUT)
            .await
            .unwrap(),
    );
    let config = MonitorConfig::from_toml(PUMP).unwrap();
    let id = services.create(&config).await.unwrap();

    let again = services.create(&config).await.unwrap_err();
    assert!(
        matches!(again, StoreError::NameTaken(ref n) if n == "pump-7"),
        "{again}"
    );

    let row = services.get(id).await.unwrap();
    assert_eq!(row.monitor_config().unwrap(), config);
    assert_eq!(row.config_fingerprint, config.fingerprint().to_vec());
    assert_eq!(services.list(false).await.unwrap().len(), 1);

    services.retire(id).await.unwrap();
    assert!(services.list(false).await.unwrap().is_empty());
    assert_eq!(services.list(true).await.unwrap()[0].id, id);
    assert!(matches!(
        services.retire(id).await.unwrap_err(),
        StoreError::AlreadyRetired { .. }
    ));

    services.delete(id).await.unwrap();
    assert!(matches!(
        services.get(id).await.unwrap_err(),
        StoreError::MonitorNotFound(_)
    ));
    assert!(matches!(
        services.delete(id).await.unwrap_err(),
        StoreError::MonitorNotFound(_)
    ));
}

/// The supervisor polls `heads` (no configs) every few seconds and reads
/// `rows` only for monitors about to start: those rows carry the config as
/// stored at that moment, so an edited config is what the next start runs.
#[tokio::test]
async fn monitor_heads_list_every_monitor_and_rows_read_the_config_as_stored_now() {
    use diesel::sql_types::{Bytea, Jsonb, Uuid as SqlUuid};
    let db = db::migrated_database("heads").await;
    let pool = store::connect(&db.url, 2, db::STATEMENT_TIMEOUT)
        .await
        .unwrap();
    let services = Services::new(pool.clone());
    let config = MonitorConfig::from_toml(PUMP).unwrap();
    let id = services.create(&config).await.unwrap();
    let other = services
        .create(&MonitorConfig::from_toml(&PUMP.replace("pump-7\"", "pump-8\"")).unwrap())
        .await
        .unwrap();
    services.retire(other).await.unwrap();

    let heads = services.heads().await.unwrap();
    assert_eq!(heads.len(), 2, "retired monitors are listed too");
    assert_eq!((heads[0].id, heads[0].name.as_str()), (id, "pump-7"));
    assert!(!heads[0].is_retired());
    assert_eq!(heads[1].id, other);
    assert!(heads[1].is_retired());

    let edited = MonitorConfig::from_toml(&PUMP.replace("pump-7/flow", "pump-7/flow-2")).unwrap();
    assert_ne!(edited.fingerprint(), config.fingerprint());
    let mut conn = store::checkout(&pool).await.unwrap();
    diesel::sql_query("UPDATE services SET config = $2, config_fingerprint = $3 WHERE id = $1")
        .bind::<SqlUuid, _>(id)
        .bind::<Jsonb, _>(serde_json::to_value(&edited).unwrap())
        .bind::<Bytea, _>(edited.fingerprint().to_vec())
        .execute(&mut conn)
        .await
        .unwrap();
    let rows = services.rows(&[id]).await.unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].monitor_config().unwrap(), edited);
    assert_eq!(rows[0].config_fingerprint, edited.fingerprint().to_vec());
    assert!(services.rows(&[]).await.unwrap().is_empty());
    assert!(
        services
            .rows(&[uuid::Uuid::new_v4()])
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn deleting_a_monitor_cascades_to_its_snapshot_alarms_evidence_and_status() {
    let db = db::migrated_database("cascade").await;
    let services = Services::new(
        store::connect(&db.url, 2, db::STATEMENT_TIMEOUT)
            .await
            .unwrap(),
    );
    let keep = services
        .create(&MonitorConfig::from_toml(&PUMP.replace("pump-7\"", "pump-8\"")).unwrap())
        .await
        .unwrap();
    let id = services
        .create(&MonitorConfig::from_toml(PUMP).unwrap())
        .await
        .unwrap();
    let mut conn = db::connect(&db).await;
    for service in [id, keep] {
        for sql in [
            "INSERT INTO radar_runtime_checkpoints (service_id, envelope, format_version, config_fingerprint, \
             runtime_versions, processed_count, observation_history_len, saved_at, payload_sha256, \
             key_id, signature, payload, writer_id) \
             VALUES ($1, '\\x00', 1, '\\x00', 'v', 0, 0, now(), '\\x00', 'k', \
             decode(repeat('01', 32), 'hex'), '\\x02', 'w')",
            "INSERT INTO radar_alarms (service_id, alarm_seq, opened_at, peak_score, writer_signature) \
             VALUES ($1, 1, now(), 1.0, '\\x01')",
            "INSERT INTO radar_evidence (service_id, frame_ts, frame_seq, score, threshold, p_value, \
             contributions, writer_signature) VALUES ($1, now(), 1, 2.0, 1.0, 0.01, '{}', '\\x01')",
            "INSERT INTO radar_operational_status (service_id, worker_id, state) VALUES ($1, 'w', 'running')",
        ] {
            diesel::sql_query(sql)
                .bind::<diesel::sql_types::Uuid, _>(service)
                .execute(&mut conn)
                .await
                .unwrap();
        }
    }
    services.delete(id).await.unwrap();
    for table in [
        "radar_runtime_checkpoints",
        "radar_alarms",
        "radar_evidence",
        "radar_operational_status",
    ] {
        let gone = count(
            &mut conn,
            &format!("SELECT count(*) AS n FROM {table} WHERE service_id = '{id}'"),
        )
        .await;
        let kept = count(
            &mut conn,
            &format!("SELECT count(*) AS n FROM {table} WHERE service_id = '{keep}'"),
        )
        .await;
        assert_eq!((gone, kept), (0, 1), "{table}");
    }
}

#[tokio::test]
async fn the_same_frame_cannot_be_inserted_twice_as_evidence() {
    let db = db::migrated_database("dupe").await;
    let services = Services::new(
        store::connect(&db.url, 2, db::STATEMENT_TIMEOUT)
            .await
            .unwrap(),
    );
    let id = services
        .create(&MonitorConfig::from_toml(PUMP).unwrap())
        .await
        .unwrap();
    let mut conn = db::connect(&db).await;
    let insert = "INSERT INTO radar_evidence (service_id, frame_ts, frame_seq, score, threshold, \
                  p_value, contributions, writer_signature) \
                  VALUES ($1, '2026-01-01T00:00:00Z', 1, 2.0, 1.0, 0.01, '{}', '\\x01')";
    diesel::sql_query(insert)
        .bind::<diesel::sql_types::Uuid, _>(id)
        .execute(&mut conn)
        .await
        .unwrap();
    let second = diesel::sql_query(insert)
        .bind::<diesel::sql_types::Uuid, _>(id)
        .execute(&mut conn)
        .await;
    assert!(second.is_err());
}
