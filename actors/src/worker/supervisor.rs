//! The supervisor: admits the monitors of this worker's shard, starts and
//! stops their actors as monitors are created and retired, restarts only
//! transient failures, and never restarts a terminal monitor (ownership
//! lost, quarantined, startup failed) in the same process.

use std::{
    collections::{HashMap, HashSet},
    process::ExitCode,
    sync::Arc,
    time::{Duration, Instant},
};

use actix::prelude::*;
use radar::{
    config::Shard,
    mqtt::Backoff,
    runtime::{ExitReason, Restart, owns},
    store::{MonitorHead, MonitorRow},
};
use tokio::sync::oneshot;
use uuid::Uuid;

use super::WorkerContext;
use crate::monitor::{MonitorActor, MonitorExited, Stop};

/// How often the supervisor looks for new and retired monitors.
pub const POLL_EVERY: Duration = Duration::from_secs(5);

/// [`POLL_EVERY`], unless the test-only `RADAR_TEST_SUPERVISOR_POLL_MS`
/// changes it (a test that must act before a worker notices a retirement).
fn poll_every() -> Duration {
    std::env::var("RADAR_TEST_SUPERVISOR_POLL_MS")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .map_or(POLL_EVERY, Duration::from_millis)
}
/// How long a monitor this worker lost may go without a heartbeat from its
/// new owner before this worker takes it back: several heartbeats (every
/// 2 s) and a slow status write.
pub const OWNER_SILENT_FOR: Duration = Duration::from_secs(20);

/// Restart delays of a monitor whose start failed transiently.
const RESTART_BACKOFF: Backoff = Backoff {
    initial: Duration::from_secs(5),
    max: Duration::from_secs(300),
};

/// A monitor that ran this long since its last start had recovered: its
/// next failure waits the first restart delay again. Without this, every
/// failure a long-lived worker ever saw (one per database outage, say)
/// would lengthen the next wait, up to the five-minute cap.
const RECOVERED_AFTER: Duration = Duration::from_secs(60);

/// The number of the failure that just ended a run that lasted `ran_for`,
/// `previous` being the failures counted before it.
fn failure_number(previous: u32, ran_for: Duration) -> u32 {
    if ran_for >= RECOVERED_AFTER {
        1
    } else {
        previous.saturating_add(1)
    }
}

/// How the worker as a whole ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkerOutcome {
    Stopped,
    /// `--monitor ID` and that monitor could not run.
    MonitorFailed(ExitReason),
    StopTimedOut,
}

impl WorkerOutcome {
    pub fn exit_code(&self) -> ExitCode {
        match self {
            Self::Stopped => ExitCode::SUCCESS,
            Self::MonitorFailed(ExitReason::StartupFailed { .. }) => ExitCode::from(2),
            Self::MonitorFailed(_) => ExitCode::from(3),
            Self::StopTimedOut => ExitCode::from(4),
        }
    }
}

/// Which of the listed monitors this worker runs.
#[derive(Debug, Clone)]
pub enum Scope {
    /// The monitors of this worker's shard (`RADAR_SHARD`).
    Shard,
    /// Exactly this monitor; the worker ends if it cannot run.
    Monitor(Uuid),
    /// These monitors (`radar demo`); one that cannot run is reported, not fatal.
    Monitors(Arc<HashSet<Uuid>>),
}

impl Scope {
    fn single(&self) -> Option<Uuid> {
        match self {
            Self::Monitor(id) => Some(*id),
            Self::Shard | Self::Monitors(_) => None,
        }
    }
}

/// Stop every monitor gracefully, then end.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Shutdown;

/// Resolves once every monitor has stopped after [`Shutdown`].
#[derive(Message)]
#[rtype(result = "WorkerOutcome")]
pub struct WhenStopped;

/// A monitor's last exit and when it may start again.
struct Exited {
    reason: ExitReason,
    attempts: u32,
    retry_at: Option<Instant>,
}

struct Running {
    addr: Addr<MonitorActor>,
    name: String,
    started: Instant,
}

pub struct Supervisor {
    worker: Arc<WorkerContext>,
    scope: Scope,
    running: HashMap<Uuid, Running>,
    exited: HashMap<Uuid, Exited>,
    shutting_down: bool,
    polling: bool,
    outcome: Option<WorkerOutcome>,
    done: Option<oneshot::Sender<WorkerOutcome>>,
    waiters: Vec<oneshot::Sender<WorkerOutcome>>,
}

impl Supervisor {
    pub fn new(
        worker: Arc<WorkerContext>,
        scope: Scope,
        done: oneshot::Sender<WorkerOutcome>,
    ) -> Self {
        Self {
            worker,
            scope,
            running: HashMap::new(),
            exited: HashMap::new(),
            shutting_down: false,
            polling: false,
            outcome: None,
            done: Some(done),
            waiters: Vec::new(),
        }
    }

