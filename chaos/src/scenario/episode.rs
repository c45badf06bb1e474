//! A replay episode: one monitor's signed row copied, written back a few
//! seconds later once no stale writer may hold its signature, the refusal
//! waited for, the row repaired and the shard's worker restarted.

use std::time::{Duration, Instant};

use chrono::Utc;
use uuid::Uuid;

use super::{Chaos, Retiring};
use crate::{check::Replay, replay};

/// A replay of one monitor's row, from the copy to the repair.
#[derive(Debug, Clone, Copy)]
pub(super) struct Episode {
    monitor: Uuid,
    shard: u32,
    pub(super) stage: Stage,
}

#[derive(Debug, Clone, Copy)]
pub(super) enum Stage {
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
pub(super) const REPORT_WAIT: Duration = Duration::from_secs(150);

impl Chaos {
    /// Copies one monitor's row, to be written back a few seconds later.
    pub(super) async fn save_for_replay(&mut self, now: Instant) {
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
    pub(super) async fn advance_replay(&mut self) {
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
                self.write_back(episode, &url, now).await;
            }
            Stage::Replayed {
                index,
                report_by,
                next_poll,
            } if now >= next_poll => {
                self.poll_report(episode, index, report_by, &url, now).await;
            }
            _ => {}
        }
    }

    /// Writes the copied row back and starts waiting for the report; a row
    /// that has not moved on yet is tried again 2 s later.
    async fn write_back(&mut self, episode: Episode, url: &str, now: Instant) {
        match replay::replay(url, episode.monitor).await {
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

    /// Asks whether the replay was reported; polls again a second later
    /// until it was or the wait is over, then records the report and
    /// repairs the row.
    async fn poll_report(
        &mut self,
        episode: Episode,
        index: usize,
        report_by: Instant,
        url: &str,
        now: Instant,
    ) {
        let reported = replay::reported(url, episode.monitor)
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
        self.repair_and_restart(episode, index, url, now).await;
    }

    /// Repairs the replayed row, records when, and restarts the shard's
    /// worker; the episode is over. A failed repair is tried next tick.
    async fn repair_and_restart(
        &mut self,
        episode: Episode,
        index: usize,
        url: &str,
        now: Instant,
    ) {
        if replay::repair(url, episode.monitor).await.is_err() {
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
}
