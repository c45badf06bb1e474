//! One monitor's entry on the board: its condition and figures behind
//! short locks, its hot counters as atomics, and the consistent copy of it
//! (`MonitorView`) that `/readyz` and the gauges read.

use std::{
    sync::{
        Arc, Mutex, MutexGuard, PoisonError,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::Recovery;
use crate::telemetry::{
    condition::{Condition, MonitorState},
    counts::{CountValues, Counts},
    labels::DetectorPhase,
};

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
    pub(super) fn new(id: Uuid, name: &str) -> Self {
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

    pub(super) fn view(&self, now: DateTime<Utc>) -> MonitorView {
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
            ownership_held: ownership.is_held(),
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