    /// The monitors this worker is responsible for.
    fn admits(&self, head: &MonitorHead) -> bool {
        admits(&self.scope, self.worker.settings.shard, head)
    }

    fn poll(&mut self, ctx: &mut Context<Self>) {
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

    fn start(&mut self, row: MonitorRow, ctx: &mut Context<Self>) {
        let id = row.id;
        let name = row.name.clone();
        tracing::info!(monitor_id = %id, name = %name, "Admitting monitor.");
        let metrics = self.worker.telemetry.monitor(id, &name);
        let actor = MonitorActor::new(self.worker.clone(), row, metrics, ctx.address().recipient());
        let addr = actor.start();
        self.running.insert(
            id,
            Running {
                addr,
                name,
                started: Instant::now(),
            },
        );
    }

    fn end(&mut self, outcome: WorkerOutcome) {
        self.outcome.get_or_insert(outcome.clone());
        if let Some(done) = self.done.take() {
            let _ = done.send(outcome);
        }
    }

    fn settle_if_stopped(&mut self) {
        if self.shutting_down && self.running.is_empty() {
            let outcome = self.outcome.clone().unwrap_or(WorkerOutcome::Stopped);
            for waiter in self.waiters.drain(..) {
                let _ = waiter.send(outcome.clone());
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

impl Actor for Supervisor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        self.poll(ctx);
        ctx.run_interval(poll_every(), |act, ctx| act.poll(ctx));
    }
}

impl Handler<MonitorExited> for Supervisor {
    type Result = ();

    fn handle(&mut self, msg: MonitorExited, _: &mut Self::Context) {
        let (name, ran_for) = self
            .running
            .remove(&msg.id)
            .map(|r| (r.name, r.started.elapsed()))
            .unwrap_or_default();
        let previous = self.exited.get(&msg.id).map_or(0, |e| e.attempts);
        let attempts = failure_number(previous, ran_for);
        let retry_at = match msg.reason.restart() {
            Restart::AfterBackoff if !self.shutting_down => {
                let delay = RESTART_BACKOFF.delay(attempts - 1);
                tracing::warn!(monitor_id = %msg.id, %name, reason = %msg.reason, retry_in_s = delay.as_secs(), "Monitor failed; it will be restarted.");
                Some(Instant::now() + delay)
            }
            _ => {
                if msg.reason.is_terminal() && msg.reason != ExitReason::Stopped {
                    tracing::error!(monitor_id = %msg.id, %name, reason = %msg.reason, "Monitor ended for good in this process.");
                }
                None
            }
        };
        if self.scope.single() == Some(msg.id) && !self.shutting_down && msg.reason.is_terminal() {
            self.end(WorkerOutcome::MonitorFailed(msg.reason.clone()));
        }
        self.exited.insert(
            msg.id,
            Exited {
                reason: msg.reason,
                attempts,
                retry_at,
            },
        );
        self.settle_if_stopped();
    }
}

impl Handler<Shutdown> for Supervisor {
    type Result = ();

    fn handle(&mut self, _: Shutdown, _: &mut Self::Context) {
        self.shutting_down = true;
        for running in self.running.values() {
            running.addr.do_send(Stop);
        }
        self.settle_if_stopped();
    }
}

impl Handler<WhenStopped> for Supervisor {
    type Result = ResponseFuture<WorkerOutcome>;

    fn handle(&mut self, _: WhenStopped, _: &mut Self::Context) -> Self::Result {
        let (tx, rx) = oneshot::channel();
        self.waiters.push(tx);
        self.settle_if_stopped();
        Box::pin(async move { rx.await.unwrap_or(WorkerOutcome::StopTimedOut) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_in_quick_succession_lengthen_the_wait() {
        let mut attempts = 0;
        for _ in 0..4 {
            attempts = failure_number(attempts, Duration::from_secs(1));
        }
        assert_eq!(attempts, 4);
        assert_eq!(RESTART_BACKOFF.delay(attempts - 1), Duration::from_secs(40));
    }

    #[test]
    fn a_monitor_that_ran_long_enough_starts_its_backoff_over() {
        let attempts = failure_number(6, RECOVERED_AFTER);
        assert_eq!(attempts, 1);
        assert_eq!(RESTART_BACKOFF.delay(attempts - 1), RESTART_BACKOFF.initial);
        assert_eq!(
            failure_number(6, RECOVERED_AFTER - Duration::from_millis(1)),
            7
        );
    }

    #[test]
    fn the_count_saturates() {
        assert_eq!(failure_number(u32::MAX, Duration::ZERO), u32::MAX);
    }
}
