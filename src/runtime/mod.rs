//! Runtime decisions free of any actor framework: the model side of a
//! monitor as a pure runtime (`model`: [`ModelRuntime`] takes a batch of
//! raw messages, a tick, a commit outcome, a connection change, the end of
//! input or a halt, and returns effects — a snapshot to commit with its
//! results, results alone, observer notices, a quarantine, the drain — with
//! the view to publish and whether it needs the clock), its lifecycle
//! (`lifecycle`: only a live model ingests, fits or seals; drained,
//! quarantined, ownership-lost and stopped states cannot), checkpoint
//! triggers, retry pauses, shard assignment, exit reasons, ownership and
//! the start plan (`start`: fresh, restore or refuse, and the exit a
//! refused graph run takes). `radar-actors` carries them out: its model actor is a thin
//! interpreter of the runtime's effects.
//!
//! # The path of one message
//!
//! One PUBLISH in `radar worker` (`radar_actors` is `actors/src`), when it
//! completes the frame that reaches `interval_frames`, as read in the code
//! (issue #19: before as of 19bacc0, where `ModelActor` made the model
//! side's decisions; after, with those decisions in [`ModelRuntime`]):
//!
//! 1. `radar::mqtt::owner::Owner::next_input` (mqtt/owner/run.rs) — rumqttc `EventLoop::poll` yields `Incoming(Publish)`, the session's `Input::Publish`; a task on the monitor actor's arbiter
//! 2. `radar::mqtt::session::Session::handle` (mqtt/session/mod.rs) — the connection is up: `Action::Admit`, which `Owner::carry_out` (mqtt/owner/actions.rs) hands to `admit`
//! 3. `Owner::admit` (mqtt/owner/admission.rs) — stamps the receipt clocks
//! 4. `radar::mqtt::ingress::admit` (mqtt/ingress.rs) — topic route and size check; the `RawMessage` joins the burst
//! 5. `Owner::queue_burst` (mqtt/owner/admission.rs) — sends into the bounded mpsc queue (the model's input stream), waiting while full [thread]
//! 6. `radar_actors::monitor::model::ModelActor as StreamHandler<Vec<RawMessage>>::handle` (model/handlers.rs) — takes a `ready_chunks(256)` batch on the model thread and hands it to the runtime
//! 7. `ModelRuntime::ingest` (runtime/model/inputs.rs) — the batch, message by message while live
//! 8. `ModelRuntime::ingest_one` (runtime/model/inputs.rs) — one message
//! 9. `RawMessage::observation` (mqtt/ingress.rs) — parses the payload via `PayloadFormat::parse` (mqtt/payload.rs)
//! 10. `Lifecycle::ingest` (runtime/lifecycle.rs) — only a live model ingests; a step that quarantines the graph run retires the core
//! 11. `MonitorCore::ingest` (runtime/core/ingest.rs) — refuses if suspended or quarantined
//! 12. `radar::align::Aligner::admit` (align/aligner/mod.rs) — aligns; `FrameReady`
//! 13. `MonitorCore::offer` (runtime/core/ingest.rs) — scores the frame and records coverage
//! 14. `radar::detector::Detector::process` (detector/state/mod.rs) — the score (a graph monitor calls its run's `offer` instead)
//! 15. `ModelRuntime::record` (runtime/model/steps.rs) — metrics, and observer notices as `Notice` effects
//! 16. `ModelRuntime::after_step` (runtime/model/steps.rs) — keeps the step's alarms and evidence in the runtime's `results` (no message)
//! 17. `CheckpointPolicy::on_frames` (runtime/checkpoint_policy/decide.rs) — requests `FrameInterval`
//! 18. `ModelRuntime::checkpoint_if_due` (runtime/model/steps.rs)
//! 19. `CheckpointPolicy::due` (runtime/checkpoint_policy/decide.rs) — the trigger, unless a failure's pause lasts
//! 20. `ModelRuntime::seal_now` (runtime/model/steps.rs)
//! 21. `ModelRuntime::hand_off` (runtime/model/steps.rs) — only a live core has state to seal; `HandOff::send` starts the attempt and seals (22, 23), then gives the effects sink `Effect::Commit` carrying the kept results
//! 22. `CheckpointPolicy::started` (runtime/checkpoint_policy/record.rs) — the `Attempt`; covers every change so far
//! 23. `HandOff::seal` (runtime/model/steps.rs) — `MonitorCore::managed_state`, then `radar::snapshot::seal`
//! 24. `Interpreter as Effects::effect` (model/mod.rs) — the actor's effects sink, at once (mid-batch, as before): sends `SnapshotReady`
//! 25. `CheckpointActor as Handler<SnapshotReady>::handle` (checkpoint/handlers.rs) — [mailbox] [thread]
//! 26. `CheckpointActor::queue` (checkpoint/handlers.rs) — the results join the pending ones; the snapshot is kept as `next`
//! 27. `CheckpointActor::drive` (checkpoint/mod.rs) — the writer is idle and the retry pause over
//! 28. `CheckpointActor::commit_snapshot` (checkpoint/writes.rs) — runs the write with `.wait(ctx)`
//! 29. `radar::store::CheckpointWriter::checkpoint` (store/checkpoints/writer.rs) — fenced row swap, ledger and pending results in one transaction: committed
//! 30. `CheckpointActor::committed` (checkpoint/writes.rs) — frees the writer, updates the view and metrics; the one place a commit settles
//! 31. `CheckpointActor::report` (checkpoint/mod.rs) — sends `CommitReport`
//! 32. `ModelActor as Handler<CommitReport>::handle` (model/handlers.rs) — back on the model thread [mailbox] [thread]
//! 33. `ModelRuntime::committed` (runtime/model/inputs.rs) — the outcome as `CommitOutcome`
//! 34. `CheckpointPolicy::committed` (runtime/checkpoint_policy/record.rs) — settles the attempt
//!
//! Results no snapshot of their batch took along leave once per batch, at
//! its end (`ModelRuntime::send_results`, an `Effect::Results` that the
//! actor sends as `NewResults`): between checkpoints they commit as
//! background evidence batches (recovery rule 4), so that message remains,
//! off the commit path.
//!
//! | | before (19bacc0) | after |
//! |---|---|---|
//! | function-level hops | 31: 30 numbered steps, plus `Owner::carry_out` inside step 2 | 35: 34 numbered steps, plus `Owner::carry_out` inside step 2 (`HandOff::send` inside step 21 is counted as it was before, inside `hand_off`). The four new hops are the price of the split: the runtime's batch and message entries (7, 8), the interpreter (24) and the runtime's commit input (33); the actor no longer decides anything |
//! | crossings (thread + channel or mailbox) | 3: the queue, `SnapshotReady`, `CommitReport` | 3: the same |
//! | messages model <-> checkpoint per commit | 2, with or without results | 2, with or without results |
//! | `NewResults` | one per input batch, only for results no snapshot took | the same, as at most one `Effect::Results` per batch |
//! | ModelActor entries | 2 (the batch, the report) | 2 |
//! | where the decisions are | `ModelActor` (22 fields; five files, 941 lines) | `ModelRuntime`, unit- and property-tested without actix (runtime/model/tests.rs and tests/); `ModelActor` holds the runtime, the tick and the span, and its `Interpreter` sink the two addresses, the view sender and the observer (three files, 326 lines) |
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
//! a failure's pause) starts from the 1 s tick, a `Tick` message from the
//! worker's one timer (model/ticks.rs; model/timers.rs handles it and
//! calls `ModelRuntime::tick`): a third entry. The runtime's `needs_tick`
//! tells the actor when to keep that tick running.
//!
//! The first checkpoint (before subscribing) takes the same path from
//! step 21 on: the start asks the model for it (`CheckpointNow`, model
//! handlers, `ModelRuntime::checkpoint_now`), `drive` finds no writer yet and runs `commit_first`
//! (checkpoint/first.rs: the claim of a fresh row or the fenced replacement
//! of the loaded snapshot, with the alarm reconciliation in the same
//! transaction), which settles
//! in `committed` and reports through `report` like every commit; the start
//! only waits for its outcome before subscribing. Before, the start sealed
//! it (`SealNow`), committed it itself, sent the model a `CommitReport` in
//! the checkpoint actor's place and handed the writer over (`Claimed`).

mod checkpoint_policy;
mod core;
mod exit;
mod graph_run;
mod lifecycle;
mod model;
mod ownership;
mod retry;
mod shard;
mod silence;
mod start;

pub use checkpoint_policy::{Attempt, CheckpointLimits, CheckpointPolicy, Trigger};
pub use core::{CoreError, ExportError, MonitorCore, Step, Verdict, no_snapshot};
pub use exit::{ExitReason, Restart};
pub use lifecycle::{Facts, Lifecycle, Retired};
pub use model::{
    Clock, CommitOutcome, Effect, Effects, ModelRuntime, ModelSetup, ModelView, Notice, Output,
    SnapshotHandoff, SystemClock,
};
pub use ownership::Ownership;
pub use retry::{FIRST_RETRY, RetryBackoff};
pub use shard::owns;
pub use silence::{Silence, SilenceChange};
pub use start::{RefusedRun, START_ATTEMPTS, StartPlan, retry_overtaken_start};
