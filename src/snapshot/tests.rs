//! Properties of sealing and opening snapshots.

use chrono::{DateTime, TimeZone, Utc};
use proptest::prelude::*;
use uuid::Uuid;

use super::*;
use crate::{
    align::{AlignmentPolicy, Frame, Watermarks},
    config::{MonitorConfig, ReadingConfig},
    coverage::{CoverageHistory, GapCause},
    detector::{Detector, DetectorSettings, Phase},
};

fn key() -> CheckpointKey {
    CheckpointKey::new(b"test-key-test-key-test-key-0123456789".to_vec())
}

fn monitor() -> MonitorConfig {
    MonitorConfig {
        name: "pump-7".into(),
        description: None,
        readings: ["pressure", "flow"]
            .into_iter()
            .map(|name| ReadingConfig {
                name: name.into(),
                topic: format!("plant/pump7/{name}"),
                required: true,
            })
            .collect(),
        alignment: AlignmentPolicy::default(),
        detector: DetectorSettings::default(),
        graph: None,
        payload: None,
    }
}

fn at(secs: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(1_790_000_000 + secs, 0).unwrap()
}

/// A detector of two readings that has buffered `frames` training frames.
fn detector(frames: usize) -> Detector {
    let mut detector = Detector::new(DetectorSettings::default(), 2).unwrap();
    for i in 0..frames {
        detector.process(&Frame {
            ts: at(i as i64),
            values: vec![i as f64 * 0.5, (i % 7) as f64],
        });
    }
    detector
}

fn state(frames: u64) -> ManagedState {
    let mut state = ManagedState::default();
    state.set_detector(&detector(frames as usize)).unwrap();
    state.counters.frames = frames;
    state.counters.observations_received = frames * 2 + 3;
    state
        .counters
        .observations_rejected
        .insert("stale".into(), 3);
    if frames > 0 {
        state.watermarks = Watermarks(
            [
                ("pressure".to_string(), at(10)),
                ("flow".to_string(), at(11)),
            ]
            .into_iter()
            .collect(),
        );
    }
    state.coverage = CoverageHistory::fresh(at(0));
    state.coverage.record_frame(at(1));
    state.coverage.open_gap(GapCause::MqttOutage, at(4));
    state.coverage.close_gap(GapCause::MqttOutage, at(6));
    state.coverage.record_frame(at(12));
    state
}

fn service() -> Uuid {
    Uuid::from_u128(0xfeed)
}

fn binding() -> SnapshotBinding {
    SnapshotBinding::for_monitor(service(), &monitor())
}

/// A sealed snapshot of a small monitor after `frames` frames (also for
/// the store's statement tests).
pub(crate) fn sealed(frames: u64) -> SealedSnapshot {
    seal(&binding(), &state(frames), at(20), &key()).unwrap()
}

fn restored(outcome: LoadOutcome) -> Box<Restored> {
    match outcome {
        LoadOutcome::Restored(r) => r,
        other => panic!("expected a restore, got {other:?}"),
    }
}

fn corrupt_reason(outcome: LoadOutcome) -> CorruptReason {
    match outcome {
        LoadOutcome::Corrupted(c) => c.reason,
        other => panic!("expected corruption, got {other:?}"),
    }
}

fn incompatible_reason(outcome: LoadOutcome) -> IncompatibleReason {
    match outcome {
        LoadOutcome::Incompatible(i) => i.reason,
        other => panic!("expected incompatibility, got {other:?}"),
    }
}

/// Signs hand-made envelope bytes with the test key, as a writer would.
fn signed(envelope: &Envelope, payload: Vec<u8>, key: &CheckpointKey) -> SnapshotBytes {
    use hmac::Mac;
    let bytes = envelope.encode();
    let mut mac = key.mac();
    mac.update(&bytes);
    SnapshotBytes {
        envelope: bytes,
        signature: mac.finalize().into_bytes().to_vec(),
        payload,
    }
}

