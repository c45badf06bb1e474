//! The clock-driven checks, armed only while something can fall due.

use actix::prelude::*;

use super::{ModelActor, TICK};

impl ModelActor {
    /// Starts the tick if it is not running. Called while something can
    /// fall due; when nothing can, only a message (a batch, a commit
    /// report, a connection event) changes the state, and each of those
    /// arms the tick again if it needs it.
    pub(super) fn arm(&mut self, ctx: &mut Context<Self>) {
        if self.tick.is_none() {
            self.tick = Some(ctx.run_interval(TICK, |act, ctx| act.tick(ctx)));
        }
    }

    fn tick(&mut self, ctx: &mut Context<Self>) {
        let _span = self.span.clone().entered();
        let output = self.runtime.tick();
        if !output.needs_tick
            && let Some(tick) = self.tick.take()
        {
            ctx.cancel_future(tick);
        }
    }
}
