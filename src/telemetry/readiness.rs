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

use std::{
    collections::BTreeMap,
    sync::{
        Arc, Mutex, MutexGuard, PoisonError, RwLock,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use chrono::{DateTime, Utc};
use serde::Serialize;
use uuid::Uuid;

use super::{
    condition::{Condition, MonitorState, Ownership},
    counts::{CountValues, Counts},
    labels::DetectorPhase,
};

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

/// The per-monitor figures that are not part of the condition.
#[derive(Debug, Default)]
pub(crate) struct Figures {
    pub phase: Option<DetectorPhase>,
    /// Save time of the last committed (or restored) snapshot.
    pub snapshot_saved_at: Option<DateTime<Utc>>,
    pub recovery: Option<Recovery>,
    /// Each required reading and the receipt time of its newest accepted
    /// observation (`None`: none yet).
    pub last_accepted: Vec<(String, Option<DateTime<Utc>>)>,
}

/// One monitor's entry.
#[derive(Debug)]
pub(crate) struct Slot {
    pub id: Uuid,
    pub name: Arc<str>,
    /// The id as the `monitor_id` label spells it, formatted once.
    pub id_label: Arc<str>,
    pub condition: Mutex<Condition>,
    pub figures: Mutex<Figures>,
    pub queue_depth: AtomicU64,
    pub queue_capacity: AtomicU64,
    pub held_values: AtomicU64,
    pub counts: Counts,
}

impl Slot {
    fn new(id: Uuid, name: &str) -> Self {
        let name: Arc<str> = Arc::from(name);
        Self {
            id,
            id_label: Arc::from(id.to_string()),
            name,
            condition: Mutex::default(),
            figures: Mutex::default(),
            queue_depth: AtomicU64::new(0),
            queue_capacity: AtomicU64::new(0),
            held_values: AtomicU64::new(0),
            counts: Counts::default(),
        }
    }

    /// A poisoned lock only means a panic elsewhere mid-update of plain
    /// values; the health side keeps reporting rather than panicking too.
    pub fn condition(&self) -> MutexGuard<'_, Condition> {
        self.condition
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    pub fn figures(&self) -> MutexGuard<'_, Figures> {
        self.figures.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn view(&self, now: DateTime<Utc>) -> MonitorView {
        let (state, connected, detail, ownership) = {
            let c = self.condition();
            (
                c.state(),
                c.connected(),
                c.detail().to_owned(),
                c.ownership(),
            )
        };
        let figures = self.figures();
        let capacity = self.queue_capacity.load(Ordering::Relaxed);
        MonitorView {
            id: self.id,
            name: self.name.to_string(),
            id_label: self.id_label.clone(),
            state,
            connected,
            detail,
            ownership_held: ownership == Ownership::Held,
            phase: figures.phase,
            queue_depth: self.queue_depth.load(Ordering::Relaxed),
            queue_capacity: (capacity > 0).then_some(capacity),
            snapshot_age: figures
                .snapshot_saved_at
                .map(|saved| (now - saved).to_std().unwrap_or(Duration::ZERO)),
            recovery: figures.recovery.clone(),
            reading_ages: figures
                .last_accepted
                .iter()
                .map(|(name, at)| {
                    let age = at.map(|t| (now - t).to_std().unwrap_or(Duration::ZERO));
                    (name.clone(), age)
                })
                .collect(),
            held_values: self.held_values.load(Ordering::Relaxed),
            counts: self.counts.values(),
            gap_seconds: self.counts.gap_seconds(),
        }
    }
}

/// A consistent copy of one monitor's entry at one instant.
#[derive(Debug, Clone, PartialEq)]
pub struct MonitorView {
    pub id: Uuid,
    pub name: String,
    /// The `monitor_id` label value.
    pub id_label: Arc<str>,
    pub state: MonitorState,
    pub connected: bool,
    pub detail: String,
    pub ownership_held: bool,
    pub phase: Option<DetectorPhase>,
    pub queue_depth: u64,
    /// `None` until the runtime reports the queue.
    pub queue_capacity: Option<u64>,
    /// `None` before the first commit or restore.
    pub snapshot_age: Option<Duration>,
    pub recovery: Option<Recovery>,
    /// Age of each required reading's newest accepted observation.
    pub reading_ages: Vec<(String, Option<Duration>)>,
    /// Values waiting in the partial frame.
    pub held_values: u64,
    /// The monitor's counters.
    pub counts: CountValues,
    /// Closed coverage gaps, in seconds, all causes together.
    pub gap_seconds: f64,
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
        // Clone the slots out so entry locks are never taken under the map lock.
        let slots: Vec<Arc<Slot>> = self
            .slots
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .cloned()
            .collect();
        slots.iter().map(|s| s.view(now)).collect()
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

    /// Whether the worker is ready, and which monitors keep it from being so.
    pub fn readiness(&self) -> Readiness {
        let views = self.views(Utc::now());
        let monitors = views.len();
        let not_ready: Vec<NotReady> = views
            .into_iter()
            .filter(|v| v.state != MonitorState::Connected)
            .map(|v| NotReady {
                monitor_id: v.id,
                monitor_name: v.name,
                state: v.state,
                connected: v.connected,
                detail: v.detail,
            })
            .collect();
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
            ready: not_ready.is_empty() && worker.is_empty(),
            monitors,
            not_ready,
            worker,
        }
    }
}

/// The body of `/readyz`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Readiness {
    pub ready: bool,
    /// How many monitors are admitted.
    pub monitors: usize,
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

#[cfg(test)]
mod tests {
    use chrono::TimeDelta;

    use super::*;

    #[test]
    fn an_empty_board_is_ready() {
        let r = Board::new().readiness();
        assert!(r.ready);
        assert_eq!(r.monitors, 0);
        assert!(r.not_ready.is_empty());
    }

    #[test]
    fn a_held_worker_is_not_ready_until_released() {
        let board = Board::new();
        board.hold("database_unavailable", "PostgreSQL refuses connections");
        let r = board.readiness();
        assert!(!r.ready);
        assert_eq!(r.worker[0].reason, "database_unavailable");
        assert!(board.release("database_unavailable"));
        assert!(board.readiness().ready);
    }

    #[test]
    fn readiness_lists_only_the_monitors_that_are_not_connected() {
        let board = Board::new();
        let a = board.admit(Uuid::from_u128(1), "pump");
        let _b = board.admit(Uuid::from_u128(2), "fan");
        a.condition().connect();
        let r = board.readiness();
        assert!(!r.ready);
        assert_eq!(r.monitors, 2);
        assert_eq!(r.not_ready.len(), 1);
        assert_eq!(r.not_ready[0].monitor_name, "fan");
        assert_eq!(r.not_ready[0].state, MonitorState::Starting);
    }

    #[test]
    fn removing_the_last_unready_monitor_makes_the_worker_ready() {
        let board = Board::new();
        board.admit(Uuid::from_u128(1), "pump");
        assert!(!board.readiness().ready);
        assert!(board.remove(Uuid::from_u128(1)));
        assert!(board.readiness().ready);
        assert!(!board.remove(Uuid::from_u128(1)));
    }

    #[test]
    fn readmitting_a_monitor_starts_it_from_a_clean_entry() {
        let board = Board::new();
        let first = board.admit(Uuid::from_u128(1), "pump");
        first.condition().connect();
        board.admit(Uuid::from_u128(1), "pump");
        assert_eq!(board.len(), 1);
        let now = Utc::now();
        let view = board.view(Uuid::from_u128(1), now).unwrap();
        assert_eq!(view.state, MonitorState::Starting);
    }

    #[test]
    fn snapshot_age_counts_from_the_save_time_and_never_goes_negative() {
        let board = Board::new();
        let slot = board.admit(Uuid::from_u128(1), "pump");
        let now = Utc::now();
        assert_eq!(board.views(now)[0].snapshot_age, None);
        slot.figures().snapshot_saved_at = Some(now - TimeDelta::seconds(42));
        assert_eq!(
            board.views(now)[0].snapshot_age,
            Some(Duration::from_secs(42))
        );
        slot.figures().snapshot_saved_at = Some(now + TimeDelta::seconds(5));
        assert_eq!(board.views(now)[0].snapshot_age, Some(Duration::ZERO));
    }

    #[test]
    fn the_readiness_body_names_state_and_detail_in_snake_case_json() {
        let board = Board::new();
        let slot = board.admit(Uuid::from_u128(7), "pump");
        slot.condition().connect();
        slot.condition().disconnect("connection refused");
        let json = serde_json::to_value(board.readiness()).unwrap();
        assert_eq!(json["ready"], false);
        assert_eq!(json["not_ready"][0]["state"], "disconnected");
        assert_eq!(json["not_ready"][0]["detail"], "connection refused");
        assert_eq!(
            json["not_ready"][0]["monitor_id"],
            "00000000-0000-0000-0000-000000000007"
        );
    }
}