#[test]
fn a_sealed_snapshot_opens_to_the_same_state_with_its_signature_as_token() {
    let sealed = sealed(7);
    let r = restored(open(&sealed.bytes, &binding(), &key()));
    assert_eq!(r.state, state(7));
    assert_eq!(r.envelope, sealed.envelope);
    assert_eq!(r.token, sealed.token);
    assert_eq!(r.envelope.processed_count, 7);
    assert_eq!(r.envelope.observation_history_len, 2);
}

#[test]
fn a_restore_hands_back_the_detector_decoded() {
    let r = restored(open(&sealed(7).bytes, &binding(), &key()));
    let detector = r.detector.expect("a detector was stored");
    assert_eq!(detector, self::detector(7));
    assert_eq!(detector.phase(), Phase::Training);
}

#[test]
fn undecodable_detector_bytes_in_a_signed_payload_are_corruption() {
    let mut s = state(7);
    s.detector = vec![0xc1];
    let sealed = seal(&binding(), &s, at(20), &key()).unwrap();
    let reason = corrupt_reason(open(&sealed.bytes, &binding(), &key()));
    assert_eq!(reason.code(), "undecodable_payload");
    assert!(reason.to_string().contains("detector"), "{reason}");
}

#[test]
fn save_time_is_kept_at_microsecond_precision() {
    let t = at(0) + chrono::Duration::nanoseconds(123_456_789);
    let s = seal(&binding(), &state(1), t, &key()).unwrap();
    assert_eq!(s.envelope.saved_at.timestamp_subsec_nanos(), 123_456_000);
    assert_eq!(
        Envelope::parse(&s.bytes.envelope).unwrap().saved_at,
        s.envelope.saved_at
    );
}

#[test]
fn each_alignment_policy_change_invalidates_the_snapshot_as_a_config_change() {
    let sealed = sealed(7);
    let changes: [fn(&mut AlignmentPolicy); 4] = [
        |p| p.freshness_ms += 1,
        |p| p.max_age_ms += 1,
        |p| p.future_tolerance_ms += 1,
        |p| p.max_skew_ms += 1,
    ];
    for change in changes {
        let mut config = monitor();
        change(&mut config.alignment);
        let binding = SnapshotBinding::for_monitor(service(), &config);
        let reason = incompatible_reason(open(&sealed.bytes, &binding, &key()));
        assert!(
            matches!(reason, IncompatibleReason::ConfigChanged { .. }),
            "{reason}"
        );
        assert_eq!(reason.code(), "config_changed");
    }
}

#[test]
fn renaming_the_monitor_or_editing_its_description_keeps_the_snapshot_valid() {
    let sealed = sealed(7);
    let mut config = monitor();
    config.name = "pump-7-renamed".into();
    config.description = Some("moved to hall B".into());
    let binding = SnapshotBinding::for_monitor(service(), &config);
    restored(open(&sealed.bytes, &binding, &key()));
}

#[test]
fn a_changed_runtime_version_names_the_component_and_both_versions() {
    let sealed = sealed(7);
    let mut binding = binding();
    binding.runtime_versions = binding
        .runtime_versions
        .replace("statrs=", "statrs=9.9.9-was-");
    let reason = incompatible_reason(open(&sealed.bytes, &binding, &key()));
    let IncompatibleReason::RuntimeVersions(changes) = &reason else {
        panic!("{reason}");
    };
    assert_eq!(changes.len(), 1);
    assert_eq!(changes[0].component, "statrs");
    assert!(reason.to_string().contains("statrs"), "{reason}");
}

#[test]
fn a_snapshot_of_the_previous_detector_algorithm_is_refused_naming_both_versions() {
    // Version 3 added the change channels; a version 2 detector state has
    // no place for them and must never be decoded as version 3.
    let sealed = sealed(7);
    let mut binding = binding();
    let current = format!("detector={}", crate::detector::ALGORITHM_VERSION);
    assert!(binding.runtime_versions.contains(&current));
    binding.runtime_versions = binding
        .runtime_versions
        .replace(&current, "detector=robust-pca-t2spe-conformal/2");
    let reason = incompatible_reason(open(&sealed.bytes, &binding, &key()));
    let IncompatibleReason::RuntimeVersions(changes) = &reason else {
        panic!("{reason}");
    };
    assert_eq!(changes.len(), 1);
    assert_eq!(changes[0].component, "detector");
    let text = reason.to_string();
    assert!(
        text.contains("conformal/2") && text.contains("conformal/3"),
        "{text}"
    );
}

