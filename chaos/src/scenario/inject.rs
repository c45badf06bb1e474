//! Picking and injecting one fault: which kinds apply now, the shard it
//! hits, and what it does to a worker, the broker or the database.

use std::time::Instant;

use anyhow::Result;
use chrono::Utc;
use radar_testkit::postgres::StopMode;

use super::{Chaos, Database, Plan, Retiring, fault::Fault, outage::Blackhole};
use crate::fleet::Worker;

impl Chaos {
    /// A fault that applies now: each kind once first, then by weight.
    pub(super) fn pick(&mut self) -> Fault {
        let has_worker = self
            .slots
            .values_mut()
            .any(|s| s.current.as_mut().is_some_and(Worker::alive));
        let applicable: Vec<Fault> = Fault::ALL
            .into_iter()
            .filter(|f| match f {
                Fault::Kill9 | Fault::Sigterm | Fault::Takeover | Fault::Freeze => has_worker,
                Fault::BrokerRestart | Fault::BrokerBlackhole => {
                    self.broker_down.is_none() && self.link_down.is_none()
                }
                // It must reach the database to compare clocks.
                Fault::PgRestart | Fault::PgPause | Fault::ClockOffset => {
                    self.database == Database::Up
                }
                // One at a time; the copy is written back only once no
                // stale writer is left that may hold its signature.
                Fault::Replay => self.database == Database::Up && self.episode.is_none(),
            })
            .collect();
        if applicable.is_empty() {
            // Every shard is between workers and both services are down:
            // one more overlapping start is always possible.
            return Fault::Takeover;
        }
        // Every kind once first, so that even a short run has each of them.
        let fresh: Vec<Fault> = applicable
            .iter()
            .copied()
            .filter(|f| !self.injected.contains_key(f))
            .collect();
        if !fresh.is_empty() {
            return fresh[self.rng.below(fresh.len() as u64) as usize];
        }
        let total: u64 = applicable.iter().map(|f| f.weight()).sum();
        let mut pick = self.rng.below(total);
        for f in &applicable {
            if pick < f.weight() {
                return *f;
            }
            pick -= f.weight();
        }
        applicable[0]
    }

    /// A shard whose current worker is alive, at random.
    fn live_shard(&mut self) -> Option<u32> {
        let live: Vec<u32> = self
            .slots
            .iter_mut()
            .filter_map(|(k, s)| s.current.as_mut().is_some_and(Worker::alive).then_some(*k))
            .collect();
        if live.is_empty() {
            return None;
        }
        Some(live[self.rng.below(live.len() as u64) as usize])
    }

    /// Injects one fault; a fault that finds nothing to hit does nothing.
    pub(super) async fn inject(&mut self, fault: Fault, plan: &Plan) -> Result<()> {
        let now = Instant::now();
        match fault {
            Fault::Kill9 | Fault::Sigterm => self.stop_live_worker(fault, now),
            Fault::Takeover => self.take_over(now)?,
            Fault::Freeze => self.freeze_live_worker(now)?,
            Fault::Replay => self.save_for_replay(now).await,
            Fault::ClockOffset => self.start_offset_worker(now)?,
            Fault::BrokerBlackhole => self.blackhole_broker(plan, now)?,
            Fault::BrokerRestart => self.restart_broker(plan, now)?,
            Fault::PgRestart => self.restart_database(plan)?,
            Fault::PgPause => self.pause_database(plan)?,
        }
        Ok(())
    }

    /// Kills (`Kill9`) or terminates (`Sigterm`) a live shard's worker and
    /// schedules its replacement within 3 s.
    fn stop_live_worker(&mut self, fault: Fault, now: Instant) {
        let Some(shard) = self.live_shard() else {
            return;
        };
        let delay = self.rng.ms(0, 3000);
        let Some(slot) = self.slots.get_mut(&shard) else {
            return;
        };
        let Some(mut worker) = slot.current.take() else {
            return;
        };
        slot.respawn_at = Some(now + delay);
        if fault == Fault::Kill9 {
            worker.kill9();
            self.finished.push(worker);
        } else {
            worker.term();
            self.retiring.push(Retiring {
                worker,
                thaw_at: None,
                stop_at: None,
                termed_at: Some(now),
            });
        }
    }

