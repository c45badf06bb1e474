//! What `MonitorCore` counts around alignment and restores.

use chrono::{DateTime, Duration, TimeZone, Utc};
use uuid::Uuid;

use crate::{
    align::Observation, config::MonitorConfig, runtime::MonitorCore, snapshot::ManagedState,
};

pub(in crate::runtime) fn at(ms: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(1_790_000_000, 0).unwrap() + Duration::milliseconds(ms)
}

/// Two required readings `a` and `b`, skew limit 1 s.
pub(in crate::runtime) fn config() -> MonitorConfig {
    MonitorConfig::from_toml(
        r#"name = "core"

[[readings]]
name = "a"
topic = "t/a"

[[readings]]
name = "b"
topic = "t/b"

[alignment]
freshness_ms = 60000
max_age_ms = 60000
future_tolerance_ms = 2000
max_skew_ms = 1000

[detector]
training_frames = 20
calibration_frames = 20
false_alarm_rate = 0.05
"#,
    )
    .unwrap()
}

/// `value` of `reading` at `ts_ms`, received at once.
pub(in crate::runtime) fn observation(reading: usize, ts_ms: i64, value: f64) -> Observation {
    Observation {
        reading,
        ts: at(ts_ms),
        value,
        received_at: at(ts_ms),
    }
}

fn observe(core: &mut MonitorCore, reading: usize, ts_ms: i64) -> crate::runtime::Step {
    core.ingest(Ok(observation(reading, ts_ms, 1.0)), at(ts_ms))
}

/// `received = accepted + every rejection + held`, from the core's counters.
fn assert_every_fate_counted(core: &MonitorCore) {
    let c = core.counters();
    let rejected: u64 = c.observations_rejected.values().sum();
    assert_eq!(
        c.observations_received,
        c.observations_accepted + rejected + core.aligner().held_values() as u64,
        "every observation has exactly one fate: {c:?}"
    );
}

#[test]
fn a_held_value_dropped_for_skew_is_a_skew_rejection_and_never_accepted() {
    let mut core = MonitorCore::fresh(Uuid::from_u128(1), config(), at(0)).unwrap();
    assert!(observe(&mut core, 0, 0).rejected.is_none(), "a is held");
    // `b` 5 s later pushes the held `a` out of the frame for skew.
    let step = observe(&mut core, 1, 5_000);
    assert!(step.rejected.is_none(), "b itself is held");
    assert!(step.frame.is_none());
    let counters = core.counters();
    assert_eq!(counters.observations_received, 2);
    assert_eq!(counters.observations_accepted, 0, "{counters:?}");
    assert_eq!(
        counters.observations_rejected.get("skew").copied(),
        Some(1),
        "{counters:?}"
    );
    assert_eq!(core.aligner().held_values(), 1);
    assert_every_fate_counted(&core);
}

#[test]
fn a_superseded_value_is_counted_under_its_own_reason() {
    let mut core = MonitorCore::fresh(Uuid::from_u128(3), config(), at(0)).unwrap();
    observe(&mut core, 0, 0);
    observe(&mut core, 0, 100);
    // The `b` completes the frame of the newer `a`, which overtakes the older.
    assert!(observe(&mut core, 1, 200).frame.is_some());
    assert_eq!(
        core.counters()
            .observations_rejected
            .get("superseded")
            .copied(),
        Some(1)
    );
    assert_eq!(
        core.counters().observations_accepted,
        2,
        "the frame's values"
    );
    assert_every_fate_counted(&core);
}

#[test]
fn expired_and_cleared_values_are_counted_and_a_restore_clears_what_was_held() {
    let mut core = MonitorCore::fresh(Uuid::from_u128(4), config(), at(0)).unwrap();
    observe(&mut core, 0, 0);
    assert_eq!(core.expire(at(60_001)), 1);
    assert_eq!(
        core.counters()
            .observations_rejected
            .get("expired")
            .copied(),
        Some(1)
    );
    observe(&mut core, 0, 60_002);
    assert!(core.suspend(at(60_003)));
    core.resume(at(60_004));
    assert_eq!(
        core.counters()
            .observations_rejected
            .get("partial_cleared")
            .copied(),
        Some(1)
    );
    assert_every_fate_counted(&core);
    observe(&mut core, 0, 60_005);
    let state = core.managed_state().unwrap();
    assert_eq!(crate::snapshot::ObservationFates::of(&state).unaccounted, 0);
    let restored = MonitorCore::restore(
        Uuid::from_u128(4),
        config(),
        state,
        core.detector().cloned(),
        at(60_005),
        at(70_000),
    )
    .unwrap();
    assert_eq!(
        restored
            .counters()
            .observations_rejected
            .get("partial_cleared")
            .copied(),
        Some(2),
        "the value held at save time is cleared by the restore"
    );
    assert_every_fate_counted(&restored);
}