#[test]
fn another_service_id_is_named() {
    let sealed = sealed(7);
    let mut binding = binding();
    binding.service_id = Uuid::from_u128(0xbeef);
    let reason = incompatible_reason(open(&sealed.bytes, &binding, &key()));
    assert_eq!(
        reason,
        IncompatibleReason::OtherService {
            snapshot: service()
        }
    );
}

#[test]
fn a_snapshot_signed_with_another_key_says_so_with_both_key_ids() {
    let sealed = sealed(7);
    let other = CheckpointKey::new(b"another-key-another-key-0123456789".to_vec());
    let reason = incompatible_reason(open(&sealed.bytes, &binding(), &other));
    assert_eq!(
        reason,
        IncompatibleReason::AnotherKey {
            snapshot: key().key_id(),
            running: other.key_id()
        }
    );
}

#[test]
fn another_format_version_is_named_when_its_signature_verifies() {
    let mut envelope = sealed(7).envelope;
    envelope.format_version = FORMAT_VERSION + 1;
    let bytes = signed(&envelope, sealed(7).bytes.payload, &key());
    let reason = incompatible_reason(open(&bytes, &binding(), &key()));
    assert_eq!(
        reason,
        IncompatibleReason::FormatVersion {
            snapshot: FORMAT_VERSION + 1,
            running: FORMAT_VERSION
        }
    );
}

#[test]
fn processed_frames_without_observation_history_are_refused() {
    let mut s = state(5);
    s.watermarks = Watermarks::default();
    let sealed = seal(&binding(), &s, at(20), &key()).unwrap();
    let reason = incompatible_reason(open(&sealed.bytes, &binding(), &key()));
    assert_eq!(
        reason,
        IncompatibleReason::NoObservationHistory { processed_count: 5 }
    );
}

#[test]
fn an_initial_snapshot_before_the_first_observation_may_be_empty() {
    let sealed = seal(&binding(), &ManagedState::default(), at(0), &key()).unwrap();
    let r = restored(open(&sealed.bytes, &binding(), &key()));
    assert_eq!(r.envelope.processed_count, 0);
    assert_eq!(r.envelope.observation_history_len, 0);
}

/// 0xc1 is the one byte MessagePack never uses: any decoder call fails on it.
const UNDECODABLE: &[u8] = &[0xc1, 0xc1, 0xc1];

fn envelope_for(payload: &[u8]) -> Envelope {
    use sha2::{Digest, Sha256};
    let mut envelope = sealed(7).envelope;
    envelope.payload_len = payload.len() as u64;
    envelope.payload_sha256 = Sha256::digest(payload).into();
    envelope
}

#[test]
fn the_decoder_is_not_reached_when_the_signature_fails() {
    let mut bytes = signed(&envelope_for(UNDECODABLE), UNDECODABLE.to_vec(), &key());
    bytes.signature[0] ^= 1;
    assert_eq!(
        corrupt_reason(open(&bytes, &binding(), &key())),
        CorruptReason::BadSignature
    );
}

#[test]
fn the_decoder_is_not_reached_when_the_digest_or_compatibility_fails() {
    let mut tampered = signed(&envelope_for(UNDECODABLE), UNDECODABLE.to_vec(), &key());
    tampered.payload = vec![0xc1, 0xc1, 0xc0];
    assert_eq!(
        corrupt_reason(open(&tampered, &binding(), &key())),
        CorruptReason::DigestMismatch
    );

    let mut envelope = envelope_for(UNDECODABLE);
    envelope.config_fingerprint = [0; 32];
    let bytes = signed(&envelope, UNDECODABLE.to_vec(), &key());
    let reason = incompatible_reason(open(&bytes, &binding(), &key()));
    assert_eq!(reason.code(), "config_changed");
}

