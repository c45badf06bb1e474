//! The end of the fault loop: every outage ended and the monitors waited
//! for until they resume under their shard's worker; then every worker
//! stopped.

use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use anyhow::Result;
use uuid::Uuid;

use super::{
    Chaos, TERM_GRACE, TICK,
    episode::{Episode, REPORT_WAIT, Stage},
};
use crate::{
    fleet::{Ended, Worker},
    observe,
};

impl Chaos {
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
