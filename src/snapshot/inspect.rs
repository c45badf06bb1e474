//! An operator's view of a stored snapshot: what it says, whether it is
//! authentic, and whether this binary would restore it.

use chrono::{DateTime, Utc};
use serde::Serialize;
use uuid::Uuid;

use super::{
    BoundGraph, CheckpointKey, Envelope, ManagedState, ProcessingCounters, RecoveryMetadata,
    Refusal, SnapshotBinding, SnapshotBytes, Verified, check_compatible, decode_verified, key::hex,
};
use crate::{align::Watermarks, coverage::CoverageHistory};

/// Everything `radar snapshot inspect` shows. `verified && compatible` holds
/// exactly when a worker would restore the snapshot.
#[derive(Debug, Clone, Serialize)]
pub struct Inspection {
    pub service_id: Uuid,
    /// Whether the monitor has a snapshot row at all.
    pub present: bool,
    /// Signature, envelope, row columns and payload digest check out (and,
    /// for a compatible snapshot, decoding).
    pub verified: bool,
    /// Bound to this monitor, its current config, this binary and this key.
    pub compatible: bool,
    /// Why it would not be restored, for people; `null` when it would.
    pub reason: Option<String>,
    /// The same as a stable code (`bad_signature`, `config_changed`, ...).
    pub reason_code: Option<&'static str>,
    /// From the signed envelope once verified; else the row's unverified columns.
    pub processed_count: Option<u64>,
    pub saved_at: Option<DateTime<Utc>>,
    /// The detector's phase; `null` when no detector was stored or the
    /// bytes could not be verified.
    pub phase: Option<String>,
    pub envelope: Option<EnvelopeView>,
    /// Short form of the row's signature (its fencing token).
    pub fencing_token: Option<String>,
    /// Decoded only from authentic bytes (signature and digest verified)
    /// that this monitor could restore: an incompatible payload is never
    /// decoded, like a worker never decodes one.
    pub counters: Option<ProcessingCounters>,
    pub coverage: Option<CoverageHistory>,
    pub watermarks: Option<Watermarks>,
    pub recovery: Option<RecoveryMetadata>,
    /// Where every received observation went, from authentic bytes.
    pub fates: Option<ObservationFates>,
}

/// Every observation's fate at save time: `received` equals `accepted`
/// (values of the frames the detector took, plus optional readings) plus
/// each rejection reason (superseded, expired, skew, partial_cleared and
/// the admission reasons) plus `held` (waiting in the partial frame).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ObservationFates {
    pub received: u64,
    pub accepted: u64,
    pub rejected: u64,
    pub held: u64,
    /// `received - accepted - rejected - held`; 0 when every observation
    /// is accounted for.
    pub unaccounted: i128,
}

impl ObservationFates {
    pub fn of(state: &ManagedState) -> Self {
        let c = &state.counters;
        let rejected = c
            .observations_rejected
            .values()
            .fold(0u64, |sum, n| sum.saturating_add(*n));
        let received = c.observations_received;
        let accepted = c.observations_accepted;
        let held = state.partial_observations;
        Self {
            received,
            accepted,
            rejected,
            held,
            unaccounted: i128::from(received)
                - i128::from(accepted)
                - i128::from(rejected)
                - i128::from(held),
        }
    }
}

/// The signed envelope, in printable form.
#[derive(Debug, Clone, Serialize)]
pub struct EnvelopeView {
    pub format_version: u16,
    pub service_id: Uuid,
    pub config_fingerprint: String,
    pub runtime_versions: String,
    pub processed_count: u64,
    pub observation_history_len: u32,
    pub saved_at: DateTime<Utc>,
    pub payload_len: u64,
    pub payload_sha256: String,
    pub key_id: String,
    /// A graph run's signed binding: semantics hash and resolved readings.
    pub graph: Option<BoundGraph>,
}

impl From<&Envelope> for EnvelopeView {
    fn from(e: &Envelope) -> Self {
        Self {
            format_version: e.format_version,
            service_id: e.service_id,
            config_fingerprint: hex(&e.config_fingerprint),
            runtime_versions: e.runtime_versions.clone(),
            processed_count: e.processed_count,
            observation_history_len: e.observation_history_len,
            saved_at: e.saved_at,
            payload_len: e.payload_len,
            payload_sha256: hex(&e.payload_sha256),
            key_id: e.key_id.clone(),
            graph: e.graph.clone(),
        }
    }
}

/// What the row says about itself outside the signed bytes.
#[derive(Debug, Clone)]
pub struct UnverifiedColumns {
    pub processed_count: Option<u64>,
    pub saved_at: Option<DateTime<Utc>>,
}

impl Inspection {
    /// A monitor without a snapshot row.
    pub fn missing(service_id: Uuid) -> Self {
        Self {
            service_id,
            present: false,
            verified: false,
            compatible: false,
            reason: Some("the monitor has no snapshot (it starts fresh)".into()),
            reason_code: Some("missing"),
            processed_count: None,
            saved_at: None,
            phase: None,
            envelope: None,
            fencing_token: None,
            counters: None,
            coverage: None,
            watermarks: None,
            recovery: None,
            fates: None,
        }
    }

    /// Inspects bytes whose verification result is already known (the
    /// store adds its own column check to `verify`).
    pub fn of(
        verification: Result<Verified, Refusal>,
        bytes: &SnapshotBytes,
        columns: UnverifiedColumns,
        binding: &SnapshotBinding,
        key: &CheckpointKey,
    ) -> Self {
        let mut view = Self {
            present: true,
            processed_count: columns.processed_count,
            saved_at: columns.saved_at,
            fencing_token: (bytes.signature.len() >= 6).then(|| hex(&bytes.signature[..6])),
            ..Self::missing(binding.service_id)
        };
        let verified = match verification {
            Ok(verified) => verified,
            Err(refusal) => {
                view.refuse(&refusal);
                return view;
            }
        };
        view.envelope = Some((&verified.envelope).into());
        view.processed_count = Some(verified.envelope.processed_count);
        view.saved_at = Some(verified.envelope.saved_at);
        view.verified = true;
        // Like a worker: the payload is decoded only once every check on
        // the signed envelope passed.
        if let Err(reason) = check_compatible(&verified.envelope, binding, key) {
            view.refuse(&Refusal::Incompatible(reason));
            return view;
        }
        match decode_verified(&verified, bytes) {
            Ok((state, detector)) => {
                view.phase = detector.map(|d| d.phase().as_str().to_string());
                view.show(state);
                view.compatible = true;
                view.reason = None;
                view.reason_code = None;
            }
            Err(reason) => view.refuse(&Refusal::Corrupted(reason)),
        }
        view
    }

    fn refuse(&mut self, refusal: &Refusal) {
        self.reason = Some(refusal.to_string());
        self.reason_code = Some(refusal.code());
        // An incompatible snapshot that is authentic stays `verified`.
        if let Refusal::Corrupted(_) = refusal {
            self.verified = false;
        }
        self.compatible = false;
    }

    fn show(&mut self, state: ManagedState) {
        self.fates = Some(ObservationFates::of(&state));
        self.counters = Some(state.counters);
        self.coverage = Some(state.coverage);
        self.watermarks = Some(state.watermarks);
        self.recovery = Some(state.recovery);
    }

    /// `0` when a worker would restore the snapshot, `2` otherwise.
    pub fn exit_code(&self) -> u8 {
        if self.verified && self.compatible {
            0
        } else {
            2
        }
    }
}
