//! The supervisor's poll: which monitors this worker's scope admits, the
//! stored list read every few seconds, and the reconcile that starts new
//! ones, restarts those due, takes back lost ones nobody runs, and stops
//! the retired.

use std::{
    collections::{HashMap, HashSet},
    time::{Duration, Instant},
};

use actix::prelude::*;
use radar::{
    config::Shard,
    runtime::{ExitReason, Restart, owns},
    store::{MonitorHead, MonitorRow},
};
use uuid::Uuid;

use super::{MONITORS_NOT_LISTED, Scope, Supervisor, WorkerOutcome};
use crate::monitor::{REFRESH_EVERY, Stop};

/// How often the supervisor looks for new and retired monitors.
pub const POLL_EVERY: Duration = Duration::from_secs(5);

/// [`POLL_EVERY`], unless the test-only `RADAR_TEST_SUPERVISOR_POLL_MS`
/// changes it (a test that must act before a worker notices a retirement).
pub(super) fn poll_every() -> Duration {
    std::env::var("RADAR_TEST_SUPERVISOR_POLL_MS")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .map_or(POLL_EVERY, Duration::from_millis)
}
/// How long a monitor this worker lost may go without a heartbeat from its
/// new owner before this worker takes it back: three refreshes of an idle
/// monitor's status row ([`REFRESH_EVERY`], 10 s) and a slow status write
/// (35 s).
pub const OWNER_SILENT_FOR: Duration = Duration::from_secs(3 * REFRESH_EVERY.as_secs() + 5);

impl Supervisor {
    /// The monitors this worker is responsible for.
    fn admits(&self, head: &MonitorHead) -> bool {
        admits(&self.scope, self.worker.settings.shard, head)
    }

    pub(super) fn poll(&mut self, ctx: &mut Context<Self>) {
        if self.polling || self.shutting_down {
            return;
        }
        self.polling = true;
        let source = self.worker.monitors.clone();
        let pool = self.worker.store.as_ref().map(|s| s.pool().clone());
        let scope = self.scope.clone();
        let shard = self.worker.settings.shard;
        let running: HashSet<Uuid> = self.running.keys().copied().collect();
        let lost: Vec<Uuid> = self
            .exited
            .iter()
            .filter(|(_, e)| matches!(e.reason, ExitReason::OwnershipLost { .. }))
            .map(|(id, _)| *id)
            .collect();
        async move {
            // Ids only every poll; configs (parsed JSON) only of the
            // monitors that may start now, read as they are stored now.
            let heads = source.heads().await?;
            let startable: Vec<Uuid> = heads
                .iter()
                .filter(|h| admits(&scope, shard, h) && !running.contains(&h.id))
                .map(|h| h.id)
                .collect();
            let rows: HashMap<Uuid, MonitorRow> = source
                .rows(&startable)
                .await?
                .into_iter()
                .map(|row| (row.id, row))
                .collect();
            // Monitors lost to an overlapping worker that no live worker runs.
            let unwatched = match pool {
                Some(pool) if !lost.is_empty() => {
                    radar::store::without_live_owner(&pool, &lost, OWNER_SILENT_FOR).await?
                }
                _ => Vec::new(),
            };
            Ok::<_, radar::store::StoreError>((heads, rows, unwatched))
        }
        .into_actor(self)
        .map(|rows, act, ctx| {
            act.polling = false;
            match rows {
                Ok((heads, rows, unwatched)) => act.reconcile(heads, rows, &unwatched, ctx),
                Err(error) => {
                    tracing::warn!(%error, "Could not list monitors; keeping the current set.")
                }
            }
        })
        .spawn(ctx);
    }

    /// `rows` holds the stored rows of the admitted monitors that were not
    /// running when the poll began; one that started running since, or
    /// whose row is missing, waits for the next poll.
    fn reconcile(
        &mut self,
        heads: Vec<MonitorHead>,
        mut rows: HashMap<Uuid, MonitorRow>,
        unwatched: &[Uuid],
        ctx: &mut Context<Self>,
    ) {
        if self.shutting_down {
            return;
        }
        let now = Instant::now();
        let mut wanted = std::collections::HashSet::new();
        for head in heads {
            if !self.admits(&head) {
                continue;
            }
            wanted.insert(head.id);
            if self.running.contains_key(&head.id) {
                continue;
            }
            if let Some(exited) = self.exited.get(&head.id) {
                let due = exited.reason.restart() == Restart::AfterBackoff
                    && exited.retry_at.is_some_and(|at| at <= now);
                // Losing a monitor ends this worker's writer for good, not
                // its duty: once the worker that took it is gone, a fresh
                // start restores that worker's snapshot and carries on.
                let take_back = matches!(exited.reason, ExitReason::OwnershipLost { .. })
                    && self.scope.single().is_none()
                    && unwatched.contains(&head.id);
                if take_back {
                    tracing::warn!(monitor_id = %head.id, name = %head.name, "The worker that took this monitor over is gone; taking it back.");
                } else if !due {
                    continue;
                }
            }
            if let Some(row) = rows.remove(&head.id) {
                self.start(row, ctx);
            }
        }
        // Every monitor of the first listing is on the board now.
        if self.worker.telemetry.board().release(MONITORS_NOT_LISTED) {
            tracing::info!("Listed this worker's monitors; readiness now follows them.");
        }
        if let Some(id) = self.scope.single()
            && !wanted.contains(&id)
            && !self.running.contains_key(&id)
            && self.outcome.is_none()
        {
            let reason = ExitReason::StartupFailed {
                reason: format!("monitor {id} does not exist or is retired"),
            };
            tracing::error!(monitor_id = %id, "{reason}");
            self.end(WorkerOutcome::MonitorFailed(reason));
            return;
        }
        let gone: Vec<Uuid> = self
            .running
            .keys()
            .filter(|id| !wanted.contains(id))
            .copied()
            .collect();
        // Monitors no longer ours leave the board once stopped.
        let departed: Vec<Uuid> = self
            .exited
            .keys()
            .filter(|id| !wanted.contains(id))
            .copied()
            .collect();
        for id in departed {
            self.exited.remove(&id);
            self.worker.telemetry.remove_monitor(id);
        }
        for id in gone {
            if let Some(running) = self.running.get(&id) {
                tracing::info!(monitor_id = %id, name = %running.name, "Monitor retired, deleted or moved to another shard; stopping it.");
                running.addr.do_send(Stop);
            }
        }
    }
}

/// Whether a worker of this scope and shard runs this monitor.
fn admits(scope: &Scope, shard: Shard, head: &MonitorHead) -> bool {
    if head.is_retired() {
        return false;
    }
    match scope {
        Scope::Shard => owns(shard, head.id),
        Scope::Monitor(id) => head.id == *id,
        Scope::Monitors(ids) => ids.contains(&head.id),
    }
}
