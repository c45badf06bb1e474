//! What loading a snapshot can end in, and what the operator should do.

use std::fmt;

use thiserror::Error;
use uuid::Uuid;

use super::{Envelope, EnvelopeError, FencingToken, ManagedState, VersionChange};
use crate::detector::Detector;

/// The result of loading a monitor's snapshot.
#[derive(Debug)]
pub enum LoadOutcome {
    /// No snapshot: start a new detector.
    Missing,
    /// A verified, compatible snapshot, decoded.
    Restored(Box<Restored>),
    /// The bytes are damaged or forged: the monitor must not start.
    Corrupted(Corrupted),
    /// Authentic (or signed with another key) but not for this binary,
    /// monitor or config: the monitor must not start.
    Incompatible(Incompatible),
}

/// A snapshot that passed every check, with the token that fences the
/// next checkpoint.
#[derive(Debug, Clone)]
pub struct Restored {
    pub envelope: Envelope,
    pub state: ManagedState,
    /// `state.detector`, decoded; `None` if the snapshot held no detector.
    pub detector: Option<Detector>,
    pub token: FencingToken,
}

/// A snapshot whose bytes cannot be trusted.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error(
    "The snapshot of monitor {service_id} is corrupted: {reason}. It was not restored. \
     Find out who changed the row; to start over, retire this monitor and create a new one \
     (fresh calibration)."
)]
pub struct Corrupted {
    pub service_id: Uuid,
    pub reason: CorruptReason,
}

/// A snapshot this worker may not restore.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("The snapshot of monitor {service_id} is incompatible: {reason}. It was not restored. {}", reason.remedy())]
pub struct Incompatible {
    pub service_id: Uuid,
    pub reason: IncompatibleReason,
}

/// Why snapshot bytes are not trustworthy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CorruptReason {
    /// The signature does not verify under this worker's key.
    BadSignature,
    /// The stored signature has the wrong length.
    TruncatedSignature { len: usize },
    /// The envelope is cut short, damaged or not a radar snapshot.
    Envelope(EnvelopeError),
    /// The payload is shorter or longer than the signed length.
    TruncatedPayload { expected: u64, actual: u64 },
    /// The payload's SHA-256 differs from the signed digest.
    DigestMismatch,
    /// The signed payload could not be decoded (a writer bug, not tampering).
    Undecodable(String),
    /// The decoded payload disagrees with its signed envelope.
    Inconsistent(String),
    /// A readable column of the row disagrees with the signed envelope.
    ColumnMismatch(&'static str),
    /// Authentic, but not the newest snapshot the monitor committed: the
    /// checkpoint ledger records checkpoint `latest` with another
    /// signature (`None`: it records none).
    Replayed { latest: Option<u64> },
}

/// Why an authentic snapshot cannot be restored by this worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IncompatibleReason {
    /// The envelope names another monitor.
    OtherService { snapshot: Uuid },
    /// The monitoring or alignment config changed since the snapshot.
    ConfigChanged { snapshot: String, running: String },
    /// A numeric crate or the detector algorithm changed.
    RuntimeVersions(Vec<VersionChange>),
    /// Another snapshot format.
    FormatVersion { snapshot: u16, running: u16 },
    /// Signed with a key other than this worker's.
    AnotherKey { snapshot: String, running: String },
    /// Observations were processed but no watermark kept: restoring it would
    /// let replayed input advance the detector.
    NoObservationHistory { processed_count: u64 },
    /// A graph run's snapshot was computed under other executable semantics
    /// or other resolved readings than the run is bound to now.
    GraphChanged(GraphChange),
}

/// What changed in a graph run's binding since its snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GraphChange {
    /// The semantics hash in the snapshot and now, when they differ.
    pub semantics: Option<(String, String)>,
    /// Each changed reading, `name: topic in the snapshot -> topic now`.
    pub readings: Vec<String>,
}

impl CorruptReason {
    /// A stable snake_case code for JSON and metrics.
    pub fn code(&self) -> &'static str {
        match self {
            Self::BadSignature => "bad_signature",
            Self::TruncatedSignature { .. } => "truncated_signature",
            Self::Envelope(EnvelopeError::Truncated(_)) => "truncated_envelope",
            Self::Envelope(_) => "damaged_envelope",
            Self::TruncatedPayload { .. } => "truncated_payload",
            Self::DigestMismatch => "digest_mismatch",
            Self::Undecodable(_) => "undecodable_payload",
            Self::Inconsistent(_) => "inconsistent_payload",
            Self::ColumnMismatch(_) => "column_mismatch",
            Self::Replayed { .. } => "replayed",
        }
    }
}

