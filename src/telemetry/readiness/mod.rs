//! The monitor board: one entry per admitted monitor, updated by the runtime
//! (through [`super::MonitorTelemetry`]) and read by `/readyz` and the gauge
//! callbacks. Cheap to clone and to update: the map lock is taken only to add
//! or remove a monitor, each entry has its own short lock, and the hot
//! counters (queue depth) are atomics.
//!
//! Readiness: the worker is ready when every monitor on the board is
//! [`MonitorState::Connected`]. A worker with no admitted monitor (an empty
//! shard) is ready: it is doing all that is asked of it, and reporting it
//! not-ready would only make an orchestrator restart a healthy process. A
//! monitor leaves the board when it is no longer admitted here (retired or
//! handed to another shard); a terminal monitor stays, so a failed startup or
//! a quarantine keeps the worker not-ready until an operator acts.
//!
//! This file holds the board and the readiness body; `slot` holds one
//! monitor's entry and its view.

mod slot;
#[cfg(test)]
mod tests;

use std::{
    collections::BTreeMap,
    sync::{Arc, PoisonError, RwLock},
    time::Duration,
};

use chrono::{DateTime, Utc};
use serde::Serialize;
use uuid::Uuid;

use super::condition::MonitorState;

pub use self::slot::MonitorView;
pub(crate) use self::slot::Slot;

/// What recovery reported when the monitor restored a snapshot.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Recovery {
    /// Processed count stored in the restored snapshot.
    pub restored_processed: u64,
    /// Partial frames discarded because their values predate the restart.
    pub partial_frames_cleared: u64,
    /// Restored save time -> first new frame; `None` until that frame.
    pub possible_gap: Option<Duration>,
}

/// Every admitted monitor of this worker, and what keeps the worker as a
/// whole from being ready (e.g. no database yet).
#[derive(Debug, Clone, Default)]
pub struct Board {
    slots: Arc<RwLock<BTreeMap<Uuid, Arc<Slot>>>>,
    held: Arc<RwLock<BTreeMap<&'static str, String>>>,
    /// Bumped whenever a monitor is admitted or removed.
    membership: Arc<std::sync::atomic::AtomicU64>,
}

impl Board {
    pub fn new() -> Self {
        Self::default()
    }

    /// Puts a monitor on the board in the `starting` state, replacing any
    /// earlier entry of the same id (a restart starts from a clean slate).
    pub(crate) fn admit(&self, id: Uuid, name: &str) -> Arc<Slot> {
        let slot = Arc::new(Slot::new(id, name));
        self.slots
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id, slot.clone());
        self.membership
            .fetch_add(1, std::sync::atomic::Ordering::Release);
        slot
    }

    /// Marks the worker not ready for `reason` (a stable snake_case code)
    /// until [`Board::release`]; `detail` says why, for the operator.
    pub fn hold(&self, reason: &'static str, detail: impl Into<String>) {
        self.held
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(reason, detail.into());
    }

    /// Ends a [`Board::hold`]; returns whether it was held.
    pub fn release(&self, reason: &'static str) -> bool {
        self.held
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(reason)
            .is_some()
    }

    /// Takes a monitor off the board: it is no longer admitted here.
    /// Returns whether it was there.
    pub fn remove(&self, id: Uuid) -> bool {
        let removed = self
            .slots
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&id)
            .is_some();
        self.membership
            .fetch_add(1, std::sync::atomic::Ordering::Release);
        removed
    }

    /// Changes whenever a monitor is admitted or removed, so a copy of the
    /// views can tell it is out of date.
    pub fn membership(&self) -> u64 {
        self.membership.load(std::sync::atomic::Ordering::Acquire)
    }

    pub fn len(&self) -> usize {
        self.slots
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every monitor as of `now` (which only the snapshot age depends on),
    /// ordered by id.
    pub fn views(&self, now: DateTime<Utc>) -> Vec<MonitorView> {
        self.slots().iter().map(|s| s.view(now)).collect()
    }

    /// The entries, ordered by id, cloned out so that entry locks are never
    /// taken under the map lock.
    fn slots(&self) -> Vec<Arc<Slot>> {
        self.slots
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .cloned()
            .collect()
    }

    pub fn view(&self, id: Uuid, now: DateTime<Utc>) -> Option<MonitorView> {
        let slot = self
            .slots
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&id)
            .cloned();
        slot.map(|s| s.view(now))
    }

    /// Whether the worker is ready, and which monitors keep it from being so:
    /// every not-ready monitor is counted, the first [`NOT_READY_LISTED`]
    /// (by id) are named. Reads only each monitor's condition, never its
    /// figures, so a probe stays cheap at thousands of monitors.
    pub fn readiness(&self) -> Readiness {
        let slots = self.slots();
        let mut not_ready = Vec::new();
        let mut not_ready_count = 0;
        for slot in &slots {
            let condition = slot.condition();
            let state = condition.state();
            if state == MonitorState::Connected {
                continue;
            }
            not_ready_count += 1;
            if not_ready.len() < NOT_READY_LISTED {
                not_ready.push(NotReady {
                    monitor_id: slot.id,
                    monitor_name: slot.name.to_string(),
                    state,
                    connected: condition.connected(),
                    detail: condition.detail().to_owned(),
                });
            }
        }
        let worker: Vec<WorkerNotReady> = self
            .held
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(reason, detail)| WorkerNotReady {
                reason,
                detail: detail.clone(),
            })
            .collect();
        Readiness {
            ready: not_ready_count == 0 && worker.is_empty(),
            monitors: slots.len(),
            not_ready_count,
            not_ready,
            worker,
        }
    }
}

/// Most not-ready monitors `/readyz` names; the rest are only counted
/// (`radar status` lists every monitor). A list of thousands would make
/// each probe of a large worker cost megabytes of JSON.
pub const NOT_READY_LISTED: usize = 100;

/// The body of `/readyz`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Readiness {
    pub ready: bool,
    /// How many monitors are admitted.
    pub monitors: usize,
    /// How many of them are not ready.
    pub not_ready_count: usize,
    /// The first [`NOT_READY_LISTED`] of them, by id.
    pub not_ready: Vec<NotReady>,
    /// What keeps the whole worker from being ready.
    pub worker: Vec<WorkerNotReady>,
}

/// A reason the whole worker is not ready.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WorkerNotReady {
    pub reason: &'static str,
    pub detail: String,
}

/// A monitor that keeps the worker from being ready.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NotReady {
    pub monitor_id: Uuid,
    pub monitor_name: String,
    pub state: MonitorState,
    pub connected: bool,
    pub detail: String,
}
