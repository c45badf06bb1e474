//! The model actor: runs on a model arbiter (its own OS thread, never the IO
//! arbiter) and strictly serializes everything that touches the detector:
//! payload parsing, alignment, scoring, the fit, health refresh and snapshot
//! encoding. The decisions are `radar::runtime::ModelRuntime`'s (lifecycle,
//! checkpoint policy, pending results, silence, what the metrics were
//! told); this actor is its interpreter: each handler calls one input of
//! the runtime, whose effects the [`Interpreter`] carries out as they are
//! decided (messages to the checkpoint and monitor actors, observer
//! notices, the published view), and arms the 1 s tick when the input's
//! output needs it.

use std::time::Duration;

use actix::prelude::*;
use radar::runtime::{self, Effect, Effects, ModelRuntime, ModelView, MonitorCore, Output};
use tokio::sync::watch;

use super::{
    MonitorActor,
    checkpoint::{CheckpointActor, NewResults, SnapshotReady},
    handlers::{InputDrained, Quarantined},
};
use crate::worker::Observer;

mod handlers;
mod ticks;
mod timers;

pub use handlers::{
    AttachInput, BatchSettled, CheckpointNow, CommitReport, Connection, ContinueAlarms,
};
pub use ticks::ModelTicks;
use timers::TickState;

/// How often the model checks the clock-driven triggers (max interval,
/// checkpoint timeout, freshness expiry, silence) while one of them can fall
/// due; an idle monitor has no tick at all (see `ModelRuntime::needs_tick`).
const TICK: Duration = Duration::from_secs(1);

/// The most queued messages handled in one turn of the model actor. What is
/// waiting is taken at once (never waited for), so a busy monitor pays the
/// per-turn costs (metrics, view, span) once per batch, an idle one per
/// message.
const BATCH: usize = 256;

pub struct ModelActor {
    /// The model side's state and decisions; its effects go straight to
    /// the [`Interpreter`]. Boxed, so the actor moves to its thread as a
    /// pointer (see [`ModelActor::new`]).
    runtime: Box<ModelRuntime<Interpreter>>,
    /// The clock-driven checks, armed only while something can fall due.
    tick: TickState,
    span: tracing::Span,
}

/// Carries out the runtime's effects the moment they are decided: sends
/// them as messages, notifies the observer, publishes the view.
struct Interpreter {
    checkpoint: Addr<CheckpointActor>,
    monitor: Addr<MonitorActor>,
    view: watch::Sender<ModelView>,
    observer: Option<Observer>,
}

impl Effects for Interpreter {
    fn effect(&mut self, effect: Effect) {
        match effect {
            Effect::Publish(view) => {
                self.view.send_replace(view);
            }
            Effect::Commit(handoff) => self.checkpoint.do_send(SnapshotReady(handoff)),
            Effect::Results(results) => self.checkpoint.do_send(NewResults { results }),
            Effect::Notice(notice) => {
                if let Some(observer) = &self.observer {
                    observer.notify(notice);
                }
            }
            Effect::Quarantined(diagnostics) => self.monitor.do_send(Quarantined { diagnostics }),
            Effect::Drained => self.monitor.do_send(InputDrained),
        }
    }
}

/// Everything a model actor starts with: its runtime's setup (`observed`
/// exactly when `observer` is set) and where the effects go.
pub struct ModelSetup {
    pub runtime: runtime::ModelSetup,
    pub checkpoint: Addr<CheckpointActor>,
    pub monitor: Addr<MonitorActor>,
    pub view: watch::Sender<ModelView>,
    pub observer: Option<Observer>,
    /// The worker's timer for the clock-driven checks.
    pub ticks: ModelTicks,
    pub span: tracing::Span,
}

impl ModelActor {
    /// Builds the actor where the start runs, not on the model thread: the
    /// runtime is several KiB and passes through a few stack frames while it
    /// is built, and whatever a thread's stack touches once stays resident
    /// for the thread's life (about 20 KiB per monitor when it was built on
    /// the model thread, BENCHMARKS.md round 12). The model thread receives
    /// the box.
    pub fn new(setup: ModelSetup) -> Self {
        let interpreter = Interpreter {
            checkpoint: setup.checkpoint,
            monitor: setup.monitor,
            view: setup.view,
            observer: setup.observer,
        };
        let mut runtime = Box::new(ModelRuntime::new(setup.runtime, interpreter));
        runtime.publish();
        Self {
            runtime,
            tick: TickState::new(setup.ticks),
            span: setup.span,
        }
    }

    /// The first view, before the actor exists.
    pub fn initial_view(core: &MonitorCore) -> ModelView {
        ModelView::initial(core)
    }

    /// After an input (its effects are carried out already): starts the
    /// tick if time alone can now change something, or moves its first
    /// tick; only the tick itself stops it.
    fn after(&mut self, output: Output, ctx: &mut Context<Self>) {
        if output.needs_tick {
            self.arm(output.tick_not_before, ctx);
        }
    }
}

impl Actor for ModelActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        let _span = self.span.clone().entered();
        if self.runtime.needs_tick() {
            self.arm(self.runtime.tick_not_before(), ctx);
        }
    }

    fn stopped(&mut self, _: &mut Self::Context) {
        self.tick.disarm();
    }
}
