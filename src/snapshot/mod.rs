//! Signed recovery snapshots: the envelope, the payload, signing and the
//! ordered checks that decide whether a stored snapshot may be restored.
//!
//! Pure code: no clock, no database. `crate::store::checkpoints` keeps the
//! bytes in PostgreSQL and fences writers with the signature.
//!
//! # Layout
//! - `key`: the signing key and its public key id.
//! - `versions`: the runtime versions a snapshot is bound to.
//! - `envelope`: the signed fields and their canonical bytes.
//! - `state`: the payload (`ManagedState`).
//! - `seal`: signing, verification, compatibility, decoding.
//! - `outcome`: load outcomes and operator-facing reasons.
//! - `inspect`: the operator's view of a stored snapshot.

mod envelope;
mod inspect;
mod key;
mod outcome;
mod seal;
mod state;
mod versions;

pub use envelope::{Envelope, EnvelopeError};
pub use inspect::{EnvelopeView, Inspection, ObservationFates, UnverifiedColumns};
pub use key::CheckpointKey;
pub use outcome::{
    CorruptReason, Corrupted, GraphChange, Incompatible, IncompatibleReason, LoadOutcome, Restored,
};
pub use seal::{
    FencingToken, Refusal, SealError, SealedSnapshot, SnapshotBinding, SnapshotBytes, Verified,
    check_compatible, decode_verified, graph_change, open, open_verified, seal, verify,
};
pub use state::{BoundGraph, GraphCheckpoint, ManagedState, ProcessingCounters, RecoveryMetadata};
pub use versions::{
    FORMAT_VERSION, SCIENTIFIC_CRATES, VersionChange, runtime_versions, version_changes,
};

#[cfg(test)]
pub(crate) mod tests;
