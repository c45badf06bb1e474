//! The one message several of a monitor's actors take. Every other message
//! is defined beside the actor that receives it (`handlers.rs` of the
//! monitor, `model/handlers.rs`, `checkpoint/handlers.rs`, `ingestion.rs`).

use actix::prelude::*;
use radar::runtime::ExitReason;

/// Monitor -> model, checkpoint and health: a terminal state; do nothing
/// more.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Halt {
    pub reason: ExitReason,
}