impl fmt::Display for CorruptReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BadSignature => write!(f, "bad signature: the envelope was altered or forged"),
            Self::TruncatedSignature { len } => {
                write!(f, "truncated signature: {len} bytes instead of 32")
            }
            Self::Envelope(e) => write!(f, "damaged envelope: {e}"),
            Self::TruncatedPayload { expected, actual } => write!(
                f,
                "truncated payload: {actual} bytes stored, {expected} bytes signed"
            ),
            Self::DigestMismatch => {
                write!(
                    f,
                    "digest mismatch: the payload bytes are not the ones that were signed"
                )
            }
            Self::Undecodable(e) => write!(f, "undecodable payload: {e}"),
            Self::Inconsistent(e) => write!(f, "payload disagrees with its envelope: {e}"),
            Self::ColumnMismatch(column) => write!(
                f,
                "column {column} disagrees with the signed envelope: the row was edited"
            ),
            Self::Replayed { latest: Some(n) } => write!(
                f,
                "replayed: the row is an older signed snapshot, not checkpoint #{n} that the \
                 checkpoint ledger records as the newest commit; only a whole consistent \
                 database restore may roll a monitor back"
            ),
            Self::Replayed { latest: None } => write!(
                f,
                "replayed: the checkpoint ledger records no commit of this snapshot; only a \
                 whole consistent database restore may roll a monitor back"
            ),
        }
    }
}

impl IncompatibleReason {
    /// A stable snake_case code for JSON and metrics.
    pub fn code(&self) -> &'static str {
        match self {
            Self::OtherService { .. } => "other_service",
            Self::ConfigChanged { .. } => "config_changed",
            Self::RuntimeVersions(_) => "runtime_versions_changed",
            Self::FormatVersion { .. } => "format_version",
            Self::AnotherKey { .. } => "another_key",
            Self::NoObservationHistory { .. } => "no_observation_history",
            Self::GraphChanged(_) => "graph_changed",
        }
    }

    /// What the operator can do about it.
    pub fn remedy(&self) -> &'static str {
        match self {
            Self::OtherService { .. } => {
                "The row was copied from another monitor; delete the row or retire this monitor and create a new one (fresh calibration)."
            }
            Self::ConfigChanged { .. } => {
                "Restore the previous monitoring/alignment config, or, to use the new one, retire this monitor and create a new one (fresh calibration)."
            }
            Self::RuntimeVersions(_) | Self::FormatVersion { .. } => {
                "Deploy the binary that wrote the snapshot, or retire this monitor and create a new one (fresh calibration)."
            }
            Self::AnotherKey { .. } => {
                "Configure the checkpoint key that wrote it (RADAR_CHECKPOINT_SECRET[_FILE]), or retire this monitor and create a new one (fresh calibration)."
            }
            Self::NoObservationHistory { .. } => {
                "It cannot be restored safely; retire this monitor and create a new one (fresh calibration)."
            }
            Self::GraphChanged(_) => {
                "A graph run restores only under the semantics and readings it was checkpointed with: bind the run back to that revision, or activate the new revision for a fresh run (fresh calibration)."
            }
        }
    }
}

impl fmt::Display for IncompatibleReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::OtherService { snapshot } => {
                write!(f, "it belongs to another monitor ({snapshot})")
            }
            Self::ConfigChanged { snapshot, running } => write!(
                f,
                "the monitoring or alignment config changed (fingerprint {snapshot} in the snapshot, {running} now)"
            ),
            Self::RuntimeVersions(changes) => {
                write!(f, "runtime versions changed: ")?;
                for (i, change) in changes.iter().enumerate() {
                    if i > 0 {
                        write!(f, "; ")?;
                    }
                    write!(f, "{change}")?;
                }
                Ok(())
            }
            Self::FormatVersion { snapshot, running } => write!(
                f,
                "snapshot format version {snapshot}, this binary reads version {running}"
            ),
            Self::AnotherKey { snapshot, running } => write!(
                f,
                "signed with another key (key id {snapshot}; this worker's key id is {running})"
            ),
            Self::NoObservationHistory { processed_count } => write!(
                f,
                "it counts {processed_count} processed frames but keeps no observation history (watermarks)"
            ),
            Self::GraphChanged(change) => {
                write!(f, "the graph run's binding changed: ")?;
                if let Some((snapshot, running)) = &change.semantics {
                    write!(
                        f,
                        "executable semantics hash {} in the snapshot, {} now",
                        short(snapshot),
                        short(running)
                    )?;
                    if !change.readings.is_empty() {
                        write!(f, "; ")?;
                    }
                }
                if !change.readings.is_empty() {
                    write!(f, "resolved readings {}", change.readings.join(", "))?;
                }
                Ok(())
            }
        }
    }
}

/// The first 12 characters of a hex hash, enough to tell revisions apart.
fn short(hash: &str) -> &str {
    hash.get(..12).unwrap_or(hash)
}
