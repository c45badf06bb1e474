//! The clock-driven checks, armed only while something can fall due. The
//! ticks come from the worker's one timer ([`ModelTicks`]), not from a
//! timer on the model's thread.

use actix::prelude::*;
use chrono::{DateTime, Utc};

use super::{
    ModelActor,
    ticks::{ModelTicks, Tick},
};

/// A model's place among the worker's ticking models.
pub(super) struct TickState {
    ticks: ModelTicks,
    /// The key of this model's entry while it is armed.
    armed: Option<u64>,
    /// The entry's first tick, as last set.
    not_before: Option<DateTime<Utc>>,
}

impl TickState {
    pub(super) fn new(ticks: ModelTicks) -> Self {
        Self {
            ticks,
            armed: None,
            not_before: None,
        }
    }

    pub(super) fn disarm(&mut self) {
        if let Some(key) = self.armed.take() {
            self.ticks.disarm(key);
        }
    }
}

impl ModelActor {
    /// Starts the tick if it is not running, from `not_before` on (see
    /// `ModelRuntime::tick_not_before`), or moves its first tick. Called
    /// while something can fall due; when nothing can, only a message (a
    /// batch, a commit report, a connection event) changes the state, and
    /// each of those arms the tick again if it needs it.
    pub(super) fn arm(&mut self, not_before: Option<DateTime<Utc>>, ctx: &mut Context<Self>) {
        match self.tick.armed {
            None => self.tick.armed = Some(self.tick.ticks.arm(ctx.address(), not_before)),
            Some(key) if self.tick.not_before != not_before => {
                self.tick.ticks.defer(key, not_before);
            }
            Some(_) => {}
        }
        self.tick.not_before = not_before;
    }
}

impl Handler<Tick> for ModelActor {
    type Result = ();

    fn handle(&mut self, _: Tick, ctx: &mut Context<Self>) {
        // A tick sent before the model disarmed may still arrive.
        if self.tick.armed.is_none() {
            return;
        }
        let _span = self.span.clone().entered();
        let output = self.runtime.tick();
        if output.needs_tick {
            self.arm(output.tick_not_before, ctx);
        } else {
            self.tick.disarm();
        }
    }
}
