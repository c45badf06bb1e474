//! A snapshot row as read back from PostgreSQL, and the checks that decide
//! whether it may be trusted: the signed bytes first, then the readable
//! columns against them, then the checkpoint ledger (is it the newest
//! commit, not an older signed row written back?).

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use uuid::Uuid;

use super::schema::radar_runtime_checkpoints as rows;
use crate::snapshot::{
    CheckpointKey, CorruptReason, Corrupted, Envelope, Incompatible, Inspection, LoadOutcome,
    Refusal, SnapshotBinding, SnapshotBytes, UnverifiedColumns, Verified, open_verified, verify,
};

/// A snapshot row as stored, not yet trusted, with what the checkpoint
/// ledger says about the monitor's newest commit.
#[derive(Debug, Clone)]
pub struct StoredSnapshot {
    columns: SnapshotColumns,
    ledger: Option<LedgerEntry>,
}

/// The ledger's record of a monitor's newest committed snapshot.
#[derive(Debug, Clone, Queryable)]
pub(super) struct LedgerEntry {
    pub sequence: i64,
    pub signature: Vec<u8>,
}

/// The snapshot row's columns.
#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = rows)]
pub(super) struct SnapshotColumns {
    service_id: Uuid,
    envelope: Vec<u8>,
    format_version: i32,
    config_fingerprint: Vec<u8>,
    runtime_versions: String,
    processed_count: i64,
    observation_history_len: i32,
    saved_at: DateTime<Utc>,
    payload_sha256: Vec<u8>,
    key_id: String,
    signature: Vec<u8>,
    payload: Vec<u8>,
    writer_id: String,
    committed_at: DateTime<Utc>,
}

impl StoredSnapshot {
    pub(super) fn new(columns: SnapshotColumns, ledger: Option<LedgerEntry>) -> Self {
        Self { columns, ledger }
    }

    pub fn service_id(&self) -> Uuid {
        self.columns.service_id
    }

    /// The worker instance that committed the row (not signed).
    pub fn writer_id(&self) -> &str {
        &self.columns.writer_id
    }

    pub fn committed_at(&self) -> DateTime<Utc> {
        self.columns.committed_at
    }

    pub fn bytes(&self) -> SnapshotBytes {
        self.columns.bytes()
    }

    /// The raw signature column (whatever it holds).
    pub fn signature(&self) -> &[u8] {
        &self.columns.signature
    }

    /// How many snapshots of this monitor the ledger counts as committed.
    pub fn ledger_sequence(&self) -> Option<u64> {
        self.ledger
            .as_ref()
            .and_then(|l| u64::try_from(l.sequence).ok())
    }
}

impl SnapshotColumns {
    fn bytes(&self) -> SnapshotBytes {
        SnapshotBytes {
            envelope: self.envelope.clone(),
            signature: self.signature.clone(),
            payload: self.payload.clone(),
        }
    }
}

impl StoredSnapshot {
    /// [`verify`], plus a check that the readable columns say what the
    /// signed envelope says, and that the row is the newest commit the
    /// ledger recorded (a validly signed older row is a replay).
    pub fn verify(&self, key: &CheckpointKey) -> Result<Verified, Refusal> {
        let verified = verify(&self.bytes(), key)?;
        if let Some(column) = self.columns.column_mismatch(&verified.envelope) {
            return Err(Refusal::Corrupted(CorruptReason::ColumnMismatch(column)));
        }
        match &self.ledger {
            Some(newest) if newest.signature == self.columns.signature => Ok(verified),
            newest => Err(Refusal::Corrupted(CorruptReason::Replayed {
                latest: newest.as_ref().and_then(|l| u64::try_from(l.sequence).ok()),
            })),
        }
    }

    /// Verifies, checks compatibility and only then decodes.
    pub fn open(&self, binding: &SnapshotBinding, key: &CheckpointKey) -> LoadOutcome {
        let service_id = binding.service_id;
        match self.verify(key) {
            Ok(verified) => open_verified(verified, &self.bytes(), binding, key),
            Err(Refusal::Corrupted(reason)) => {
                LoadOutcome::Corrupted(Corrupted { service_id, reason })
            }
            Err(Refusal::Incompatible(reason)) => {
                LoadOutcome::Incompatible(Incompatible { service_id, reason })
            }
        }
    }

    /// What `radar snapshot inspect` shows about this row.
    pub fn inspect(&self, binding: &SnapshotBinding, key: &CheckpointKey) -> Inspection {
        let columns = UnverifiedColumns {
            processed_count: u64::try_from(self.columns.processed_count).ok(),
            saved_at: Some(self.columns.saved_at),
        };
        Inspection::of(self.verify(key), &self.bytes(), columns, binding, key)
    }
}

impl SnapshotColumns {
    fn column_mismatch(&self, env: &Envelope) -> Option<&'static str> {
        let checks = [
            ("service_id", self.service_id == env.service_id),
            (
                "format_version",
                self.format_version == i32::from(env.format_version),
            ),
            (
                "config_fingerprint",
                self.config_fingerprint == env.config_fingerprint,
            ),
            (
                "runtime_versions",
                self.runtime_versions == env.runtime_versions,
            ),
            (
                "processed_count",
                u64::try_from(self.processed_count) == Ok(env.processed_count),
            ),
            (
                "observation_history_len",
                u32::try_from(self.observation_history_len) == Ok(env.observation_history_len),
            ),
            ("saved_at", self.saved_at == env.saved_at),
            ("payload_sha256", self.payload_sha256 == env.payload_sha256),
            ("key_id", self.key_id == env.key_id),
        ];
        checks
            .into_iter()
            .find(|(_, ok)| !ok)
            .map(|(column, _)| column)
    }
}
