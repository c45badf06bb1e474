//! The worker's beat driver: one timer for the health beats of every
//! monitor of the process. Each tick it beats one half of the monitors
//! (see [`grid`](super::grid)) in place, and hands all their heartbeats to
//! the worker's batch as one group, answered at once: no timer, task,
//! mailbox message or oneshot per monitor. A monitor's actor is not woken
//! by its beats at all; a lost ownership goes straight to the monitor.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use chrono::Utc;
use futures_util::future::join_all;
use radar::store::{GroupBeat, Heartbeats};

use super::{
    beat::{Due, Health},
    grid,
};

/// One monitor's beat state, shared by its actor and the driver.
pub(super) type Shared = Arc<Mutex<Health>>;

/// Locks `mutex`; a beat that panicked left nothing half-written that a
/// later beat could not read.
pub(super) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Where the monitors of a worker are beaten. Cheap to clone; the driver
/// ends (and with it its hold on the batch) once every handle is dropped.
#[derive(Clone)]
pub struct HealthBeats(Arc<Registry>);

struct Registry {
    /// The worker's heartbeat batch; `None`: database writes disabled.
    batch: Option<Heartbeats>,
    /// The monitors of each half of the grid.
    halves: Mutex<[Vec<Shared>; 2]>,
}

impl HealthBeats {
    /// A driver handing heartbeats to `batch`, and the future that beats:
    /// spawn it on the runtime of the monitors' actors.
    pub fn new(batch: Option<Heartbeats>) -> (Self, impl Future<Output = ()> + 'static) {
        let registry = Arc::new(Registry {
            batch,
            halves: Mutex::new([Vec::new(), Vec::new()]),
        });
        let driver = drive(Arc::downgrade(&registry));
        (Self(registry), driver)
    }

    /// Whether heartbeats go to the worker's batch.
    pub(super) fn batched(&self) -> bool {
        self.0.batch.is_some()
    }

    /// Beats `health` now (its first beat), then on every tick of its half.
    pub(super) fn register(&self, health: &Shared) {
        let half = grid::half(lock(health).service_id);
        self.0.beat(std::slice::from_ref(health));
        lock(&self.0.halves)[half].push(Arc::clone(health));
    }

    /// No more beats for `health`.
    pub(super) fn unregister(&self, health: &Shared) {
        for half in lock(&self.0.halves).iter_mut() {
            half.retain(|h| !Arc::ptr_eq(h, health));
        }
    }
}

impl Registry {
    /// Beats `monitors` and hands their heartbeats in as one group.
    fn beat(&self, monitors: &[Shared]) {
        let (now, at) = (Utc::now(), std::time::Instant::now());
        let due: Vec<(Shared, Due)> = monitors
            .iter()
            .filter_map(|health| Some((Arc::clone(health), lock(health).beat(now, at)?)))
            .collect();
        if !due.is_empty() {
            actix_rt::spawn(write(self.batch.clone(), due));
        }
    }
}

/// Every [`grid::TICK`] (half a [`HEARTBEAT`](super::HEARTBEAT)) from its start, beats the half of the monitors
/// whose turn it is, until every [`HealthBeats`] handle is dropped. A tick
/// that comes late is still taken (in a burst), so no half is skipped.
async fn drive(registry: Weak<Registry>) {
    let origin = tokio::time::Instant::now();
    let mut ticks = tokio::time::interval_at(origin + grid::TICK, grid::TICK);
    loop {
        let at = ticks.tick().await;
        let Some(registry) = registry.upgrade() else {
            return;
        };
        let half = grid::half_at(origin, at);
        let halves = lock(&registry.halves);
        registry.beat(&halves[half]);
    }
}

/// Writes the heartbeats of one beat (through the batch, or each on its
/// own without one) and settles each with its outcome.
async fn write(batch: Option<Heartbeats>, due: Vec<(Shared, Due)>) {
    let mut settle = Vec::with_capacity(due.len());
    let mut beats = Vec::with_capacity(due.len());
    for (health, due) in due {
        beats.push(GroupBeat {
            reporter: due.reporter,
            record: Arc::clone(&due.record),
            taken_at: due.taken_at,
            unchanged: due.unchanged,
        });
        settle.push((health, due.slot, due.record, due.taken));
    }
    let outcomes = match batch {
        Some(batch) => batch.submit(beats).await,
        None => {
            join_all(
                beats
                    .into_iter()
                    .map(|beat| async move { Some(beat.reporter.report(&beat.record).await) }),
            )
            .await
        }
    };
    for ((health, slot, record, taken), outcome) in settle.into_iter().zip(outcomes) {
        lock(&health).settle(slot, record, taken, outcome);
    }
}

