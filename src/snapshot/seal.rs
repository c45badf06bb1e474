//! Sealing state into signed snapshot bytes, and opening them again in the
//! only safe order: signature, digest, compatibility (graph binding
//! included), history rule, all on signed envelope fields, and only then
//! the payload decoder.

use std::fmt;

use chrono::{DateTime, SubsecRound, Utc};
use hmac::Mac;
use sha2::{Digest, Sha256};
use thiserror::Error;
use uuid::Uuid;

use super::{
    BoundGraph, CheckpointKey, CorruptReason, Corrupted, Envelope, FORMAT_VERSION, GraphChange,
    Incompatible, IncompatibleReason, LoadOutcome, ManagedState, Restored, key::hex,
    runtime_versions, version_changes,
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
    /// A graph run's semantics and resolved readings (both also enter the
    /// fingerprint); kept apart so a mismatch can say which one changed.
    pub graph: Option<BoundGraph>,
}

impl SnapshotBinding {
    /// The binding of a monitor run by this binary. A graph run's runtime
    /// versions also name the version of the graph nodes' arithmetic.
    pub fn for_monitor(service_id: Uuid, config: &MonitorConfig) -> Self {
        let graph = config.graph.as_ref().map(|g| BoundGraph {
            semantics_hash: g.semantics_hash.clone(),
            readings: config.readings.clone(),
        });
        let mut versions = runtime_versions();
        if graph.is_some() {
            versions.push_str(&format!(",graph={}", crate::graph::NODES_VERSION));
        }
        Self {
            service_id,
            config_fingerprint: config.fingerprint(),
            runtime_versions: versions,
            graph,
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
        graph: binding.graph.clone(),
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

/// The compatibility checks and the empty-history rule, on a verified
/// envelope: every one on signed envelope fields, so none needs the payload.
/// A graph run's binding is compared before the config fingerprint (which
/// covers it too), so its refusal says what changed in the graph.
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
    if let Some(change) = graph_change(binding, envelope.graph.as_ref()) {
        return Err(change);
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

/// What differs between the graph binding a run's snapshot was signed
/// under (its envelope's) and the one the run is bound to now; `None` when
/// nothing does, or for a plain monitor (its config fingerprint covers the
/// rest). A snapshot without a graph binding read by a graph run differs in
/// everything.
pub fn graph_change(
    binding: &SnapshotBinding,
    stored: Option<&BoundGraph>,
) -> Option<IncompatibleReason> {
    let expected = binding.graph.as_ref()?;
    let (stored_hash, stored_readings) = match stored {
        Some(s) => (s.semantics_hash.as_str(), s.readings.as_slice()),
        None => ("none (not a graph run)", &[][..]),
    };
    let semantics = (stored_hash != expected.semantics_hash)
        .then(|| (stored_hash.to_string(), expected.semantics_hash.clone()));
    let readings = reading_changes(stored_readings, &expected.readings);
    if semantics.is_none() && readings.is_empty() {
        return None;
    }
    Some(IncompatibleReason::GraphChanged(GraphChange {
        semantics,
        readings,
    }))
}

/// Each reading whose topic (or presence, or requirement) differs, as
/// `name: snapshot -> now`, in name order.
fn reading_changes(
    stored: &[crate::config::ReadingConfig],
    now: &[crate::config::ReadingConfig],
) -> Vec<String> {
    let describe = |r: Option<&crate::config::ReadingConfig>| match r {
        None => "absent".to_string(),
        Some(r) if r.required => r.topic.clone(),
        Some(r) => format!("{} (optional)", r.topic),
    };
    let mut names: Vec<&str> = stored.iter().chain(now).map(|r| r.name.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    let position = |list: &[crate::config::ReadingConfig], name: &str| {
        list.iter().position(|r| r.name == name)
    };
    names
        .into_iter()
        .filter_map(|name| {
            let (a, b) = (position(stored, name), position(now, name));
            let (ra, rb) = (a.map(|i| &stored[i]), b.map(|i| &now[i]));
            (ra != rb || a != b).then(|| {
                let order = if a != b && ra.is_some() && rb.is_some() {
                    " (moved in the frame order)"
                } else {
                    ""
                };
                format!("{name}: {} -> {}{order}", describe(ra), describe(rb))
            })
        })
        .collect()
}
