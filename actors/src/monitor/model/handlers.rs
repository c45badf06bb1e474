//! The messages the model actor takes and its stream handler.

use std::time::Instant;

use actix::prelude::*;
use chrono::{DateTime, Utc};
use futures_util::StreamExt;
use radar::{
    mqtt::{ConnectionEvent, RawMessage},
    runtime::{Attempt, Lifecycle, Trigger},
};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use super::{BATCH, ModelActor};
use crate::monitor::{handlers::InputDrained, messages::Halt};

/// Monitor -> model: start consuming the ingress queue.
#[derive(Message)]
#[rtype(result = "()")]
pub struct AttachInput {
    pub messages: mpsc::Receiver<RawMessage>,
}

/// Ingestion -> model: the connection changed (coverage records outages).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Connection {
    pub event: ConnectionEvent,
}

/// Monitor -> model, before any input: seal the checkpoint before
/// subscribing and hand it to the checkpoint actor, like every other
/// snapshot. An error says why nothing was sealed.
#[derive(Message)]
#[rtype(result = "Result<(), String>")]
pub struct CheckpointNow {
    pub trigger: Trigger,
}

/// Checkpoint -> model, before any input: the alarm table already holds
/// alarms numbered up to `after`; the next one must be numbered after it.
#[derive(Message)]
#[rtype(result = "()")]
pub struct ContinueAlarms {
    pub after: u64,
}

/// Checkpoint -> model: a snapshot committed (or could not be).
#[derive(Message)]
#[rtype(result = "()")]
pub struct CommitReport {
    pub committed: bool,
    /// The attempt that committed or failed.
    pub attempt: Attempt,
    /// The trigger of the snapshot, to retry it when the commit failed.
    pub trigger: Option<Trigger>,
    pub wall: DateTime<Utc>,
}

/// Checkpoint -> model: a background evidence batch, started at `started`,
/// committed or failed. Failed batches count toward the stall timeout.
#[derive(Message)]
#[rtype(result = "()")]
pub struct BatchSettled {
    pub committed: bool,
    pub started: Instant,
}

impl StreamHandler<Vec<RawMessage>> for ModelActor {
    fn handle(&mut self, messages: Vec<RawMessage>, ctx: &mut Self::Context) {
        let _span = self.span.clone().entered();
        if matches!(self.lifecycle, Lifecycle::Halted(_)) {
            // Nothing more, not even a view.
            return;
        }
        for message in messages {
            if self.lifecycle.as_live().is_none() {
                // Quarantined: no graph call after the failing one.
                break;
            }
            self.consumed += 1;
            let now = message.processing_time(Instant::now());
            let parsed = message.observation(&self.format, self.max_payload_bytes);
            if parsed == Err(radar::mqtt::payload::PayloadRejection::TimestampUnit) {
                let m = &mut self.unit_mismatches;
                m.count += 1;
                if m.first.is_none() {
                    m.first = Some((message.reading, self.format.unit_hint(&message.payload)));
                }
            }
            let reading = parsed.as_ref().ok().map(|o| (o.reading, o.received_at));
            let Some(step) = self.lifecycle.ingest(parsed, now) else {
                break;
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
        }
        // What no snapshot of this batch took along is written by a
        // background evidence batch.
        self.send_results();
        if let Some(facts) = self.lifecycle.facts() {
            self.tally.flush(facts.counters(), &self.metrics);
        }
        self.log_unit_mismatches();
        self.publish();
        self.arm(ctx);
    }

    /// The queue ended because ingestion stopped: take the last snapshot,
    /// unless quarantined (a quarantined monitor never seals again).
    fn finished(&mut self, _: &mut Self::Context) {
        let _span = self.span.clone().entered();
        if self.lifecycle.as_live().is_none() {
            return;
        }
        self.checkpoint_now(Trigger::Shutdown, true);
        self.lifecycle.drain();
        self.publish();
        self.monitor.do_send(InputDrained);
    }
}

impl Handler<AttachInput> for ModelActor {
    type Result = ();

    fn handle(&mut self, msg: AttachInput, ctx: &mut Self::Context) {
        let _span = self.span.clone().entered();
        ctx.add_stream(ReceiverStream::new(msg.messages).ready_chunks(BATCH));
    }
}

impl Handler<CheckpointNow> for ModelActor {
    type Result = Result<(), String>;

    fn handle(&mut self, msg: CheckpointNow, ctx: &mut Self::Context) -> Self::Result {
        let _span = self.span.clone().entered();
        if self.lifecycle.as_live().is_none() {
            return Err(self.not_live());
        }
        self.policy.request(msg.trigger, Instant::now());
        let handed = self.hand_off(msg.trigger, false);
        // The stall clock runs from here until the commit report.
        self.arm(ctx);
        handed
    }
}

impl Handler<ContinueAlarms> for ModelActor {
    type Result = ();

    fn handle(&mut self, msg: ContinueAlarms, _: &mut Self::Context) {
        self.lifecycle.continue_alarms_after(msg.after);
    }
}

impl Handler<CommitReport> for ModelActor {
    type Result = ();

    fn handle(&mut self, msg: CommitReport, ctx: &mut Self::Context) {
        let _span = self.span.clone().entered();
        if matches!(self.lifecycle, Lifecycle::Halted(_)) {
            return;
        }
        if msg.committed {
            self.policy.committed(msg.attempt);
            if self.lifecycle.resume(msg.wall) {
                tracing::info!(monitor_id = %self.id, "A checkpoint committed again; the model advances.");
                self.policy.request(Trigger::CoverageChange, Instant::now());
            }
        } else {
            self.policy.failed(msg.attempt, msg.trigger, Instant::now());
        }
        self.publish();
        self.arm(ctx);
    }
}

impl Handler<BatchSettled> for ModelActor {
    type Result = ();

    fn handle(&mut self, msg: BatchSettled, ctx: &mut Self::Context) {
        if matches!(self.lifecycle, Lifecycle::Halted(_)) {
            return;
        }
        if msg.committed {
            self.policy.batch_committed();
        } else {
            self.policy.batch_failed(msg.started);
        }
        self.arm(ctx);
    }
}

impl Handler<Connection> for ModelActor {
    type Result = ();

    fn handle(&mut self, msg: Connection, ctx: &mut Self::Context) {
        let _span = self.span.clone().entered();
        if matches!(self.lifecycle, Lifecycle::Halted(_)) {
            return;
        }
        let mut changed = self.lifecycle.record_connection(&msg.event);
        match &msg.event {
            ConnectionEvent::Connected { at, .. } => self.silence.connected(*at),
            ConnectionEvent::Disconnected { at, .. } => {
                if let Some(change) = self.silence.disconnected(*at) {
                    changed |= self.lifecycle.record_silence(&change);
                }
            }
            _ => {}
        }
        if changed {
            self.policy.request(Trigger::CoverageChange, Instant::now());
            self.checkpoint_if_due();
        }
        self.publish();
        self.arm(ctx);
    }
}

impl Handler<Halt> for ModelActor {
    type Result = ();

    fn handle(&mut self, msg: Halt, ctx: &mut Self::Context) {
        let _span = self.span.clone().entered();
        tracing::info!(monitor_id = %self.id, reason = %msg.reason, "Model halted.");
        self.lifecycle.halt(msg.reason);
        ctx.stop();
    }
}