#[test]
fn the_same_undecodable_payload_properly_signed_is_reported_undecodable() {
    // Shows the payload above really would fail in the decoder.
    let bytes = signed(&envelope_for(UNDECODABLE), UNDECODABLE.to_vec(), &key());
    let reason = corrupt_reason(open(&bytes, &binding(), &key()));
    assert_eq!(reason.code(), "undecodable_payload");
}

#[test]
fn truncated_payload_and_signature_are_named() {
    let mut bytes = sealed(7).bytes;
    bytes.payload.pop();
    let reason = corrupt_reason(open(&bytes, &binding(), &key()));
    assert!(
        matches!(reason, CorruptReason::TruncatedPayload { .. }),
        "{reason}"
    );
    let mut bytes = sealed(7).bytes;
    bytes.signature.truncate(31);
    let reason = corrupt_reason(open(&bytes, &binding(), &key()));
    assert_eq!(reason, CorruptReason::TruncatedSignature { len: 31 });
}

#[test]
fn messages_name_the_monitor_the_reason_and_the_remedy() {
    let other = CheckpointKey::new(b"another-key-another-key-0123456789".to_vec());
    let LoadOutcome::Incompatible(i) = open(&sealed(7).bytes, &binding(), &other) else {
        panic!("expected incompatible");
    };
    let text = i.to_string();
    assert!(text.contains(&service().to_string()), "{text}");
    assert!(text.contains("another key"), "{text}");
    assert!(
        text.contains("retire this monitor and create a new one"),
        "{text}"
    );
    let mut bytes = sealed(7).bytes;
    bytes.payload[0] ^= 1;
    let LoadOutcome::Corrupted(c) = open(&bytes, &binding(), &key()) else {
        panic!("expected corrupted");
    };
    assert!(c.to_string().contains("digest mismatch"), "{c}");
}

/// A graph run's monitor bound to semantics `hash`, reading `flow` from `flow_topic`.
fn graph_monitor(hash: &str, flow_topic: &str) -> MonitorConfig {
    let mut config = monitor();
    config.readings[1].topic = flow_topic.into();
    config.graph = Some(crate::graph::GraphBinding {
        graph_id: Uuid::nil(),
        graph: "pump-7-graph".into(),
        revision: 1,
        run_id: Uuid::from_u128(9),
        semantics_hash: hash.into(),
    });
    config
}

/// A graph run's state sealed under `config`'s binding.
fn graph_sealed(config: &MonitorConfig) -> SealedSnapshot {
    let binding = SnapshotBinding::for_monitor(service(), config);
    let mut state = state(0);
    state.detector.clear();
    state.graph = Some(GraphCheckpoint {
        bound: binding.graph.clone().unwrap(),
        state: crate::graph::GraphState {
            semantics_hash: binding.graph.clone().unwrap().semantics_hash,
            frames_applied: 0,
            nodes: Vec::new(),
        },
    });
    seal(&binding, &state, at(20), &key()).unwrap()
}

fn open_as(sealed: &SealedSnapshot, config: &MonitorConfig) -> LoadOutcome {
    open(
        &sealed.bytes,
        &SnapshotBinding::for_monitor(service(), config),
        &key(),
    )
}

#[test]
fn a_graph_run_restores_under_the_same_semantics_and_readings() {
    let config = graph_monitor(&"a".repeat(64), "plant/pump7/flow");
    let restored = restored(open_as(&graph_sealed(&config), &config));
    let graph = restored.state.graph.unwrap();
    assert_eq!(graph.bound.semantics_hash, "a".repeat(64));
    assert_eq!(graph.bound.readings, config.readings);
}

