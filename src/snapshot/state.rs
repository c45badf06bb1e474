//! The snapshot payload: everything a replacement worker needs to resume a
//! monitor where the last committed checkpoint left it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use chrono::{DateTime, Utc};

use crate::{
    align::{AlignmentCounters, Watermarks},
    config::ReadingConfig,
    coverage::CoverageHistory,
    detector::Detector,
    graph::GraphState,
};

/// The managed state of one monitor, serialized with rmp-serde.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ManagedState {
    /// The detector's serialized state (rmp-serde), including its training
    /// and calibration frames while a fit is pending; empty before a
    /// detector exists. Write it with [`ManagedState::set_detector`].
    #[serde(with = "serde_bytes")]
    pub detector: Vec<u8>,
    pub counters: ProcessingCounters,
    pub coverage: CoverageHistory,
    /// Highest accepted source timestamp per reading: the replay boundary.
    pub watermarks: Watermarks,
    pub recovery: RecoveryMetadata,
    /// The aligner's own counts (accepted, superseded, rejections by reason).
    #[serde(default)]
    pub alignment: AlignmentCounters,
    /// The alarm open at save time (sequence number, opened at), so its
    /// close can be written as a whole row after a restore.
    #[serde(default)]
    pub open_alarm: Option<(u64, DateTime<Utc>)>,
    /// A graph run's executor state (its `detector` stays empty). Absent
    /// for plain monitors, and in snapshots written before graph runs
    /// executed, so their payload bytes are unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub graph: Option<GraphCheckpoint>,
    /// Values waiting in the partial frame at save time. They are not saved,
    /// so a restore discards them and reports how many. Left out at zero,
    /// so such payloads keep their bytes.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub partial_observations: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// What a graph run's state was computed under: the revision's executable
/// semantics and the readings as resolved to topics. Together with the
/// envelope's runtime versions this is what a graph run's snapshot is bound to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BoundGraph {
    pub semantics_hash: String,
    /// In frame order.
    pub readings: Vec<ReadingConfig>,
}

/// A graph run's part of a snapshot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GraphCheckpoint {
    pub bound: BoundGraph,
    pub state: GraphState,
}

/// Cumulative counts since the monitor was created, carried across restarts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessingCounters {
    pub observations_received: u64,
    pub observations_accepted: u64,
    /// Rejected observations by reason (`stale`, `too_old`, `future`, ...).
    /// A sorted map, so equal counters always encode to equal bytes.
    pub observations_rejected: BTreeMap<String, u64>,
    /// Frames the detector processed; the envelope's processed count.
    pub frames: u64,
    pub frames_flagged: u64,
    pub alarms_opened: u64,
}

/// What the last restore did, beyond what the coverage history already
/// records about it (save time, restore time and restore count live in
/// `CoverageHistory::last_restore`, so they have one source).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecoveryMetadata {
    /// Processed count of the snapshot the last restore started from.
    pub restored_processed_count: Option<u64>,
    /// Observations sitting in partial frames that the last restore discarded.
    pub cleared_partial_observations: u64,
}

impl ManagedState {
    /// The canonical payload bytes.
    pub fn encode(&self) -> Result<Vec<u8>, rmp_serde::encode::Error> {
        rmp_serde::to_vec_named(self)
    }

    /// Reads payload bytes. Only ever called on verified, compatible bytes
    /// (see `seal::open`); exposed for the fuzz target.
    pub fn decode(bytes: &[u8]) -> Result<Self, rmp_serde::decode::Error> {
        rmp_serde::from_slice(bytes)
    }

    /// Stores the detector in the payload, in the one format snapshots use.
    pub fn set_detector(&mut self, detector: &Detector) -> Result<(), rmp_serde::encode::Error> {
        self.detector = rmp_serde::to_vec_named(detector)?;
        Ok(())
    }

    /// The stored detector, `None` when none was stored. Restores get it
    /// already decoded (see `Restored::detector`).
    pub fn decode_detector(&self) -> Result<Option<Detector>, rmp_serde::decode::Error> {
        if self.detector.is_empty() {
            return Ok(None);
        }
        rmp_serde::from_slice(&self.detector).map(Some)
    }

    /// Readings with a watermark: the envelope's observation history length.
    pub fn observation_history_len(&self) -> u32 {
        u32::try_from(self.watermarks.0.len()).unwrap_or(u32::MAX)
    }
}
