//! The fault loop: one worker per shard normally; faults kill, stop or
//! freeze workers, start overlapping ones, restart or blackhole the broker
//! and stop, crash or pause PostgreSQL. Outages last a random while and may overlap other
//! faults. Then everything is healed and the monitors must resume.

use std::{
    collections::BTreeMap,
    fmt,
    time::{Duration, Instant},
};

use anyhow::Result;
use chrono::Utc;
use radar_testkit::{
    broker::Mosquitto,
    postgres::{PrivatePostgres as Cluster, StopMode},
};
use uuid::Uuid;

use crate::{
    check::{Outage, OutageKind, Replay, Ts},
    fleet::{Ended, Worker, WorkerEnv},
    observe, replay,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Fault {
    /// SIGKILL a shard's worker; a replacement starts a moment later.
    Kill9,
    /// SIGTERM a shard's worker (it commits and exits); a replacement starts.
    Sigterm,
    /// Start a second worker for a shard, then kill or stop the first: two
    /// workers compute for the same monitors until fencing settles it.
    Takeover,
    /// SIGKILL Mosquitto; it comes back after a while.
    BrokerRestart,
    /// pg_ctl stop (fast or immediate) and start again after a while.
    PgRestart,
    /// SIGSTOP every PostgreSQL process; SIGCONT after a while.
    PgPause,
    /// SIGSTOP a shard's worker (maybe inside a transaction) and start its
    /// replacement; SIGCONT the frozen one a while later (a zombie writer
    /// that must find itself fenced), then SIGTERM it.
    Freeze,
    /// Drop every packet to and from the broker's port (iptables, loopback
    /// only, no reset) for a while.
    BrokerBlackhole,
    /// Start an extra worker for a shard whose clock is 30 to 120 s off
    /// (libfaketime); SIGTERM it a few seconds later.
    ClockOffset,
    /// Copy a monitor's signed row, write it back 3 to 8 s later, wait for
    /// the refusal to be reported, repair the row, restart the shard.
    Replay,
}

impl Fault {
    pub const ALL: [Fault; 10] = [
        Self::Kill9,
        Self::Sigterm,
        Self::Takeover,
        Self::BrokerRestart,
        Self::PgRestart,
        Self::PgPause,
        Self::Freeze,
        Self::BrokerBlackhole,
        Self::ClockOffset,
        Self::Replay,
    ];

    /// Relative frequency.
    fn weight(self) -> u64 {
        match self {
            Self::Kill9 | Self::Takeover => 6,
            Self::Sigterm | Self::BrokerRestart | Self::Freeze => 4,
            Self::PgRestart | Self::PgPause | Self::BrokerBlackhole => 3,
            Self::ClockOffset | Self::Replay => 2,
        }
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Kill9 => "kill9",
            Self::Sigterm => "sigterm",
            Self::Takeover => "takeover",
            Self::BrokerRestart => "broker_restart",
            Self::PgRestart => "pg_restart",
            Self::PgPause => "pg_pause",
            Self::Freeze => "freeze",
            Self::BrokerBlackhole => "broker_blackhole",
            Self::ClockOffset => "clock_offset",
            Self::Replay => "replay",
        })
    }
}

/// A small deterministic generator (SplitMix64): a seed replays a schedule.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// A duration uniformly in `[lo, hi)` milliseconds.
    fn ms(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(lo + self.below(hi.saturating_sub(lo)))
    }

    fn coin(&mut self) -> bool {
        self.next() & 1 == 1
    }
}

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

/// A replay of one monitor's row, from the copy to the repair.
#[derive(Debug, Clone, Copy)]
struct Episode {
    monitor: Uuid,
    shard: u32,
    stage: Stage,
}

#[derive(Debug, Clone, Copy)]
enum Stage {
    /// The row was copied; it is written back then.
    Saved { replay_at: Instant },
    /// Written back (`replays[index]`); waiting for the report.
    Replayed {
        index: usize,
        report_by: Instant,
        next_poll: Instant,
    },
}