#[test]
fn a_graph_run_restore_names_a_semantics_change_with_both_hashes() {
    let sealed = graph_sealed(&graph_monitor(&"a".repeat(64), "plant/pump7/flow"));
    let reason = incompatible_reason(open_as(
        &sealed,
        &graph_monitor(&"b".repeat(64), "plant/pump7/flow"),
    ));
    let IncompatibleReason::GraphChanged(change) = &reason else {
        panic!("{reason:?}")
    };
    assert_eq!(change.semantics, Some(("a".repeat(64), "b".repeat(64))));
    assert!(change.readings.is_empty());
    assert_eq!(reason.code(), "graph_changed");
    assert!(
        reason
            .to_string()
            .contains("executable semantics hash aaaaaaaaaaaa in the snapshot, bbbbbbbbbbbb now"),
        "{reason}"
    );
}

#[test]
fn a_graph_run_restore_names_a_changed_reading_with_both_topics() {
    let sealed = graph_sealed(&graph_monitor(&"a".repeat(64), "plant/pump7/flow"));
    let reason = incompatible_reason(open_as(
        &sealed,
        &graph_monitor(&"a".repeat(64), "plant/pump8/flow"),
    ));
    let IncompatibleReason::GraphChanged(change) = &reason else {
        panic!("{reason:?}")
    };
    assert_eq!(change.semantics, None);
    assert_eq!(
        change.readings,
        vec!["flow: plant/pump7/flow -> plant/pump8/flow".to_string()]
    );
    assert!(
        reason.to_string().contains("resolved readings flow:"),
        "{reason}"
    );
}

#[test]
fn a_graph_run_is_bound_to_the_graph_nodes_version_too() {
    let config = graph_monitor(&"a".repeat(64), "plant/pump7/flow");
    let binding = SnapshotBinding::for_monitor(service(), &config);
    assert!(
        binding
            .runtime_versions
            .ends_with(&format!(",graph={}", crate::graph::NODES_VERSION)),
        "{}",
        binding.runtime_versions
    );
    assert_eq!(
        SnapshotBinding::for_monitor(service(), &monitor()).runtime_versions,
        runtime_versions(),
        "plain monitors keep their runtime versions"
    );
    let changes = version_changes(&binding.runtime_versions, &runtime_versions());
    assert_eq!(changes.len(), 1);
    assert_eq!(changes[0].component, "graph");
}

#[test]
fn a_plain_monitor_payload_has_no_graph_entry_so_its_bytes_are_as_before() {
    let bytes = state(3).encode().unwrap();
    // The msgpack key `graph` (fixstr of 5 bytes) is not written at all,
    // so payloads of plain monitors (and of older binaries) are unchanged.
    assert!(!bytes.windows(6).any(|w| w == b"\xa5graph"));
    assert_eq!(ManagedState::decode(&bytes).unwrap().graph, None);
    let mut with_graph = state(3);
    let sealed = graph_sealed(&graph_monitor(&"a".repeat(64), "t"));
    with_graph.graph = ManagedState::decode(&sealed.bytes.payload).unwrap().graph;
    assert!(with_graph.graph.is_some());
    let bytes = with_graph.encode().unwrap();
    assert!(bytes.windows(6).any(|w| w == b"\xa5graph"));
    assert_eq!(ManagedState::decode(&bytes).unwrap(), with_graph);
}

#[test]
fn every_single_bit_flip_of_a_stored_snapshot_is_corruption() {
    let original = sealed(7).bytes;
    for part in 0..3 {
        let len = [&original.envelope, &original.signature, &original.payload][part].len();
        for i in 0..len {
            for bit in 0..8 {
                let mut bytes = original.clone();
                let target = match part {
                    0 => &mut bytes.envelope,
                    1 => &mut bytes.signature,
                    _ => &mut bytes.payload,
                };
                target[i] ^= 1 << bit;
                let outcome = open(&bytes, &binding(), &key());
                assert!(
                    matches!(outcome, LoadOutcome::Corrupted(_)),
                    "part {part} byte {i} bit {bit}: {outcome:?}"
                );
            }
        }
    }
}

