//! Sealing state into signed snapshot bytes, and opening them again in the
//! only safe order: signature, digest, compatibility, history rule, and
//! only then the payload decoder.

use std::fmt;

use chrono::{DateTime, SubsecRound, Utc};
use hmac::Mac;
use sha2::{Digest, Sha256};
use thiserror::Error;
use uuid::Uuid;

use super::{
    CheckpointKey, CorruptReason, Corrupted, Envelope, FORMAT_VERSION, Incompatible,
    IncompatibleReason, LoadOutcome, ManagedState, Restored, key::hex, runtime_versions,
    version_changes,
};
use crate::{config::MonitorConfig, detector::Detector};

/// The three stored byte strings of a snapshot, as read from or written to
/// a row. Untrusted until `open` says otherwise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotBytes {
    pub envelope: Vec<u8>,
    pub signature: Vec<u8>,
    pub payload: Vec<u8>,
}

/// A freshly signed snapshot, ready for the store.
#[derive(Debug, Clone)]
pub struct SealedSnapshot {
    pub envelope: Envelope,
    pub bytes: SnapshotBytes,
    pub token: FencingToken,
}

/// A snapshot's signature in its second role: the compare-and-swap token
/// that the next checkpoint of the same writer must find in the row.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct FencingToken([u8; 32]);

impl FencingToken {
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// The first 12 hex characters, enough to tell tokens apart in a table.
    pub fn short(&self) -> String {
        hex(&self.0[..6])
    }

    /// A token read back from a row; `None` unless it has 32 bytes.
    pub fn from_slice(bytes: &[u8]) -> Option<Self> {
        bytes.try_into().ok().map(Self)
    }
}

impl fmt::Debug for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FencingToken({})", self.short())
    }
}

/// What a snapshot must be bound to for this running monitor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotBinding {
    pub service_id: Uuid,
    pub config_fingerprint: [u8; 32],
    pub runtime_versions: String,
}

impl SnapshotBinding {
    /// The binding of a monitor run by this binary.
    pub fn for_monitor(service_id: Uuid, config: &MonitorConfig) -> Self {
        Self {
            service_id,
            config_fingerprint: config.fingerprint(),
            runtime_versions: runtime_versions(),
        }
    }
}

#[derive(Debug, Error)]
#[error("Could not encode the snapshot of monitor {service_id}: {source}")]
pub struct SealError {
    pub service_id: Uuid,
    #[source]
    pub source: rmp_serde::encode::Error,
}

/// Encodes and signs `state`. `saved_at` is cut to microseconds, the
/// precision the database keeps, so the stored envelope is the signed one.
pub fn seal(
    binding: &SnapshotBinding,
    state: &ManagedState,
    saved_at: DateTime<Utc>,
    key: &CheckpointKey,
) -> Result<SealedSnapshot, SealError> {
    let payload = state.encode().map_err(|source| SealError {
        service_id: binding.service_id,
        source,
    })?;
    let envelope = Envelope {
        format_version: FORMAT_VERSION,
        service_id: binding.service_id,
        config_fingerprint: binding.config_fingerprint,
        runtime_versions: binding.runtime_versions.clone(),
        processed_count: state.counters.frames,
        observation_history_len: state.observation_history_len(),
        saved_at: saved_at.trunc_subsecs(6),
        payload_len: payload.len() as u64,
        payload_sha256: Sha256::digest(&payload).into(),
        key_id: key.key_id(),
    };
    let envelope_bytes = envelope.encode();
    let mut mac = key.mac();
    mac.update(&envelope_bytes);
    let signature: [u8; 32] = mac.finalize().into_bytes().into();
    Ok(SealedSnapshot {
        envelope,
        bytes: SnapshotBytes {
            envelope: envelope_bytes,
            signature: signature.to_vec(),
            payload,
        },
        token: FencingToken(signature),
    })
}

/// Why snapshot bytes were refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    Corrupted(CorruptReason),
    Incompatible(IncompatibleReason),
}

impl Refusal {
    pub fn code(&self) -> &'static str {
        match self {
            Self::Corrupted(r) => r.code(),
            Self::Incompatible(r) => r.code(),
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Corrupted(r) => write!(f, "corrupted: {r}"),
            Self::Incompatible(r) => write!(f, "incompatible: {r}"),
        }
    }
}

/// Bytes whose signature and payload digest checked out.
#[derive(Debug, Clone)]
pub struct Verified {
    pub envelope: Envelope,
    pub token: FencingToken,
}

