//! What `radar snapshot inspect` reports about stored rows, against real
//! PostgreSQL: a healthy row, rows edited with SQL, and incompatible ones.
//! (The binary's exit status is tested in `actors/src/cli/snapshot.rs`.)

use std::collections::BTreeMap;

use chrono::{DateTime, TimeZone, Utc};
use diesel_async::RunQueryDsl;
use radar::{
    align::Watermarks,
    config::MonitorConfig,
    coverage::{CoverageHistory, GapCause},
    detector::Detector,
    snapshot::{CheckpointKey, Inspection, ManagedState, SnapshotBinding, seal},
    store::{self, CheckpointStore, Claim, Services},
};
use radar_testkit::db;
use uuid::Uuid;

const PUMP: &str = include_str!("../config/monitors/pump.toml");

fn key() -> CheckpointKey {
    CheckpointKey::new(b"inspect-test-key-0123456789abcdef0123".to_vec())
}

fn at(secs: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(1_790_000_000 + secs, 0).unwrap()
}

struct Fixture {
    db: db::TestDb,
    store: CheckpointStore,
    service_id: Uuid,
    config: MonitorConfig,
}

/// The state of the fixture's snapshot: 12 frames and one outage gap.
fn committed_state(config: &MonitorConfig) -> ManagedState {
    let mut state = ManagedState::default();
    let width = config.readings.iter().filter(|r| r.required).count();
    let detector = Detector::new(config.detector.clone(), width).unwrap();
    state.set_detector(&detector).unwrap();
    state.counters.frames = 12;
    state.counters.observations_received = 30;
    state.counters.observations_rejected = BTreeMap::from([("stale".to_string(), 2)]);
    state.watermarks = Watermarks(BTreeMap::from([("pressure".to_string(), at(12))]));
    state.coverage = CoverageHistory::fresh(at(0));
    state.coverage.record_frame(at(1));
    state.coverage.open_gap(GapCause::MqttOutage, at(4));
    state.coverage.close_gap(GapCause::MqttOutage, at(6));
    state.coverage.record_frame(at(12));
    state
}

/// A monitor with a committed snapshot of [`committed_state`].
async fn fixture(tag: &str) -> Fixture {
    let db = db::migrated_database(tag).await;
    let pool = store::connect(&db.url, 4, db::STATEMENT_TIMEOUT)
        .await
        .unwrap();
    let config = MonitorConfig::from_toml(PUMP).unwrap();
    let service_id = Services::new(pool.clone()).create(&config).await.unwrap();
    let state = committed_state(&config);
    let binding = SnapshotBinding::for_monitor(service_id, &config);
    let sealed = seal(&binding, &state, at(13), &key()).unwrap();
    let store = CheckpointStore::new(pool, "worker-a");
    let Claim::Won(_) = store.claim(&sealed).await.unwrap() else {
        panic!("claim lost");
    };
    Fixture {
        db,
        store,
        service_id,
        config,
    }
}

impl Fixture {
    async fn inspect_with(&self, config: &MonitorConfig, key: &CheckpointKey) -> Inspection {
        let binding = SnapshotBinding::for_monitor(self.service_id, config);
        match self.store.load_snapshot(self.service_id).await.unwrap() {
            Some(row) => row.inspect(&binding, key),
            None => Inspection::missing(self.service_id),
        }
    }

    async fn inspect(&self) -> Inspection {
        self.inspect_with(&self.config, &key()).await
    }

