//! The clock-driven checks, armed only while something can fall due.

use std::time::Instant;

use actix::prelude::*;
use chrono::Utc;
use radar::runtime::Trigger;

use super::{ModelActor, TICK};

impl ModelActor {
    /// Whether time passing alone can change anything: a checkpoint that
    /// can fall due or stall, required readings that can fall silent, held
    /// values that can expire. When none can, only a message (a batch, a
    /// commit report, a connection event) changes the state, and each of
    /// those re-arms the tick through [`ModelActor::arm`].
    fn needs_tick(&self) -> bool {
        self.lifecycle.as_live().is_some_and(|core| {
            !self.policy.quiet() || self.silence.can_change() || core.aligner().held_values() > 0
        })
    }

    /// Starts the tick if something can fall due and it is not running.
    pub(super) fn arm(&mut self, ctx: &mut Context<Self>) {
        if self.tick.is_none() && self.needs_tick() {
            self.tick = Some(ctx.run_interval(TICK, |act, ctx| act.tick(ctx)));
        }
    }

    fn tick(&mut self, ctx: &mut Context<Self>) {
        let _span = self.span.clone().entered();
        self.checks();
        if !self.needs_tick()
            && let Some(tick) = self.tick.take()
        {
            ctx.cancel_future(tick);
        }
    }

    fn checks(&mut self) {
        let Some(core) = self.lifecycle.live() else {
            return;
        };
        let now = Instant::now();
        let wall = Utc::now();
        // Expired values (and values cleared when a stall ended) reach the
        // metrics through the counters.
        core.expire(wall);
        self.tally.flush(core.counters(), &self.metrics);
        if self.policy.stalled(now) && !core.is_suspended() {
            tracing::warn!(
                monitor_id = %self.id,
                seconds = self.policy.waiting(now).as_secs(),
                "No checkpoint committed within the timeout; the model stops advancing until one does."
            );
            if core.suspend(wall) {
                self.policy.request(Trigger::CoverageChange, Instant::now());
            }
        }
        let change = self.silence.check(wall);
        self.silence_changed(change);
        self.checkpoint_if_due();
        self.publish();
    }
}
