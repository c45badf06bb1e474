//! Sealing state into signed snapshot bytes, and opening them again in the
//! only safe order: signature, digest, compatibility (graph binding
//! included), history rule, all on signed envelope fields, and only then
//! the payload decoder.
//!
//! This file holds sealing and the types it produces; `unseal` verifies
//! and opens stored bytes, `compat` holds the compatibility checks.

mod compat;
mod unseal;

use std::fmt;

use chrono::{DateTime, SubsecRound, Utc};
use hmac::Mac;
use sha2::{Digest, Sha256};
use thiserror::Error;
use uuid::Uuid;

use super::{
    BoundGraph, CheckpointKey, Envelope, FORMAT_VERSION, ManagedState, key::hex, runtime_versions,
};
use crate::config::MonitorConfig;

pub use self::compat::{check_compatible, graph_change};
pub use self::unseal::{Refusal, Verified, decode_verified, open, open_verified, verify};

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
