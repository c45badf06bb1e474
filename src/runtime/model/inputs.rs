//! What the model runtime takes: each input returns the [`Output`] its
//! interpreter carries out.

use std::time::Instant;

use super::{Clock, CommitOutcome, Effect, Effects, ModelRuntime, Output, steps::not_live};
use crate::{
    mqtt::{ConnectionEvent, RawMessage, payload::PayloadRejection},
    runtime::{ExitReason, Trigger},
};

impl<E: Effects, C: Clock> ModelRuntime<E, C> {
    /// A batch of messages from the ingress queue: parsed, aligned and
    /// scored one by one while the model is live. What no snapshot sealed
    /// in the batch took along leaves as one `Results` effect at its end.
    pub fn ingest(&mut self, messages: Vec<RawMessage>) -> Output {
        if self.lifecycle.has_ended() {
            // Nothing more, not even a view.
            return self.output();
        }
        for message in messages {
            if !self.ingest_one(&message) {
                // Quarantined: no graph call after the failing one.
                break;
            }
        }
        self.send_results();
        self.flush_tally();
        self.log_unit_mismatches();
        self.publish();
        self.output()
    }

    /// One message; whether the model is still live to take the next.
    fn ingest_one(&mut self, message: &RawMessage) -> bool {
        if self.lifecycle.as_live().is_none() {
            return false;
        }
        self.consumed += 1;
        let now = message.processing_time(self.clock.now());
        let parsed = message.observation(&self.format, self.max_payload_bytes);
        if parsed == Err(PayloadRejection::TimestampUnit) {
            let m = &mut self.unit_mismatches;
            m.count += 1;
            if m.first.is_none() {
                m.first = Some((message.reading, self.format.unit_hint(&message.payload)));
            }
        }
        let reading = parsed.as_ref().ok().map(|o| (o.reading, o.received_at));
        let Some(step) = self.lifecycle.ingest(parsed, now) else {
            return false;
        };
        if step.rejected.is_none()
            && let Some((reading, received_at)) = reading
        {
            self.silence.accepted(reading, received_at);
        }
        if step.frame.is_some() {
            let change = self.silence.frame(now);
            self.silence_changed(change);
        }
        self.record(&step);
        self.after_step(step);
        true
    }

    /// The input ended because ingestion stopped: the last snapshot, unless
    /// the model is not live (a quarantined monitor never seals again).
    pub fn input_ended(&mut self) -> Output {
        if self.lifecycle.as_live().is_none() {
            return self.output();
        }
        self.seal_now(Trigger::Shutdown, true);
        self.lifecycle.drain();
        self.publish();
        self.effect(Effect::Drained);
        self.output()
    }

    /// Seals a snapshot now, before any input (the first checkpoint). The
    /// error says why nothing was sealed.
    pub fn checkpoint_now(&mut self, trigger: Trigger) -> (Result<(), String>, Output) {
        if self.lifecycle.as_live().is_none() {
            let why = not_live(&self.lifecycle);
            return (Err(why), self.output());
        }
        self.policy.request(trigger, self.clock.now());
        // The stall clock runs from here until the commit outcome.
        let handed = self.hand_off(trigger, false);
        (handed, self.output())
    }

    /// The alarm table already holds alarms numbered up to `after`.
    pub fn continue_alarms(&mut self, after: u64) {
        self.lifecycle.continue_alarms_after(after);
    }

    /// A snapshot committed, or could not be: settles its attempt.
    pub fn committed(&mut self, outcome: CommitOutcome) -> Output {
        if self.lifecycle.has_ended() {
            return self.output();
        }
        if outcome.committed {
            self.policy.committed(outcome.attempt);
            if self.lifecycle.resume(outcome.wall) {
                tracing::info!(monitor_id = %self.id, "A checkpoint committed again; the model advances.");
                self.policy
                    .request(Trigger::CoverageChange, self.clock.now());
            }
        } else {
            self.policy
                .failed(outcome.attempt, outcome.trigger, self.clock.now());
        }
        self.publish();
        self.output()
    }

    /// A background evidence batch, started at `started`, committed or
    /// failed. Failed batches count toward the stall timeout.
    pub fn batch_settled(&mut self, committed: bool, started: Instant) -> Output {
        if self.lifecycle.has_ended() {
            return self.output();
        }
        if committed {
            self.policy.batch_committed();
        } else {
            self.policy.batch_failed(started);
        }
        self.output()
    }

    /// The connection changed: coverage records outages, silence restarts.
    pub fn connection(&mut self, event: &ConnectionEvent) -> Output {
        if self.lifecycle.has_ended() {
            return self.output();
        }
        let mut changed = self.lifecycle.record_connection(event);
        match event {
            ConnectionEvent::Connected { at, .. } => self.silence.connected(*at),
            ConnectionEvent::Disconnected { at, .. } => {
                if let Some(change) = self.silence.disconnected(*at) {
                    changed |= self.lifecycle.record_silence(&change);
                }
            }
            _ => {}
        }
        if changed {
            self.policy
                .request(Trigger::CoverageChange, self.clock.now());
            self.checkpoint_if_due();
        }
        self.publish();
        self.output()
    }

    /// The clock-driven checks: expiry, the stall timeout, silence, and a
    /// checkpoint due by time.
    pub fn tick(&mut self) -> Output {
        let Some(core) = self.lifecycle.live() else {
            return self.output();
        };
        let now = self.clock.now();
        let wall = self.clock.wall();
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
                self.policy
                    .request(Trigger::CoverageChange, self.clock.now());
            }
        }
        let change = self.silence.check(wall);
        self.silence_changed(change);
        self.checkpoint_if_due();
        self.publish();
        self.output()
    }

    /// The monitor ended: the model keeps nothing and does nothing more.
    pub fn halt(&mut self, reason: ExitReason) {
        tracing::info!(monitor_id = %self.id, reason = %reason, "Model halted.");
        self.lifecycle.halt(reason);
    }
}
