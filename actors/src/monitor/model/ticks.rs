//! The worker's one timer for the models' clock-driven checks (maximum
//! checkpoint interval, checkpoint timeout, freshness expiry, silence).
//! A model that needs the clock arms itself here and receives a [`Tick`]
//! every second until its runtime says nothing can fall due any more, and
//! none before the time its runtime names as the first at which a tick can
//! change something (a silence or checkpoint deadline): a monitor that
//! only waits for its readings' silence limit gets one tick, not one a
//! second.
//!
//! Why not a timer on each model thread: a Tokio runtime with its time
//! driver builds a timer wheel of about 6 KiB per thread, written at
//! creation and resident for the thread's life, for every monitor, idle or
//! not (BENCHMARKS.md section 6, round 12). The model threads' runtimes
//! have no driver at all now: no IO, no timer.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, MutexGuard, PoisonError, Weak},
    time::Duration,
};

use actix::prelude::*;
use chrono::{DateTime, Utc};
use tokio::time::MissedTickBehavior;

use super::{ModelActor, TICK};

/// One clock-driven check of a model.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Tick;

/// The armed models of a worker. Cheap to clone; the driver ends once
/// every handle is dropped.
#[derive(Clone)]
pub struct ModelTicks(Arc<Mutex<Armed>>);

/// Which models tick; a model's key is handed back to it so that it can
/// disarm exactly its own entry.
#[derive(Default)]
struct Armed {
    next: u64,
    models: HashMap<u64, Entry>,
}

struct Entry {
    model: Recipient<Tick>,
    /// No tick before this wall time (`None`: every tick).
    not_before: Option<DateTime<Utc>>,
}

fn lock(armed: &Mutex<Armed>) -> MutexGuard<'_, Armed> {
    armed.lock().unwrap_or_else(PoisonError::into_inner)
}

impl ModelTicks {
    /// The registry and the future that ticks every second: spawn it on
    /// the runtime of the monitors' actors.
    pub fn new() -> (Self, impl Future<Output = ()> + 'static) {
        Self::every(TICK)
    }

    fn every(every: Duration) -> (Self, impl Future<Output = ()> + 'static) {
        let armed = Arc::new(Mutex::new(Armed::default()));
        let driver = drive(Arc::downgrade(&armed), every);
        (Self(armed), driver)
    }

    /// `model` receives a [`Tick`] on every tick from now on, from
    /// `not_before` on if given; the key disarms it.
    pub(super) fn arm(&self, model: Addr<ModelActor>, not_before: Option<DateTime<Utc>>) -> u64 {
        self.arm_recipient(model.recipient(), not_before)
    }

    fn arm_recipient(&self, model: Recipient<Tick>, not_before: Option<DateTime<Utc>>) -> u64 {
        let mut armed = lock(&self.0);
        armed.next += 1;
        let key = armed.next;
        armed.models.insert(key, Entry { model, not_before });
        key
    }

    /// Moves an armed model's first tick (`None`: every tick again).
    pub(super) fn defer(&self, key: u64, not_before: Option<DateTime<Utc>>) {
        if let Some(entry) = lock(&self.0).models.get_mut(&key) {
            entry.not_before = not_before;
        }
    }

    pub(super) fn disarm(&self, key: u64) {
        lock(&self.0).models.remove(&key);
    }

    #[cfg(test)]
    fn armed(&self) -> usize {
        lock(&self.0).models.len()
    }
}

async fn drive(armed: Weak<Mutex<Armed>>, every: Duration) {
    let mut interval = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    interval.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        let Some(armed) = armed.upgrade() else {
            return;
        };
        let now = Utc::now();
        // A model that stopped without disarming (its thread ended) is
        // dropped here.
        lock(&armed).models.retain(|_, entry| {
            if entry.not_before.is_none_or(|t| t <= now) {
                entry.model.do_send(Tick);
            }
            entry.model.connected()
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts the ticks it receives.
    struct Counter(Arc<std::sync::atomic::AtomicUsize>);

    impl Actor for Counter {
        type Context = Context<Self>;
    }

    impl Handler<Tick> for Counter {
        type Result = ();

        fn handle(&mut self, _: Tick, _: &mut Context<Self>) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    fn counter() -> (Recipient<Tick>, Arc<std::sync::atomic::AtomicUsize>) {
        let count = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        (Counter(count.clone()).start().recipient(), count)
    }

    async fn until(what: &str, mut done: impl FnMut() -> bool) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while !done() {
            assert!(tokio::time::Instant::now() < deadline, "timed out: {what}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    #[actix_rt::test]
    async fn a_model_armed_for_later_gets_no_tick_before_then_and_every_tick_after() {
        use std::sync::atomic::Ordering::SeqCst;
        let (ticks, driver) = ModelTicks::every(Duration::from_millis(5));
        let _driver = actix_rt::spawn(driver);
        let (now, now_count) = counter();
        let (later, later_count) = counter();
        ticks.arm_recipient(now, None);
        let key = ticks.arm_recipient(later, Some(Utc::now() + chrono::TimeDelta::hours(1)));
        until("the model armed for now ticks 20 times", || {
            now_count.load(SeqCst) >= 20
        })
        .await;
        assert_eq!(later_count.load(SeqCst), 0, "ticked before its time");
        ticks.defer(key, Some(Utc::now()));
        until("the deferred model ticks once its time has come", || {
            later_count.load(SeqCst) >= 2
        })
        .await;
        assert_eq!(ticks.armed(), 2);
    }

    #[actix_rt::test]
    async fn the_driver_ends_when_every_handle_is_dropped() {
        let (ticks, driver) = ModelTicks::every(Duration::from_millis(5));
        let driver = actix_rt::spawn(driver);
        assert_eq!(ticks.armed(), 0);
        drop(ticks);
        tokio::time::timeout(Duration::from_secs(5), driver)
            .await
            .expect("the driver ended")
            .expect("the driver did not panic");
    }
}