#[cfg(test)]
mod tests {
    use std::{sync::Arc, time::Duration};

    use actix::prelude::*;
    use radar::{
        coverage::CoverageHistory,
        detector::Phase,
        mqtt::LinkStatus,
        snapshot::RecoveryMetadata,
        telemetry::{MonitorState, Telemetry},
    };
    use radar_testkit::poll;
    use tokio::sync::watch;
    use uuid::Uuid;

    use super::*;
    use crate::monitor::{
        CheckpointView, ModelView, Ownership,
        handlers::LostOwnership,
        health::{HEARTBEAT, HealthInputs},
    };

    struct Sink;

    impl Actor for Sink {
        type Context = Context<Self>;
    }

    impl Handler<LostOwnership> for Sink {
        type Result = ();

        fn handle(&mut self, _: LostOwnership, _: &mut Self::Context) {}
    }

    /// A monitor without a reporter (writes disabled), disconnected, with
    /// the sender of its link so the test can change what its beats see.
    fn monitor(id: u128, sink: &Addr<Sink>) -> (Shared, watch::Sender<LinkStatus>) {
        let (link, link_rx) = watch::channel(LinkStatus {
            connected: false,
            since: Utc::now(),
            failed_attempts: 0,
            last_error: None,
        });
        let (_, model) = watch::channel(ModelView {
            phase: Phase::Monitoring,
            processed: 0,
            buffered: (0, 0),
            consumed: 0,
            suspended: false,
            quarantine: None,
            no_data: None,
            coverage: Arc::new(CoverageHistory::default()),
            recovery: Arc::new(RecoveryMetadata::default()),
            readings_seen: Vec::new(),
        });
        let (_, checkpoint) = watch::channel(CheckpointView::new(Ownership::Disabled));
        let service_id = Uuid::from_u128(id);
        let telemetry = Telemetry::new(&opentelemetry::global::meter("driver-test"));
        let health = Health::new(
            service_id,
            HealthInputs {
                model,
                checkpoint,
                link: link_rx,
                ingress: Arc::default(),
            },
            None,
            false,
            sink.clone().recipient(),
            telemetry.monitor(service_id, "test"),
            tracing::Span::none(),
        );
        (Arc::new(Mutex::new(health)), link)
    }

    fn connect(link: &watch::Sender<LinkStatus>, connected: bool) {
        link.send_modify(|l| l.connected = connected);
    }

    /// The one driver beats each registered monitor at once and then once
    /// per `HEARTBEAT`, the two halves of the ids a tick (half a
    /// `HEARTBEAT`) apart; an unregistered monitor is beaten no more.
    /// Each monitor's link is changed and the instant its beat sees the
    /// change is taken.
    #[actix_rt::test]
    async fn the_driver_beats_each_registered_monitor_once_per_heartbeat() {
        let sink = Sink.start();
        let (beats, driver) = HealthBeats::new(None);
        actix_rt::spawn(driver);
        let (even, even_link) = monitor(2, &sink);
        let (odd, odd_link) = monitor(3, &sink);
        connect(&even_link, true);
        beats.register(&even);
        beats.register(&odd);
        assert_eq!(
            lock(&even).state(),
            MonitorState::Connected,
            "no first beat"
        );
        assert_eq!(lock(&odd).state(), MonitorState::Starting);
        let seen = |health: &Shared, state: MonitorState| {
            let health = Arc::clone(health);
            async move {
                poll::within(HEARTBEAT + Duration::from_millis(500))
                    .every(poll::QUICK)
                    .until("a beat sees the change", || lock(&health).state() == state)
                    .await
                    .map(|()| std::time::Instant::now())
            }
        };
        let changed = std::time::Instant::now();
        connect(&odd_link, true);
        let at_odd = seen(&odd, MonitorState::Connected).await.expect("odd");
        assert!(at_odd - changed <= HEARTBEAT + Duration::from_millis(300));
        connect(&even_link, false);
        let at_even = seen(&even, MonitorState::Disconnected).await.expect("even");
        let apart = at_even - at_odd;
        assert!(
            apart >= grid::TICK - Duration::from_millis(300)
                && apart <= grid::TICK + Duration::from_millis(300),
            "the halves are {apart:?} apart"
        );
        beats.unregister(&even);
        connect(&even_link, true);
        connect(&odd_link, false);
        // The odd monitor's next beat comes after the even half's tick.
        seen(&odd, MonitorState::Disconnected)
            .await
            .expect("odd again");
        connect(&odd_link, true);
        seen(&odd, MonitorState::Connected)
            .await
            .expect("odd once more");
        assert_eq!(
            lock(&even).state(),
            MonitorState::Disconnected,
            "an unregistered monitor was beaten"
        );
    }
}