/// How long the driver waits for a replay to be reported before it
/// repairs the row anyway (the check then fails).
const REPORT_WAIT: Duration = Duration::from_secs(150);

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

    /// A fault that applies now: each kind once first, then by weight.
    fn pick(&mut self) -> Fault {
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

    async fn inject(&mut self, fault: Fault, plan: &Plan) -> Result<()> {
        let now = Instant::now();
        match fault {
            Fault::Kill9 | Fault::Sigterm => {
                let Some(shard) = self.live_shard() else {
                    return Ok(());
                };
                let delay = self.rng.ms(0, 3000);
                let Some(slot) = self.slots.get_mut(&shard) else {
                    return Ok(());
                };
                let Some(mut worker) = slot.current.take() else {
                    return Ok(());
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
            Fault::Takeover => {
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
            }
            Fault::Freeze => {
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
            }
            Fault::Replay => self.save_for_replay(now).await,
            Fault::ClockOffset => {
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
            }
            Fault::BrokerBlackhole => {
                let down = self.rng.ms(plan.outage_ms.0, plan.outage_ms.1);
                let hole = Blackhole::drop_port(self.broker.port)?;
                self.link_down = Some((now + down, Utc::now(), hole));
            }
            Fault::BrokerRestart => {
                let down = self.rng.ms(plan.outage_ms.0, plan.outage_ms.1.min(4000));
                self.broker_down = Some((now + down, Utc::now()));
                self.broker.kill()?;
            }
            Fault::PgRestart => {
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
            }
            Fault::PgPause => {
                let down = self.rng.ms(plan.outage_ms.0, plan.outage_ms.1);
                self.database_down_since = Some(Utc::now());
                self.cluster.pause()?;
                self.database = Database::Paused {
                    until: Instant::now() + down,
                };
            }
        }
        Ok(())
    }

    /// Carries out what is due: services back up, replacements, the old
    /// side of takeovers; reaps exited workers.
    async fn settle(&mut self) -> Result<()> {
        let now = Instant::now();
        if let Some((until, since)) = self.broker_down
            && now >= until
        {
            self.broker_up(since).await?;
        }
        if self
            .link_down
            .as_ref()
            .is_some_and(|(until, _, _)| now >= *until)
        {
            self.link_up()?;
        }
        if self.database == Database::Up {
            self.advance_replay().await;
        }
        match self.database {
            Database::Stopped { until } | Database::Paused { until } if now >= until => {
                self.database_up().await?;
            }
            _ => {}
        }
        let due: Vec<u32> = self
            .slots
            .iter()
            .filter(|(_, s)| s.respawn_at.is_some_and(|at| now >= at))
            .map(|(k, _)| *k)
            .collect();
        for shard in due {
            let worker = self.spawn(shard)?;
            if let Some(slot) = self.slots.get_mut(&shard) {
                slot.respawn_at = None;
                if let Some(old) = slot.current.replace(worker) {
                    self.finished.push(old);
                }
            }
        }
        for r in &mut self.retiring {
            if let Some(at) = r.thaw_at
                && now >= at
            {
                r.thaw_at = None;
                r.worker.thaw();
                r.stop_at = Some((now + Duration::from_secs(3), false));
            }
            if let Some((at, kill)) = r.stop_at
                && now >= at
            {
                r.stop_at = None;
                if kill {
                    r.worker.kill9();
                } else {
                    r.worker.term();
                    r.termed_at = Some(now);
                }
            }
            if r.termed_at
                .is_some_and(|t| now.duration_since(t) > TERM_GRACE)
                && r.worker.alive()
            {
                self.unexpected_exits.push(format!(
                    "{} ignored SIGTERM for {TERM_GRACE:?}",
                    r.worker.name
                ));
                r.worker.kill9();
            }
            r.worker.reap();
        }
        let (done, still): (Vec<Retiring>, Vec<Retiring>) = std::mem::take(&mut self.retiring)
            .into_iter()
            .partition(|r| r.worker.ended.is_some());
        self.retiring = still;
        for r in done {
            if r.termed_at.is_some()
                && let Some(ended) = r.worker.ended
            {
                *self.term_exits.entry(ended.to_string()).or_default() += 1;
            }
            self.finished.push(r.worker);
        }
        // A current worker that ended by itself is a finding; replace it.
        let mut replace = Vec::new();
        for (shard, slot) in &mut self.slots {
            if let Some(w) = slot.current.as_mut()
                && let Some(ended) = w.reap()
            {
                let text = w.log_text();
                let last = text
                    .lines()
                    .rev()
                    .find(|l| !l.trim().is_empty())
                    .unwrap_or("");
                let why = serde_json::from_str::<serde_json::Value>(last)
                    .ok()
                    .and_then(|v| v["message"].as_str().map(str::to_string))
                    .unwrap_or_else(|| last.trim().to_string());
                self.unexpected_exits
                    .push(format!("a worker ended by itself ({ended}): {why}"));
                replace.push(*shard);
            }
        }
        for shard in replace {
            if let Some(slot) = self.slots.get_mut(&shard)
                && let Some(old) = slot.current.take()
            {
                self.finished.push(old);
                slot.respawn_at = Some(now + Duration::from_secs(1));
            }
        }
        Ok(())
    }

    async fn broker_up(&mut self, since: Ts) -> Result<()> {
        self.broker.restart().await?;
        self.broker_down = None;
        self.outages.push(Outage {
            kind: OutageKind::Broker,
            from: since,
            to: Utc::now(),
            what: format!("broker restart at {}", since.format("%H:%M:%S%.3f")),
        });
        Ok(())
    }

    /// Copies one monitor's row, to be written back a few seconds later.
    async fn save_for_replay(&mut self, now: Instant) {
        let ids: Vec<(Uuid, u32)> = self.monitors.iter().map(|(m, s)| (*m, *s)).collect();
        if ids.is_empty() {
            return;
        }
        let (monitor, shard) = ids[self.rng.below(ids.len() as u64) as usize];
        let url = replay::url(&self.db_url);
        if replay::save(&url, monitor).await.is_ok() {
            self.episode = Some(Episode {
                monitor,
                shard,
                stage: Stage::Saved {
                    replay_at: now + self.rng.ms(3000, 8000),
                },
            });
        }
    }

    /// Moves the replay in progress on; a database error leaves it for the
    /// next tick.
    async fn advance_replay(&mut self) {
        let Some(episode) = self.episode else {
            return;
        };
        let now = Instant::now();
        let url = replay::url(&self.db_url);
        match episode.stage {
            // A worker that began retiring since the copy (the old side of
            // a takeover, a frozen or stopping one) may still hold the
            // copied signature: written back, the copy would make it the
            // owner again and no start would ever refuse it as replayed.
            // Wait until it has exited.
            Stage::Saved { .. } if !self.retiring.is_empty() => {}
            Stage::Saved { replay_at } if now >= replay_at => {
                match replay::replay(&url, episode.monitor).await {
                    Ok(true) => {
                        self.replays.push(Replay {
                            monitor: episode.monitor,
                            at: Utc::now(),
                            reported_at: None,
                            repaired_at: None,
                        });
                        self.episode = Some(Episode {
                            stage: Stage::Replayed {
                                index: self.replays.len() - 1,
                                report_by: now + REPORT_WAIT,
                                next_poll: now + Duration::from_secs(1),
                            },
                            ..episode
                        });
                    }
                    // The row has not moved on since the copy yet: a
                    // replay needs a newer row to overwrite.
                    Ok(false) => {
                        self.episode = Some(Episode {
                            stage: Stage::Saved {
                                replay_at: now + Duration::from_secs(2),
                            },
                            ..episode
                        });
                    }
                    Err(_) => {}
                }
            }
            Stage::Replayed {
                index,
                report_by,
                next_poll,
            } if now >= next_poll => {
                let reported = replay::reported(&url, episode.monitor)
                    .await
                    .unwrap_or(false);
                if !reported && now < report_by {
                    self.episode = Some(Episode {
                        stage: Stage::Replayed {
                            index,
                            report_by,
                            next_poll: now + Duration::from_secs(1),
                        },
                        ..episode
                    });
                    return;
                }
                if reported && let Some(r) = self.replays.get_mut(index) {
                    r.reported_at.get_or_insert(Utc::now());
                }
                if replay::repair(&url, episode.monitor).await.is_err() {
                    return;
                }
                if let Some(r) = self.replays.get_mut(index) {
                    r.repaired_at = Some(Utc::now());
                }
                // The monitor failed to start for good in its worker: a
                // fresh worker starts it from the repaired row.
                if let Some(slot) = self.slots.get_mut(&episode.shard)
                    && let Some(worker) = slot.current.take()
                {
                    worker.term();
                    self.retiring.push(Retiring {
                        worker,
                        thaw_at: None,
                        stop_at: None,
                        termed_at: Some(now),
                    });
                    slot.respawn_at = Some(now);
                }
                self.episode = None;
            }
            _ => {}
        }
    }

    fn link_up(&mut self) -> Result<()> {
        if let Some((_, since, hole)) = self.link_down.take() {
            hole.remove()?;
            self.outages.push(Outage {
                kind: OutageKind::BrokerLink,
                from: since,
                to: Utc::now(),
                what: format!("broker blackhole at {}", since.format("%H:%M:%S%.3f")),
            });
        }
        Ok(())
    }

    async fn database_up(&mut self) -> Result<()> {
        let what = match self.database {
            Database::Up => return Ok(()),
            Database::Stopped { .. } => {
                let cluster = &mut self.cluster;
                tokio::task::block_in_place(|| cluster.restart())?;
                "database restart"
            }
            Database::Paused { .. } => {
                self.cluster.resume()?;
                "database pause"
            }
        };
        self.database = Database::Up;
        if let Some(since) = self.database_down_since.take() {
            self.outages.push(Outage {
                kind: OutageKind::Database,
                from: since,
                to: Utc::now(),
                what: format!("{what} at {}", since.format("%H:%M:%S%.3f")),
            });
        }
        Ok(())
    }

    /// Ends every outage, stops the old sides of takeovers, makes sure each
    /// shard has one live worker, and waits until every monitor is owned by
    /// its shard's worker and has processed new frames. Returns, per
    /// monitor, whether it got there before the deadline.
    pub async fn heal(&mut self, deadline: Duration) -> Result<BTreeMap<Uuid, bool>> {
        if let Some((_, since)) = self.broker_down {
            self.broker_up(since).await?;
        }
        self.link_up()?;
        self.database_up().await?;
        // A copy not written back yet stays unused if the run already
        // replayed a row; otherwise (k) would have nothing to check, so a
        // replay is carried out now. A row written back is seen through to
        // its report and repair by `settle` below.
        if !self.replays.is_empty()
            && let Some(Episode {
                stage: Stage::Saved { .. },
                ..
            }) = self.episode
        {
            self.episode = None;
        }
        for r in &mut self.retiring {
            if r.thaw_at.take().is_some() {
                r.worker.thaw();
            }
            if r.worker.alive() {
                r.worker.term();
                r.termed_at = Some(Instant::now());
            }
            r.stop_at = None;
        }
        let started = Instant::now();
        let mut baseline: BTreeMap<Uuid, i64> = BTreeMap::new();
        let mut resumed: BTreeMap<Uuid, bool> = self.monitors.keys().map(|m| (*m, false)).collect();
        loop {
            let now = Instant::now();
            for slot in self.slots.values_mut() {
                if slot.current.is_none() {
                    slot.respawn_at = Some(now);
                }
            }
            if self.replays.is_empty() && self.episode.is_none() {
                self.save_for_replay(now).await;
            }
            self.settle().await?;
            if let Ok(rows) = observe::snapshot_rows(&self.db_url).await {
                for row in rows {
                    let Some(shard) = self.monitors.get(&row.service_id) else {
                        continue;
                    };
                    let owner = self
                        .slots
                        .get(shard)
                        .and_then(|s| s.current.as_ref())
                        .map(|w| w.name.as_str());
                    let base = *baseline
                        .entry(row.service_id)
                        .or_insert(row.processed_count);
                    let ok =
                        owner == Some(row.writer_id.as_str()) && row.processed_count >= base + 20;
                    resumed.insert(row.service_id, ok);
                }
            }
            let retired = self.retiring.is_empty() && self.episode.is_none();
            if retired && resumed.values().all(|ok| *ok) {
                break;
            }
            // A replay in progress gets its own report wait on top.
            let limit = if self.episode.is_some() {
                deadline + REPORT_WAIT
            } else {
                deadline
            };
            if started.elapsed() > limit {
                eprintln!("[radar-chaos] healing: not every monitor resumed within {deadline:?}");
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        Ok(resumed)
    }

    /// SIGTERM to every live worker; waits for each to exit. Returns how
    /// each ended (a clean stop is exit 0).
    pub async fn stop_all(&mut self) -> Vec<(String, Option<Ended>)> {
        let mut workers: Vec<Worker> = self
            .slots
            .values_mut()
            .filter_map(|s| s.current.take())
            .chain(self.retiring.drain(..).map(|r| r.worker))
            .collect();
        for w in &mut workers {
            if w.alive() {
                w.thaw();
                w.term();
            }
        }
        let deadline = Instant::now() + TERM_GRACE;
        while workers.iter_mut().any(Worker::alive) && Instant::now() < deadline {
            tokio::time::sleep(TICK).await;
        }
        let mut ends = Vec::new();
        for mut w in workers {
            let ended = if w.alive() {
                w.kill9();
                None
            } else {
                w.ended
            };
            ends.push((w.name.clone(), ended));
            self.finished.push(w);
        }
        ends
    }
}

/// iptables rules that drop every packet to and from one loopback port,
/// removed by [`Blackhole::remove`] or, at the latest, on drop.
pub struct Blackhole {
    port: u16,
    installed: bool,
}

impl Blackhole {
    /// Loopback only, a private port only: the shared services are never touched.
    fn rules(port: u16) -> [Vec<String>; 2] {
        let port = port.to_string();
        ["--dport", "--sport"].map(|dir| {
            ["INPUT", "-i", "lo", "-p", "tcp", dir, &port, "-j", "DROP"]
                .map(str::to_string)
                .to_vec()
        })
    }

    fn iptables(action: &str, rule: &[String]) -> Result<()> {
        let status = std::process::Command::new("iptables")
            .args(["-w", action])
            .args(rule)
            .status()?;
        anyhow::ensure!(
            status.success(),
            "iptables {action} {} failed",
            rule.join(" ")
        );
        Ok(())
    }

    pub fn drop_port(port: u16) -> Result<Self> {
        let hole = Self {
            port,
            installed: true,
        };
        for rule in Self::rules(port) {
            if let Err(e) = Self::iptables("-I", &rule) {
                hole.remove()?;
                return Err(e);
            }
        }
        Ok(hole)
    }

    pub fn remove(mut self) -> Result<()> {
        self.installed = false;
        let mut result = Ok(());
        for rule in Self::rules(self.port) {
            // Each rule is removed even if the other was never added.
            if let Err(e) = Self::iptables("-D", &rule)
                && result.is_ok()
            {
                result = Err(e);
            }
        }
        result
    }
}

impl Drop for Blackhole {
    fn drop(&mut self) {
        if self.installed {
            for rule in Self::rules(self.port) {
                let _ = Self::iptables("-D", &rule);
            }
        }
    }
}
