//! The supervisor: admits the monitors of this worker's shard, starts and
//! stops their actors as monitors are created and retired, restarts only
//! transient failures, and never restarts a terminal monitor (ownership
//! lost, quarantined, startup failed) in the same process.
//!
//! - this file: the actor, its scope and outcome, starting and stopping.
//! - `poll`: the stored list read every few seconds and reconciled.
//! - `restart`: a monitor's exit and when it may start again.

mod poll;
mod restart;

use std::{
    collections::{HashMap, HashSet},
    process::ExitCode,
    sync::Arc,
    time::Instant,
};

use actix::prelude::*;
use radar::{runtime::ExitReason, store::MonitorRow};
use tokio::sync::oneshot;
use uuid::Uuid;

use self::poll::poll_every;
use super::WorkerContext;
use crate::monitor::{MonitorActor, Stop};

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

/// Why the worker is not ready before its first listing of monitors.
pub const MONITORS_NOT_LISTED: &str = "monitors_not_listed";

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

impl Actor for Supervisor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        self.poll(ctx);
        ctx.run_interval(poll_every(), |act, ctx| act.poll(ctx));
    }
}

impl Handler<Shutdown> for Supervisor {
    type Result = ();

    fn handle(&mut self, _: Shutdown, _: &mut Self::Context) {
        self.shutting_down = true;
        // Monitors still waiting to start start at once and then stop.
        self.worker.starts.close();
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
