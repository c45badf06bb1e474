//! Opening stored snapshot bytes in the safe order: the signature and
//! digest (`verify`), the compatibility checks on the signed envelope, and
//! only then the payload decoder.

use std::fmt;

use hmac::Mac;
use sha2::{Digest, Sha256};

use super::{FencingToken, SnapshotBinding, SnapshotBytes, check_compatible};
use crate::detector::Detector;
use crate::snapshot::{
    CheckpointKey, CorruptReason, Corrupted, Envelope, FORMAT_VERSION, Incompatible,
    IncompatibleReason, LoadOutcome, ManagedState, Restored,
};

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
    if let Some(graph) = &state.graph
        && env.graph.as_ref() != Some(&graph.bound)
    {
        return Err(CorruptReason::Inconsistent(
            "the payload's graph binding differs from the signed envelope's".into(),
        ));
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
    // Every compatibility check runs on the signed envelope: an
    // incompatible payload is never decoded.
    if let Err(reason) = check_compatible(&verified.envelope, binding, key) {
        return LoadOutcome::Incompatible(Incompatible { service_id, reason });
    }
    match decode_verified(&verified, bytes) {
        Ok((state, detector)) => {
            if binding.graph.is_some() && state.graph.is_none() && state.counters.frames > 0 {
                return LoadOutcome::Corrupted(Corrupted {
                    service_id,
                    reason: CorruptReason::Inconsistent(format!(
                        "a graph run's snapshot counts {} frames but carries no graph state",
                        state.counters.frames
                    )),
                });
            }
            LoadOutcome::Restored(Box::new(Restored {
                envelope: verified.envelope,
                state,
                detector,
                token: verified.token,
            }))
        }
        Err(reason) => LoadOutcome::Corrupted(Corrupted { service_id, reason }),
    }
}