    /// Starts an overlapping worker on a shard (a live one if any); the old
    /// one is stopped or killed 0.5 to 5 s later.
    fn take_over(&mut self, now: Instant) -> Result<()> {
        let shard = match self.live_shard() {
            Some(s) => s,
            None => self.rng.below(u64::from(self.env.shards)) as u32 + 1,
        };
        let newcomer = self.spawn(shard)?;
        let stop_at = now + self.rng.ms(500, 5000);
        let kill = self.rng.coin();
        if let Some(slot) = self.slots.get_mut(&shard) {
            slot.respawn_at = None;
            if let Some(old) = slot.current.replace(newcomer) {
                self.retiring.push(Retiring {
                    worker: old,
                    thaw_at: None,
                    stop_at: Some((stop_at, kill)),
                    termed_at: None,
                });
            }
        }
        Ok(())
    }

    /// Freezes a live shard's worker behind a newcomer; it thaws 2 to 12 s later.
    fn freeze_live_worker(&mut self, now: Instant) -> Result<()> {
        let Some(shard) = self.live_shard() else {
            return Ok(());
        };
        let newcomer = self.spawn(shard)?;
        let thaw_at = now + self.rng.ms(2000, 12000);
        if let Some(slot) = self.slots.get_mut(&shard) {
            slot.respawn_at = None;
            if let Some(old) = slot.current.replace(newcomer) {
                old.freeze();
                self.retiring.push(Retiring {
                    worker: old,
                    thaw_at: Some(thaw_at),
                    stop_at: None,
                    termed_at: None,
                });
            }
        }
        Ok(())
    }

    /// Starts an extra worker whose wall clock is 30 to 120 s off; it is
    /// stopped 3 to 8 s later.
    fn start_offset_worker(&mut self, now: Instant) -> Result<()> {
        let shard = self.rng.below(u64::from(self.env.shards)) as u32 + 1;
        let seconds = 30 + self.rng.below(90);
        let sign = if self.rng.coin() { "+" } else { "-" };
        self.spawned += 1;
        let name = format!("w{:03}-s{shard}-clock{sign}{seconds}", self.spawned);
        let worker = Worker::spawn_with(
            &self.env,
            name.clone(),
            shard,
            &[
                ("LD_PRELOAD", crate::fleet::LIBFAKETIME.to_string()),
                ("FAKETIME", format!("{sign}{seconds}s")),
                ("FAKETIME_DONT_FAKE_MONOTONIC", "1".to_string()),
            ],
        )?;
        self.offset_workers.push(name);
        self.retiring.push(Retiring {
            worker,
            thaw_at: None,
            stop_at: Some((now + self.rng.ms(3000, 8000), false)),
            termed_at: None,
        });
        Ok(())
    }

    /// Drops the broker's traffic for an outage of the plan's length.
    fn blackhole_broker(&mut self, plan: &Plan, now: Instant) -> Result<()> {
        let down = self.rng.ms(plan.outage_ms.0, plan.outage_ms.1);
        let hole = Blackhole::drop_port(self.broker.port)?;
        self.link_down = Some((now + down, Utc::now(), hole));
        Ok(())
    }

    /// Kills the broker; it is started again at most 4 s later.
    fn restart_broker(&mut self, plan: &Plan, now: Instant) -> Result<()> {
        let down = self.rng.ms(plan.outage_ms.0, plan.outage_ms.1.min(4000));
        self.broker_down = Some((now + down, Utc::now()));
        self.broker.kill()?;
        Ok(())
    }

    /// Stops the database (fast or immediate) for an outage of the plan's length.
    fn restart_database(&mut self, plan: &Plan) -> Result<()> {
        let mode = if self.rng.coin() {
            StopMode::Fast
        } else {
            StopMode::Immediate
        };
        let down = self.rng.ms(plan.outage_ms.0, plan.outage_ms.1);
        self.database_down_since = Some(Utc::now());
        let cluster = &mut self.cluster;
        tokio::task::block_in_place(|| cluster.stop_with(mode))?;
        self.database = Database::Stopped {
            until: Instant::now() + down,
        };
        Ok(())
    }

    /// Pauses the database for an outage of the plan's length.
    fn pause_database(&mut self, plan: &Plan) -> Result<()> {
        let down = self.rng.ms(plan.outage_ms.0, plan.outage_ms.1);
        self.database_down_since = Some(Utc::now());
        self.cluster.pause()?;
        self.database = Database::Paused {
            until: Instant::now() + down,
        };
        Ok(())
    }
}
