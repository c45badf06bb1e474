//! Runtime decisions free of any actor framework: the model side of a
//! monitor and its lifecycle (`lifecycle`: only a live model ingests, fits
//! or seals; drained, quarantined and halted states cannot), checkpoint
//! triggers, retry pauses, shard assignment, exit reasons, ownership and
//! the start plan (`start`: fresh, restore or refuse, and the exit a
//! refused graph run takes). `radar-actors` carries them out.
//!
//! # The path of one message
//!
//! One PUBLISH in `radar worker` (`radar_actors` is `actors/src`), when it
//! completes the frame that reaches `interval_frames`, as read in the code
//! (issue #19: before as of 1c4d103; after, with one commit path):
//!
//! 1. `radar::mqtt::owner::Owner::next_input` (mqtt/owner/run.rs) — rumqttc `EventLoop::poll` yields `Incoming(Publish)`, the session's `Input::Publish`; a task on the monitor actor's arbiter
//! 2. `radar::mqtt::session::Session::handle` (mqtt/session/mod.rs) — the connection is up: `Action::Admit`, which `Owner::carry_out` (mqtt/owner/actions.rs) hands to `admit`
//! 3. `Owner::admit` (mqtt/owner/admission.rs) — stamps the receipt clocks
//! 4. `radar::mqtt::ingress::admit` (mqtt/ingress.rs) — topic route and size check; the `RawMessage` joins the burst
//! 5. `Owner::queue_burst` (mqtt/owner/admission.rs) — sends into the bounded mpsc queue (the model's input stream), waiting while full [thread]
//! 6. `radar_actors::monitor::model::ModelActor as StreamHandler<Vec<RawMessage>>::handle` (model/handlers.rs) — takes a `ready_chunks(256)` batch on the model thread
//! 7. `RawMessage::observation` (mqtt/ingress.rs) — parses the payload via `PayloadFormat::parse` (mqtt/payload.rs)
//! 8. `Lifecycle::ingest` (runtime/lifecycle.rs) — only a live model ingests; a step that quarantines the graph run retires the core
//! 9. `MonitorCore::ingest` (runtime/core/ingest.rs) — refuses if suspended or quarantined
//! 10. `radar::align::Aligner::admit` (align/aligner/mod.rs) — aligns; `FrameReady`
//! 11. `MonitorCore::offer` (runtime/core/ingest.rs) — scores the frame and records coverage
//! 12. `radar::detector::Detector::process` (detector/state/mod.rs) — the score (a graph monitor calls its run's `offer` instead)
//! 13. `ModelActor::record` (model/state.rs) — metrics and observer notices
//! 14. `ModelActor::after_step` (model/state.rs) — keeps the step's alarms and evidence in the model's `results` (no message)
//! 15. `CheckpointPolicy::on_frames` (runtime/checkpoint_policy/decide.rs) — requests `FrameInterval`
//! 16. `ModelActor::checkpoint_if_due` (model/state.rs)
//! 17. `CheckpointPolicy::due` (runtime/checkpoint_policy/decide.rs) — the trigger, unless a failure's pause lasts
//! 18. `ModelActor::checkpoint_now` (model/state.rs)
//! 19. `ModelActor::hand_off` (model/state.rs) — starts the attempt and seals (20, 21), then sends `SnapshotReady` carrying the kept results
//! 20. `CheckpointPolicy::started` (runtime/checkpoint_policy/record.rs) — the `Attempt`; covers every change so far
//! 21. `ModelActor::seal` (model/state.rs) — `Lifecycle::as_live` (only a live core has state to seal), `MonitorCore::managed_state`, then `radar::snapshot::seal`
//! 22. `CheckpointActor as Handler<SnapshotReady>::handle` (checkpoint/handlers.rs) — [mailbox] [thread]
//! 23. `CheckpointActor::queue` (checkpoint/handlers.rs) — the results join the pending ones; the snapshot is kept as `next`
//! 24. `CheckpointActor::drive` (checkpoint/mod.rs) — the writer is idle and the retry pause over
//! 25. `CheckpointActor::commit_snapshot` (checkpoint/writes.rs) — runs the write with `.wait(ctx)`
//! 26. `radar::store::CheckpointWriter::checkpoint` (store/checkpoints/writer.rs) — fenced row swap, ledger and pending results in one transaction: committed
//! 27. `CheckpointActor::committed` (checkpoint/writes.rs) — frees the writer, updates the view and metrics; the one place a commit settles
//! 28. `CheckpointActor::report` (checkpoint/mod.rs) — sends `CommitReport`
//! 29. `ModelActor as Handler<CommitReport>::handle` (model/handlers.rs) — back on the model thread [mailbox] [thread]
//! 30. `CheckpointPolicy::committed` (runtime/checkpoint_policy/record.rs) — settles the attempt
//!
//! Results no snapshot of their batch took along leave once per batch, at
//! its end (`ModelActor::send_results`, a `NewResults` message): between
//! checkpoints they commit as background evidence batches (recovery rule 4),
//! so that message remains, off the commit path.
//!
//! | | before (1c4d103) | after |
//! |---|---|---|
//! | function-level hops | 26 | 31: 30 numbered steps, plus `Owner::carry_out` inside step 2 (`hand_off`, `queue` and `committed` are named steps now; the reconnect session decides in step 2; `Lifecycle::ingest` gates the core in step 8) |
//! | crossings (thread + channel or mailbox) | 3, 4 with results | 3: the queue, `SnapshotReady`, `CommitReport` |
//! | messages model <-> checkpoint per commit | 2, 3 with results | 2, with or without results |
//! | `NewResults` | one per step with results | one per input batch, only for results no snapshot took |
//! | ModelActor entries | 2 (the batch, the report) | 2 |
//!
//! # Reconnection
//!
//! The design card lists a reconnect actor beside ingestion. The reconnect
//! owner stays one task under the ingestion actor, with its decisions in a
//! pure state machine, `radar::mqtt::session::Session`: inputs from the
//! event loop in, actions out (subscribe, admit, drop the connection,
//! report, back off), no IO. Why not an actor of its own:
//!
//! - rumqttc delivers CONNACK, SUBACKs and PUBLISHes through one
//!   `EventLoop`, which one task must poll without pause while connected
//!   (keep-alive pings are sent from `poll`). Reconnecting and admitting are
//!   two readings of the same stream, so an actor for each would either
//!   split the event loop (impossible) or move every PUBLISH or every
//!   CONNACK/SUBACK through a mailbox to reach the other.
//! - Back-pressure is the owner not polling while the bounded queue is full
//!   (the broker then holds the backlog). An actor's mailbox in between
//!   would have to buffer instead, or stop the actor that must keep the
//!   connection alive.
//! - During a backoff wait the event loop must not be polled at all, or
//!   rumqttc reconnects at once; the wait is part of the same loop.
//! - "Exactly one reconnect owner" is held by construction: one `Session`
//!   value per monitor, owned by one task, decides every attempt; the
//!   ingestion actor only starts and stops that task and relays its
//!   `ConnectionEvent`s to the model. The property tests of the session
//!   check that one attempt runs at a time and the backoff schedule.
//!
//! The owner and the checkpoint actor share the monitor actor's arbiter;
//! the model has its own thread. A checkpoint due later (maximum interval,
//! a failure's pause) starts from the 1 s tick (model/timers.rs): a third
//! entry.
//!
//! The first checkpoint (before subscribing) takes the same path from
//! step 19 on: the start asks the model for it (`CheckpointNow`, model
//! handlers), `drive` finds no writer yet and runs `commit_first`
//! (checkpoint/first.rs: the claim of a fresh row or the fenced replacement
//! of the loaded snapshot, then the alarm reconciliation), which settles
//! in `committed` and reports through `report` like every commit; the start
//! only waits for its outcome before subscribing. Before, the start sealed
//! it (`SealNow`), committed it itself, sent the model a `CommitReport` in
//! the checkpoint actor's place and handed the writer over (`Claimed`).

mod checkpoint_policy;
mod core;
mod exit;
mod graph_run;
mod lifecycle;
mod ownership;
mod retry;
mod shard;
mod silence;
mod start;

pub use checkpoint_policy::{Attempt, CheckpointLimits, CheckpointPolicy, Trigger};
pub use core::{CoreError, ExportError, MonitorCore, Step, Verdict, no_snapshot};
pub use exit::{ExitReason, Restart};
pub use lifecycle::{Facts, Lifecycle, Retired};
pub use ownership::Ownership;
pub use retry::{FIRST_RETRY, RetryBackoff};
pub use shard::owns;
pub use silence::{Silence, SilenceChange};
pub use start::{RefusedRun, START_ATTEMPTS, StartPlan, retry_overtaken_start};
