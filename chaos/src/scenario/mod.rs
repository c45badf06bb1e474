//! The fault loop: one worker per shard normally; faults kill, stop or
//! freeze workers, start overlapping ones, restart or blackhole the broker
//! and stop, crash or pause PostgreSQL. Outages last a random while and may overlap other
//! faults. Then everything is healed and the monitors must resume.
//!
//! - this file: the loop's state and the loop (a fault when one is due,
//!   then what else is due, every tick).
//! - `fault`: the fault kinds, their weights, the seeded generator.
//! - `inject`: picking a fault that applies and injecting it.
//! - `settle`: what is due on each tick.
//! - `outage`: the broker and the database back up; the port blackhole.
//! - `episode`: a replay of one monitor's row, from copy to repair.
//! - `heal`: every outage ended, the monitors resumed; every worker stopped.

mod episode;
mod fault;
mod heal;
mod inject;
mod outage;
mod settle;

use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use anyhow::Result;
use radar_testkit::{broker::Mosquitto, postgres::PrivatePostgres as Cluster};
use uuid::Uuid;

pub use self::fault::Fault;
use self::{episode::Episode, fault::Rng, outage::Blackhole};
use crate::{
    check::{Outage, Replay, Ts},
    fleet::{Worker, WorkerEnv},
};

/// How hard and how long to shake.
#[derive(Debug, Clone)]
pub struct Plan {
    pub faults: u32,
    pub deadline: Duration,
    /// Pause between faults, in ms.
    pub gap_ms: (u64, u64),
    /// How long the broker or the database stays down, in ms.
    pub outage_ms: (u64, u64),
    pub heal_deadline: Duration,
}

/// What a shard's worker slot is doing.
struct Slot {
    current: Option<Worker>,
    respawn_at: Option<Instant>,
}

/// An old worker on its way out.
struct Retiring {
    worker: Worker,
    /// When a frozen worker is continued (then stopped 3 s later).
    thaw_at: Option<Instant>,
    /// When to stop it (takeover) and how; `None`: already signalled.
    stop_at: Option<(Instant, bool)>,
    /// When it was sent SIGTERM, to kill it if it never exits.
    termed_at: Option<Instant>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Database {
    Up,
    Stopped { until: Instant },
    Paused { until: Instant },
}

pub struct Chaos {
    pub env: WorkerEnv,
    pub db_url: String,
    pub cluster: Cluster,
    pub broker: Mosquitto,
    pub monitors: BTreeMap<Uuid, u32>,
    slots: BTreeMap<u32, Slot>,
    retiring: Vec<Retiring>,
    /// Every worker that ever ran, for its log and its end.
    pub finished: Vec<Worker>,
    broker_down: Option<(Instant, Ts)>,
    /// The broker's port blackholed until then, since then.
    link_down: Option<(Instant, Ts, Blackhole)>,
    database: Database,
    database_down_since: Option<Ts>,
    rng: Rng,
    spawned: u32,
    pub injected: BTreeMap<Fault, u32>,
    pub outages: Vec<Outage>,
    /// Workers started with an offset clock.
    pub offset_workers: Vec<String>,
    /// The replay in progress, if any.
    episode: Option<Episode>,
    pub replays: Vec<Replay>,
    /// SIGTERM exits during the faults, by how they ended.
    pub term_exits: BTreeMap<String, u32>,
    /// Workers that ended without being told to, and why (their last log line).
    pub unexpected_exits: Vec<String>,
}

/// A worker that ignores SIGTERM this long is killed (its limit is the
/// checkpoint timeout plus 15 s).
const TERM_GRACE: Duration = Duration::from_secs(40);
const TICK: Duration = Duration::from_millis(100);

impl Chaos {
    pub fn new(
        env: WorkerEnv,
        db_url: String,
        cluster: Cluster,
        broker: Mosquitto,
        monitors: BTreeMap<Uuid, u32>,
        seed: u64,
    ) -> Self {
        let slots = (1..=env.shards)
            .map(|s| {
                (
                    s,
                    Slot {
                        current: None,
                        respawn_at: None,
                    },
                )
            })
            .collect();
        Self {
            env,
            db_url,
            cluster,
            broker,
            monitors,
            slots,
            retiring: Vec::new(),
            finished: Vec::new(),
            broker_down: None,
            link_down: None,
            database: Database::Up,
            database_down_since: None,
            rng: Rng::new(seed),
            spawned: 0,
            injected: BTreeMap::new(),
            outages: Vec::new(),
            offset_workers: Vec::new(),
            episode: None,
            replays: Vec::new(),
            term_exits: BTreeMap::new(),
            unexpected_exits: Vec::new(),
        }
    }

    fn spawn(&mut self, shard: u32) -> Result<Worker> {
        self.spawned += 1;
        Worker::spawn(&self.env, format!("w{:03}-s{shard}", self.spawned), shard)
    }

    /// One worker per shard.
    pub fn start_workers(&mut self) -> Result<()> {
        let shards: Vec<u32> = self.slots.keys().copied().collect();
        for shard in shards {
            let worker = self.spawn(shard)?;
            if let Some(slot) = self.slots.get_mut(&shard) {
                slot.current = Some(worker);
            }
        }
        Ok(())
    }

    /// Injects `plan.faults` faults (or as many as fit before the deadline).
    pub async fn run(&mut self, plan: &Plan) -> Result<()> {
        let started = Instant::now();
        let mut next_fault = Instant::now();
        let mut injected = 0;
        while injected < plan.faults && started.elapsed() < plan.deadline {
            self.settle().await?;
            if Instant::now() >= next_fault {
                let fault = self.pick();
                self.inject(fault, plan).await?;
                *self.injected.entry(fault).or_default() += 1;
                injected += 1;
                if injected % 10 == 0 || injected == plan.faults {
                    eprintln!(
                        "[radar-chaos] {injected}/{} faults after {:.0} s",
                        plan.faults,
                        started.elapsed().as_secs_f64()
                    );
                }
                next_fault = Instant::now() + self.rng.ms(plan.gap_ms.0, plan.gap_ms.1);
            }
            tokio::time::sleep(TICK).await;
        }
        Ok(())
    }
}
