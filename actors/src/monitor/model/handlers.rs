//! The messages the model actor takes and its stream handler: each calls
//! one input of the runtime and carries out its output.

use std::time::Instant;

use actix::prelude::*;
use futures_util::StreamExt;
use radar::{
    mqtt::{ConnectionEvent, RawMessage},
    runtime::{CommitOutcome, Trigger},
};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use super::{BATCH, ModelActor};
use crate::monitor::messages::Halt;

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
pub struct CommitReport(pub CommitOutcome);

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
        let output = self.runtime.ingest(messages);
        self.after(output, ctx);
    }

    /// The queue ended because ingestion stopped: the last snapshot,
    /// unless the model is not live.
    fn finished(&mut self, ctx: &mut Self::Context) {
        let _span = self.span.clone().entered();
        let output = self.runtime.input_ended();
        self.after(output, ctx);
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
        let (handed, output) = self.runtime.checkpoint_now(msg.trigger);
        // The stall clock runs from here until the commit report.
        self.after(output, ctx);
        handed
    }
}

impl Handler<ContinueAlarms> for ModelActor {
    type Result = ();

    fn handle(&mut self, msg: ContinueAlarms, _: &mut Self::Context) {
        self.runtime.continue_alarms(msg.after);
    }
}

impl Handler<CommitReport> for ModelActor {
    type Result = ();

    fn handle(&mut self, msg: CommitReport, ctx: &mut Self::Context) {
        let _span = self.span.clone().entered();
        let output = self.runtime.committed(msg.0);
        self.after(output, ctx);
    }
}

impl Handler<BatchSettled> for ModelActor {
    type Result = ();

    fn handle(&mut self, msg: BatchSettled, ctx: &mut Self::Context) {
        let output = self.runtime.batch_settled(msg.committed, msg.started);
        self.after(output, ctx);
    }
}

impl Handler<Connection> for ModelActor {
    type Result = ();

    fn handle(&mut self, msg: Connection, ctx: &mut Self::Context) {
        let _span = self.span.clone().entered();
        let output = self.runtime.connection(&msg.event);
        self.after(output, ctx);
    }
}

impl Handler<Halt> for ModelActor {
    type Result = ();

    fn handle(&mut self, msg: Halt, ctx: &mut Self::Context) {
        let _span = self.span.clone().entered();
        self.runtime.halt(msg.reason);
        ctx.stop();
    }
}