/// Authenticates snapshot bytes without looking inside the payload: the
/// signature (constant time), then the envelope, the payload length and
/// digest. A signature that fails under a key with another id is reported
/// as "another key"; the envelope's own check bytes keep a damaged key id
/// from passing for one.
pub fn verify(bytes: &SnapshotBytes, key: &CheckpointKey) -> Result<Verified, Refusal> {
    use Refusal::{Corrupted as C, Incompatible as I};
    let token =
        FencingToken::from_slice(&bytes.signature).ok_or(C(CorruptReason::TruncatedSignature {
            len: bytes.signature.len(),
        }))?;
    let version =
        Envelope::framed_version(&bytes.envelope).map_err(|e| C(CorruptReason::Envelope(e)))?;
    let mut mac = key.mac();
    mac.update(&bytes.envelope);
    if mac.verify_slice(&bytes.signature).is_err() {
        let running = key.key_id();
        return Err(match Envelope::parse(&bytes.envelope) {
            Ok(env) if env.key_id != running => I(IncompatibleReason::AnotherKey {
                snapshot: env.key_id,
                running,
            }),
            _ => C(CorruptReason::BadSignature),
        });
    }
    if version != FORMAT_VERSION {
        return Err(I(IncompatibleReason::FormatVersion {
            snapshot: version,
            running: FORMAT_VERSION,
        }));
    }
    let envelope = Envelope::parse(&bytes.envelope).map_err(|e| C(CorruptReason::Envelope(e)))?;
    let actual = bytes.payload.len() as u64;
    if actual != envelope.payload_len {
        return Err(C(CorruptReason::TruncatedPayload {
            expected: envelope.payload_len,
            actual,
        }));
    }
    let digest: [u8; 32] = Sha256::digest(&bytes.payload).into();
    if digest != envelope.payload_sha256 {
        return Err(C(CorruptReason::DigestMismatch));
    }
    Ok(Verified { envelope, token })
}

/// The compatibility checks and the empty-history rule, on a verified envelope.
pub fn check_compatible(
    envelope: &Envelope,
    binding: &SnapshotBinding,
    key: &CheckpointKey,
) -> Result<(), IncompatibleReason> {
    if envelope.service_id != binding.service_id {
        return Err(IncompatibleReason::OtherService {
            snapshot: envelope.service_id,
        });
    }
    if envelope.config_fingerprint != binding.config_fingerprint {
        return Err(IncompatibleReason::ConfigChanged {
            snapshot: hex(&envelope.config_fingerprint[..8]),
            running: hex(&binding.config_fingerprint[..8]),
        });
    }
    let changes = version_changes(&envelope.runtime_versions, &binding.runtime_versions);
    if !changes.is_empty() || envelope.runtime_versions != binding.runtime_versions {
        return Err(IncompatibleReason::RuntimeVersions(changes));
    }
    let running = key.key_id();
    if envelope.key_id != running {
        return Err(IncompatibleReason::AnotherKey {
            snapshot: envelope.key_id.clone(),
            running,
        });
    }
    if envelope.processed_count > 0 && envelope.observation_history_len == 0 {
        return Err(IncompatibleReason::NoObservationHistory {
            processed_count: envelope.processed_count,
        });
    }
    Ok(())
}

/// Decodes the payload of verified bytes, detector included, and checks it
/// against its envelope.
pub fn decode_verified(
    verified: &Verified,
    bytes: &SnapshotBytes,
) -> Result<(ManagedState, Option<Detector>), CorruptReason> {
    let state = ManagedState::decode(&bytes.payload)
        .map_err(|e| CorruptReason::Undecodable(e.to_string()))?;
    let env = &verified.envelope;
    if state.counters.frames != env.processed_count {
        return Err(CorruptReason::Inconsistent(format!(
            "{} frames counted, {} signed",
            state.counters.frames, env.processed_count
        )));
    }
    if state.observation_history_len() != env.observation_history_len {
        return Err(CorruptReason::Inconsistent(format!(
            "{} watermarks kept, {} signed",
            state.observation_history_len(),
            env.observation_history_len
        )));
    }
    let detector = state
        .decode_detector()
        .map_err(|e| CorruptReason::Undecodable(format!("detector: {e}")))?;
    Ok((state, detector))
}

/// Verifies, checks and only then decodes a stored snapshot.
pub fn open(bytes: &SnapshotBytes, binding: &SnapshotBinding, key: &CheckpointKey) -> LoadOutcome {
    let service_id = binding.service_id;
    match verify(bytes, key) {
        Ok(verified) => open_verified(verified, bytes, binding, key),
        Err(Refusal::Corrupted(reason)) => LoadOutcome::Corrupted(Corrupted { service_id, reason }),
        Err(Refusal::Incompatible(reason)) => {
            LoadOutcome::Incompatible(Incompatible { service_id, reason })
        }
    }
}

/// The second half of [`open`], for callers that verified the bytes
/// themselves (the store adds a check of the row's readable columns).
pub fn open_verified(
    verified: Verified,
    bytes: &SnapshotBytes,
    binding: &SnapshotBinding,
    key: &CheckpointKey,
) -> LoadOutcome {
    let service_id = binding.service_id;
    if let Err(reason) = check_compatible(&verified.envelope, binding, key) {
        return LoadOutcome::Incompatible(Incompatible { service_id, reason });
    }
    match decode_verified(&verified, bytes) {
        Ok((state, detector)) => LoadOutcome::Restored(Box::new(Restored {
            envelope: verified.envelope,
            state,
            detector,
            token: verified.token,
        })),
        Err(reason) => LoadOutcome::Corrupted(Corrupted { service_id, reason }),
    }
}