    async fn edit(&self, sql: &str) {
        diesel::sql_query(sql)
            .bind::<diesel::sql_types::Uuid, _>(self.service_id)
            .execute(&mut db::connect(&self.db).await)
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn a_healthy_snapshot_is_verified_compatible_and_shown_in_full() {
    let fx = fixture("inspect_ok").await;
    let i = fx.inspect().await;
    assert!(i.verified && i.compatible, "{:?}", i.reason);
    assert_eq!(i.exit_code(), 0);
    let json = serde_json::to_value(&i).unwrap();
    assert_eq!(json["service_id"], fx.service_id.to_string());
    assert_eq!(json["processed_count"], 12);
    assert_eq!(json["saved_at"], "2026-09-21T14:13:33Z");
    assert_eq!(json["verified"], true);
    assert_eq!(json["compatible"], true);
    assert!(json["reason"].is_null());
    assert_eq!(json["phase"], "training");
    assert!(json["coverage"]["version"].as_u64().unwrap() > 0);
    assert_eq!(json["coverage"]["gaps"][0]["cause"], "startup");
    assert_eq!(json["coverage"]["gaps"][1]["cause"], "mqtt_outage");
    assert_eq!(json["coverage"]["gaps"][1]["to"], "2026-09-21T14:13:26Z");
    assert_eq!(json["watermarks"]["pressure"], "2026-09-21T14:13:32Z");
    assert_eq!(json["counters"]["observations_rejected"]["stale"], 2);
    assert_eq!(json["envelope"]["key_id"], key().key_id());
}

#[tokio::test]
async fn rows_edited_with_sql_are_not_restorable_and_the_reason_is_named() {
    let fx = fixture("inspect_tampered").await;
    let edits = [
        (
            "UPDATE radar_runtime_checkpoints SET payload = set_byte(payload, 3, get_byte(payload, 3) # 4) WHERE service_id = $1",
            "digest_mismatch",
            "digest mismatch",
        ),
        (
            "UPDATE radar_runtime_checkpoints SET signature = set_byte(signature, 31, get_byte(signature, 31) # 1) WHERE service_id = $1",
            "bad_signature",
            "bad signature",
        ),
        (
            "UPDATE radar_runtime_checkpoints SET saved_at = saved_at + interval '1 hour' WHERE service_id = $1",
            "column_mismatch",
            "column saved_at",
        ),
        (
            "UPDATE radar_runtime_checkpoints SET payload = substring(payload from 1 for 10) WHERE service_id = $1",
            "truncated_payload",
            "truncated payload",
        ),
    ];
    let original: Vec<u8> = fx
        .store
        .load_snapshot(fx.service_id)
        .await
        .unwrap()
        .unwrap()
        .signature()
        .to_vec();
    for (sql, code, words) in edits {
        // Each edit starts from a fresh copy of the good row.
        fx.edit("DELETE FROM radar_runtime_checkpoints WHERE service_id = $1")
            .await;
        let fresh = fixture_row(&fx).await;
        assert_eq!(fresh, original);
        fx.edit(sql).await;
        let i = fx.inspect().await;
        assert_eq!(i.exit_code(), 2, "{sql}");
        assert!(!i.verified, "{sql}");
        assert_eq!(i.reason_code, Some(code), "{sql}: {:?}", i.reason);
        assert!(
            i.reason.as_deref().unwrap().contains(words),
            "{:?}",
            i.reason
        );
        assert!(
            i.counters.is_none(),
            "nothing is decoded from unverified bytes"
        );
    }
}

/// Re-inserts the fixture's snapshot (same bytes, same signature).
async fn fixture_row(fx: &Fixture) -> Vec<u8> {
    let state = committed_state(&fx.config);
    let binding = SnapshotBinding::for_monitor(fx.service_id, &fx.config);
    let sealed = seal(&binding, &state, at(13), &key()).unwrap();
    let Claim::Won(w) = fx.store.claim(&sealed).await.unwrap() else {
        panic!("claim lost");
    };
    w.token().as_bytes().to_vec()
}

#[tokio::test]
async fn an_authentic_but_incompatible_snapshot_is_verified_not_compatible_and_not_decoded() {
    let fx = fixture("inspect_incompatible").await;
    let mut changed = fx.config.clone();
    changed.alignment.max_skew_ms += 1;
    let i = fx.inspect_with(&changed, &key()).await;
    assert!(i.verified);
    assert!(!i.compatible);
    assert_eq!(i.exit_code(), 2);
    assert_eq!(i.reason_code, Some("config_changed"));
    assert!(
        i.reason.as_deref().unwrap().contains("config changed"),
        "{:?}",
        i.reason
    );
    // What the signed envelope says is shown; the payload is not decoded.
    assert_eq!(i.processed_count, Some(12));
    assert!(i.envelope.is_some());
    assert!(i.counters.is_none() && i.coverage.is_none() && i.phase.is_none());
}

#[tokio::test]
async fn a_snapshot_read_with_another_key_names_both_key_ids() {
    let fx = fixture("inspect_other_key").await;
    let other = CheckpointKey::new(b"some-other-key-0123456789abcdef-xyz".to_vec());
    let i = fx.inspect_with(&fx.config, &other).await;
    assert!(!i.verified && !i.compatible);
    assert_eq!(i.reason_code, Some("another_key"));
    let reason = i.reason.unwrap();
    assert!(
        reason.contains(&key().key_id()) && reason.contains(&other.key_id()),
        "{reason}"
    );
}

#[tokio::test]
async fn a_monitor_without_a_snapshot_is_reported_missing() {
    let fx = fixture("inspect_missing").await;
    fx.edit("DELETE FROM radar_runtime_checkpoints WHERE service_id = $1")
        .await;
    let i = fx.inspect().await;
    assert!(!i.present);
    assert_eq!(i.reason_code, Some("missing"));
    assert_eq!(i.exit_code(), 2);
}
