//! The worker's one timer for the models' clock-driven checks (maximum
//! checkpoint interval, checkpoint timeout, freshness expiry, silence).
//! A model that needs the clock arms itself here and receives a [`Tick`]
//! every second until its runtime says nothing can fall due any more.
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
    models: HashMap<u64, Addr<ModelActor>>,
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

    /// `model` receives a [`Tick`] on every tick from now on; the key
    /// disarms it.
    pub(super) fn arm(&self, model: Addr<ModelActor>) -> u64 {
        let mut armed = lock(&self.0);
        armed.next += 1;
        let key = armed.next;
        armed.models.insert(key, model);
        key
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
        // A model that stopped without disarming (its thread ended) is
        // dropped here.
        lock(&armed).models.retain(|_, model| {
            model.do_send(Tick);
            model.connected()
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