fn arb_state() -> impl Strategy<Value = ManagedState> {
    (
        0usize..40,
        0u64..1_000_000,
        proptest::collection::btree_map("[a-z_]{1,12}", any::<u64>(), 0..4),
        proptest::collection::btree_map("[a-z]{1,8}", 0i64..4_000_000_000, 1..5),
        any::<u64>(),
        proptest::collection::vec(
            (0usize..4, 0i64..1_000_000, proptest::option::of(0i64..100)),
            0..4,
        ),
    )
        .prop_map(|(detector, frames, rejected, marks, version, gaps)| {
            let mut s = ManagedState::default();
            s.set_detector(&self::detector(detector)).unwrap();
            s.counters.frames = frames;
            s.counters.observations_rejected = rejected;
            s.watermarks = Watermarks(
                marks
                    .into_iter()
                    .map(|(k, t)| (k, Utc.timestamp_opt(t, 0).unwrap()))
                    .collect(),
            );
            s.coverage = CoverageHistory::fresh(at(0));
            let causes = [GapCause::MqttOutage, GapCause::CheckpointStall];
            let mut t = version % 1000;
            for (c, from, len) in gaps {
                t += from as u64 % 1000 + 1;
                s.coverage.record_frame(at(t as i64));
                s.coverage.open_gap(causes[c % 2], at(t as i64 + 1));
                if let Some(l) = len {
                    t += l as u64 + 2;
                    s.coverage.close_gap(causes[c % 2], at(t as i64));
                }
            }
            s
        })
}

proptest! {
    #[test]
    fn round_trip_is_bit_exact(s in arb_state(), micros in 0i64..4_000_000_000_000_000) {
        let saved_at = DateTime::from_timestamp_micros(micros).unwrap();
        let sealed = seal(&binding(), &s, saved_at, &key()).unwrap();
        let r = restored(open(&sealed.bytes, &binding(), &key()));
        prop_assert_eq!(&r.state, &s);
        let again = seal(&binding(), &r.state, r.envelope.saved_at, &key()).unwrap();
        prop_assert_eq!(again.bytes, sealed.bytes);
    }

    #[test]
    fn any_flipped_bit_in_envelope_signature_or_payload_is_corruption(
        part in 0usize..3,
        position in any::<prop::sample::Index>(),
        bit in 0u8..8,
    ) {
        let mut bytes = sealed(7).bytes;
        let target = match part {
            0 => &mut bytes.envelope,
            1 => &mut bytes.signature,
            _ => &mut bytes.payload,
        };
        let i = position.index(target.len());
        target[i] ^= 1 << bit;
        let outcome = open(&bytes, &binding(), &key());
        prop_assert!(matches!(outcome, LoadOutcome::Corrupted(_)), "part {} byte {} bit {}: {:?}", part, i, bit, outcome);
    }

    #[test]
    fn opening_arbitrary_bytes_never_panics_and_never_restores(
        envelope in proptest::collection::vec(any::<u8>(), 0..300),
        signature in proptest::collection::vec(any::<u8>(), 0..40),
        payload in proptest::collection::vec(any::<u8>(), 0..100),
    ) {
        let bytes = SnapshotBytes { envelope, signature, payload };
        let outcome = open(&bytes, &binding(), &key());
        prop_assert!(!matches!(outcome, LoadOutcome::Restored(_) | LoadOutcome::Missing));
    }
}

/// An envelope bound to `config`'s graph run, over `payload`.
fn graph_envelope_for(config: &MonitorConfig, payload: &[u8]) -> Envelope {
    let binding = SnapshotBinding::for_monitor(service(), config);
    Envelope {
        config_fingerprint: binding.config_fingerprint,
        runtime_versions: binding.runtime_versions,
        graph: binding.graph,
        ..envelope_for(payload)
    }
}

#[test]
fn a_graph_binding_mismatch_is_reported_before_an_undecodable_payload_is_decoded() {
    let snapshot = graph_monitor(&"a".repeat(64), "plant/pump7/flow");
    let bytes = signed(
        &graph_envelope_for(&snapshot, UNDECODABLE),
        UNDECODABLE.to_vec(),
        &key(),
    );
    // Control: under its own binding the payload reaches the decoder and fails.
    assert_eq!(
        corrupt_reason(open_as_bytes(&bytes, &snapshot)).code(),
        "undecodable_payload"
    );
    for now in [
        graph_monitor(&"b".repeat(64), "plant/pump7/flow"),
        graph_monitor(&"a".repeat(64), "plant/pump8/flow"),
    ] {
        let reason = incompatible_reason(open_as_bytes(&bytes, &now));
        assert_eq!(reason.code(), "graph_changed", "{reason}");
    }
}

