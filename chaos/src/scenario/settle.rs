//! What is due on each tick of the loop: services back up, the replay
//! moved on, replacements started, the old sides of takeovers thawed,
//! stopped or killed, and exited workers reaped.

use std::time::{Duration, Instant};

use anyhow::Result;

use super::{Chaos, Database, Retiring, TERM_GRACE};

impl Chaos {
    /// Carries out what is due: services back up, replacements, the old
    /// side of takeovers; reaps exited workers.
    pub(super) async fn settle(&mut self) -> Result<()> {
        let now = Instant::now();
        self.bring_back_broker(now).await?;
        if self.database == Database::Up {
            self.advance_replay().await;
        }
        match self.database {
            Database::Stopped { until } | Database::Paused { until } if now >= until => {
                self.database_up().await?;
            }
            _ => {}
        }
        self.respawn_due(now)?;
        self.retire_due(now);
        self.collect_retired();
        self.replace_self_ended(now);
        Ok(())
    }

    /// Restarts the broker and lifts the blackhole once their outage is over.
    async fn bring_back_broker(&mut self, now: Instant) -> Result<()> {
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
        Ok(())
    }

    /// Starts the replacement workers that are due.
    fn respawn_due(&mut self, now: Instant) -> Result<()> {
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
        Ok(())
    }

    /// Thaws, stops or kills the retiring workers that are due, kills those
    /// that ignored SIGTERM past the grace time, and reaps them.
    fn retire_due(&mut self, now: Instant) {
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
    }

    /// Moves the retiring workers that ended to the finished ones, counting
    /// how the terminated ones exited.
    fn collect_retired(&mut self) {
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
    }

    /// A current worker that ended by itself is a finding; replace it.
    fn replace_self_ended(&mut self, now: Instant) {
        let mut replace = Vec::new();
        for (shard, slot) in &mut self.slots {
            if let Some(w) = slot.current.as_mut()
                && let Some(ended) = w.reap()
            {
                let why = last_message(&w.log_text());
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
    }
}

/// The last non-empty line of a worker's log: its JSON `message`, or the
/// line itself.
fn last_message(text: &str) -> String {
    let last = text
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    serde_json::from_str::<serde_json::Value>(last)
        .ok()
        .and_then(|v| v["message"].as_str().map(str::to_string))
        .unwrap_or_else(|| last.trim().to_string())
}
