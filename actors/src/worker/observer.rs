//! A read-only window onto the running monitors for a front end in the same
//! process (`radar demo`): each monitor's published model and checkpoint
//! views, and a feed of flagged frames and alarm events.
//!
//! The worker never waits on an observer: views are `watch` receivers of
//! what the actors publish anyway, and notices go through a bounded
//! broadcast channel whose sender never blocks (a slow reader loses the
//! oldest notices and is told how many). A worker without an observer
//! (`radar worker`) pays nothing.

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex, PoisonError},
};

use tokio::sync::{broadcast, watch};
use uuid::Uuid;

use crate::monitor::{CheckpointView, ModelView};

/// Notices kept for a reader that falls behind.
const NOTICE_CAPACITY: usize = 4096;

/// What a monitor's model reported, as it happened: the model runtime's
/// `Notice` effects.
pub use radar::runtime::Notice;

/// One started monitor, as its actors publish it.
#[derive(Debug, Clone)]
pub struct MonitorWatch {
    pub id: Uuid,
    /// Required readings, in the order of a notice's contributions.
    pub readings: Vec<String>,
    pub model: watch::Receiver<ModelView>,
    pub checkpoint: watch::Receiver<CheckpointView>,
}

/// Shared by the worker (which feeds it) and the front end (which reads it).
#[derive(Debug, Clone)]
pub struct Observer {
    monitors: Arc<Mutex<BTreeMap<Uuid, MonitorWatch>>>,
    notices: broadcast::Sender<Notice>,
}

impl Default for Observer {
    fn default() -> Self {
        Self::new()
    }
}

impl Observer {
    pub fn new() -> Self {
        let (notices, _) = broadcast::channel(NOTICE_CAPACITY);
        Self {
            monitors: Arc::default(),
            notices,
        }
    }

    /// A monitor started (or started again): its views replace any earlier ones.
    pub fn attach(&self, watch: MonitorWatch) {
        self.monitors
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(watch.id, watch);
    }

    /// Every monitor that has started, ordered by id. Views stay readable
    /// after the monitor stops (they hold its last published state).
    pub fn monitors(&self) -> Vec<MonitorWatch> {
        self.monitors
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .cloned()
            .collect()
    }

    /// Never blocks; without a subscriber the notice is dropped.
    pub fn notify(&self, notice: Notice) {
        let _ = self.notices.send(notice);
    }

    /// Notices from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Notice> {
        self.notices.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;

    #[test]
    fn notices_without_a_subscriber_are_dropped_and_a_subscriber_sees_later_ones() {
        let observer = Observer::new();
        let id = Uuid::from_u128(1);
        let opened = |seq| Notice::AlarmOpened {
            monitor_id: id,
            seq,
            ts: Utc::now(),
            peak_score: 1.0,
        };
        observer.notify(opened(1));
        let mut rx = observer.subscribe();
        observer.notify(opened(2));
        match rx.try_recv() {
            Ok(Notice::AlarmOpened { seq, .. }) => assert_eq!(seq, 2),
            other => panic!("expected the second alarm, got {other:?}"),
        }
        assert!(rx.try_recv().is_err());
    }
}