#[test]
fn a_snapshot_without_a_graph_binding_read_by_a_graph_run_is_a_graph_change() {
    let bytes = signed(&envelope_for(UNDECODABLE), UNDECODABLE.to_vec(), &key());
    let now = graph_monitor(&"a".repeat(64), "plant/pump7/flow");
    let reason = incompatible_reason(open_as_bytes(&bytes, &now));
    let IncompatibleReason::GraphChanged(change) = &reason else {
        panic!("{reason:?}")
    };
    assert_eq!(
        change.semantics.as_ref().map(|s| s.0.as_str()),
        Some("none (not a graph run)")
    );
}

#[test]
fn a_payload_whose_graph_binding_differs_from_the_signed_one_is_inconsistent() {
    let config = graph_monitor(&"a".repeat(64), "plant/pump7/flow");
    let mut sealed = graph_sealed(&config);
    // Re-sign the same payload under an envelope claiming another binding,
    // as only a key holder could; the decoder's cross-check catches it.
    let other = graph_monitor(&"b".repeat(64), "plant/pump7/flow");
    let mut envelope = sealed.envelope.clone();
    envelope.graph = SnapshotBinding::for_monitor(service(), &other).graph;
    envelope.config_fingerprint = other.fingerprint();
    sealed.bytes = signed(&envelope, sealed.bytes.payload, &key());
    let reason = corrupt_reason(open_as_bytes(&sealed.bytes, &other));
    assert!(
        matches!(&reason, CorruptReason::Inconsistent(m) if m.contains("graph binding")),
        "{reason}"
    );
}

#[test]
fn inspection_of_an_incompatible_graph_snapshot_never_decodes_its_payload() {
    let snapshot = graph_monitor(&"a".repeat(64), "plant/pump7/flow");
    let bytes = signed(
        &graph_envelope_for(&snapshot, UNDECODABLE),
        UNDECODABLE.to_vec(),
        &key(),
    );
    let now = graph_monitor(&"b".repeat(64), "plant/pump7/flow");
    let binding = SnapshotBinding::for_monitor(service(), &now);
    let columns = || UnverifiedColumns {
        processed_count: None,
        saved_at: None,
    };
    let inspection = Inspection::of(verify(&bytes, &key()), &bytes, columns(), &binding, &key());
    assert_eq!(inspection.reason_code, Some("graph_changed"));
    assert!(inspection.verified && !inspection.compatible);
    assert!(inspection.counters.is_none() && inspection.coverage.is_none());
    assert_eq!(
        inspection.envelope.unwrap().graph.unwrap().semantics_hash,
        "a".repeat(64),
        "the signed binding is shown"
    );
    // Under its own binding the same payload is decoded, and fails.
    let own = SnapshotBinding::for_monitor(service(), &snapshot);
    let inspection = Inspection::of(verify(&bytes, &key()), &bytes, columns(), &own, &key());
    assert_eq!(inspection.reason_code, Some("undecodable_payload"));
}

#[test]
fn a_format_1_envelope_is_refused_by_name() {
    let mut envelope = sealed(7).envelope;
    envelope.format_version = 1;
    let bytes = signed(&envelope, sealed(7).bytes.payload, &key());
    let reason = incompatible_reason(open(&bytes, &binding(), &key()));
    assert_eq!(
        reason,
        IncompatibleReason::FormatVersion {
            snapshot: 1,
            running: FORMAT_VERSION
        }
    );
    assert!(reason.to_string().contains("format version 1"), "{reason}");
}

fn open_as_bytes(bytes: &SnapshotBytes, config: &MonitorConfig) -> LoadOutcome {
    open(
        bytes,
        &SnapshotBinding::for_monitor(service(), config),
        &key(),
    )
}