proptest::proptest! {
    #[test]
    fn every_observation_has_exactly_one_fate(
        steps in proptest::collection::vec((0usize..3, -3_000i64..3_000, 0i64..400, proptest::bool::weighted(0.05)), 1..150),
    ) {
        let mut core = MonitorCore::fresh(Uuid::from_u128(5), config(), at(0)).unwrap();
        let mut clock = 0;
        for (reading, offset, advance, garbage) in steps {
            clock += advance;
            if garbage {
                core.ingest(Err(crate::mqtt::payload::PayloadRejection::NotJson), at(clock));
            } else {
                // Reading 2 does not exist: unknown_reading.
                let observation = Observation {
                    reading,
                    ts: at(clock + offset),
                    value: 1.0,
                    received_at: at(clock),
                };
                core.ingest(Ok(observation), at(clock));
            }
            if clock % 7 == 0 {
                core.expire(at(clock + 61_000));
            }
            let c = core.counters();
            let rejected: u64 = c.observations_rejected.values().sum();
            proptest::prop_assert_eq!(
                c.observations_received,
                c.observations_accepted + rejected + core.aligner().held_values() as u64,
                "{:?}", c
            );
            proptest::prop_assert_eq!(c.observations_accepted, c.frames * 2);
        }
    }
}

#[test]
fn a_restore_reports_the_partial_observations_it_discarded() {
    let mut core = MonitorCore::fresh(Uuid::from_u128(2), config(), at(0)).unwrap();
    observe(&mut core, 0, 0);
    observe(&mut core, 1, 100);
    assert_eq!(core.processed(), 1, "one frame");
    observe(&mut core, 0, 200);
    let state = core.managed_state().unwrap();
    assert_eq!(state.partial_observations, 1, "a waits for its b");

    let bytes = state.encode().unwrap();
    let decoded = ManagedState::decode(&bytes).unwrap();
    let restored = MonitorCore::restore(
        Uuid::from_u128(2),
        config(),
        decoded,
        core.detector().cloned(),
        at(200),
        at(10_000),
    )
    .unwrap();
    assert_eq!(restored.recovery().cleared_partial_observations, 1);
    let again = restored.managed_state().unwrap();
    assert_eq!(
        again.partial_observations, 0,
        "nothing held after the restore"
    );
}

/// The two observations of frame `i` of a varied but repeatable signal.
pub(in crate::runtime) fn frame_observations(i: i64) -> [Observation; 2] {
    let x = i as f64;
    [
        observation(0, 100 * i, (x * 0.7).sin() * 3.0 + 10.0),
        observation(1, 100 * i, (x * 0.3).cos() + 5.0),
    ]
}

/// Frame `i` of a varied but repeatable signal on both readings.
fn frame(core: &mut MonitorCore, i: i64) -> crate::runtime::Step {
    let [a, b] = frame_observations(i);
    let received = a.received_at;
    core.ingest(Ok(a), received);
    core.ingest(Ok(b), received)
}

#[test]
fn a_fit_cut_short_after_its_snapshot_reruns_from_the_preserved_frames_after_a_restore() {
    use crate::{
        detector::Phase,
        snapshot::{CheckpointKey, LoadOutcome, SnapshotBinding, open, seal},
    };
    let id = Uuid::from_u128(3);
    let key = CheckpointKey::new(b"test-key-test-key-test-key-0123456789".to_vec());
    let binding = SnapshotBinding::for_monitor(id, &config());
    let mut core = MonitorCore::fresh(id, config(), at(0)).unwrap();
    let mut fit_due = false;
    for i in 0..40 {
        fit_due |= frame(&mut core, i).fit_due;
    }
    assert!(fit_due, "the 40th frame completes calibration");
    assert_eq!(core.phase(), Phase::Fitting);

    // The snapshot the model seals before fitting; then the process dies.
    let sealed = seal(&binding, &core.managed_state().unwrap(), at(4_000), &key).unwrap();
    let LoadOutcome::Restored(restored) = open(&sealed.bytes, &binding, &key) else {
        panic!("the pre-fit snapshot restores")
    };
    assert_eq!(
        restored.detector.as_ref().map(|d| d.buffered_frames()),
        Some((20, 20)),
        "training and calibration frames travel in the snapshot"
    );
    let mut again = MonitorCore::restore(
        id,
        config(),
        restored.state,
        restored.detector,
        at(4_000),
        at(9_000),
    )
    .unwrap();
    assert_eq!(again.phase(), Phase::Fitting, "the fit is still due");
    again.fit().unwrap();
    core.fit().unwrap();
    assert_eq!(again.phase(), Phase::Monitoring);
    assert_eq!(
        again.detector().and_then(|d| d.threshold()),
        core.detector().and_then(|d| d.threshold()),
        "the rerun fit equals the one that was cut short"
    );
    let (a, b) = (frame(&mut core, 100), frame(&mut again, 100));
    assert!(a.verdict.is_some(), "the next frame is scored");
    assert_eq!(
        a.verdict.map(|v| v.score),
        b.verdict.map(|v| v.score),
        "both score the next frame alike"
    );
}
