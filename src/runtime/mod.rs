//! Runtime decisions free of any actor framework: the model side of a
//! monitor, checkpoint triggers, retry pauses, shard assignment, exit reasons and the start plan
//! (`start`: fresh, restore or refuse, and the exit a refused graph run
//! takes). `radar-actors` carries them out.
//!
//! # The path of one message
//!
//! One PUBLISH in `radar worker` (`radar_actors` is `actors/src`), when it
//! completes the frame that reaches `interval_frames`, as read in the code
//! (issue #19: before as of 1c4d103; after, with one commit path):
//!
//! 1. `radar::mqtt::owner::Owner::stream` (mqtt/owner/session.rs) — rumqttc `EventLoop::poll` yields `Incoming(Publish)`; a task on the monitor actor's arbiter
//! 2. `Owner::on_event` (mqtt/owner/session.rs) — routes the PUBLISH to `admit`
//! 3. `Owner::admit` (mqtt/owner/admission.rs) — stamps the receipt clocks
//! 4. `radar::mqtt::ingress::admit` (mqtt/ingress.rs) — topic route and size check; the `RawMessage` joins the burst
//! 5. `Owner::queue_burst` (mqtt/owner/admission.rs) — sends into the bounded mpsc queue (the model's input stream), waiting while full [thread]
//! 6. `radar_actors::monitor::model::ModelActor as StreamHandler<Vec<RawMessage>>::handle` (model/handlers.rs) — takes a `ready_chunks(256)` batch on the model thread
//! 7. `RawMessage::observation` (mqtt/ingress.rs) — parses the payload via `PayloadFormat::parse` (mqtt/payload.rs)
//! 8. `MonitorCore::ingest` (runtime/core/ingest.rs) — refuses if suspended or quarantined
//! 9. `radar::align::Aligner::admit` (align/aligner/mod.rs) — aligns; `FrameReady`
//! 10. `MonitorCore::offer` (runtime/core/ingest.rs) — scores the frame and records coverage
//! 11. `radar::detector::Detector::process` (detector/state/mod.rs) — the score (a graph monitor calls its run's `offer` instead)
//! 12. `ModelActor::record` (model/state.rs) — metrics and observer notices
//! 13. `ModelActor::after_step` (model/state.rs) — keeps the step's alarms and evidence in the model's `results` (no message)
//! 14. `CheckpointPolicy::on_frames` (runtime/checkpoint_policy/decide.rs) — requests `FrameInterval`
//! 15. `ModelActor::checkpoint_if_due` (model/state.rs)
//! 16. `CheckpointPolicy::due` (runtime/checkpoint_policy/decide.rs) — the trigger, unless a failure's pause lasts
//! 17. `ModelActor::checkpoint_now` (model/state.rs)
//! 18. `ModelActor::hand_off` (model/state.rs) — starts the attempt and seals (19, 20), then sends `SnapshotReady` carrying the kept results
//! 19. `CheckpointPolicy::started` (runtime/checkpoint_policy/record.rs) — the `Attempt`; covers every change so far
//! 20. `ModelActor::seal` (model/state.rs) — `MonitorCore::managed_state`, then `radar::snapshot::seal`
//! 21. `CheckpointActor as Handler<SnapshotReady>::handle` (checkpoint/handlers.rs) — [mailbox] [thread]
//! 22. `CheckpointActor::queue` (checkpoint/handlers.rs) — the results join the pending ones; the snapshot is kept as `next`
//! 23. `CheckpointActor::drive` (checkpoint/mod.rs) — the writer is idle and the retry pause over
//! 24. `CheckpointActor::commit_snapshot` (checkpoint/writes.rs) — runs the write with `.wait(ctx)`
//! 25. `radar::store::CheckpointWriter::checkpoint` (store/checkpoints/writer.rs) — fenced row swap, ledger and pending results in one transaction: committed
//! 26. `CheckpointActor::committed` (checkpoint/writes.rs) — frees the writer, updates the view and metrics; the one place a commit settles
//! 27. `CheckpointActor::report` (checkpoint/mod.rs) — sends `CommitReport`
//! 28. `ModelActor as Handler<CommitReport>::handle` (model/handlers.rs) — back on the model thread [mailbox] [thread]
//! 29. `CheckpointPolicy::committed` (runtime/checkpoint_policy/record.rs) — settles the attempt
//!
//! Results no snapshot of their batch took along leave once per batch, at
//! its end (`ModelActor::send_results`, a `NewResults` message): between
//! checkpoints they commit as background evidence batches (recovery rule 4),
//! so that message remains, off the commit path.
//!
//! | | before (1c4d103) | after |
//! |---|---|---|
//! | function-level hops | 26 | 29 (`hand_off`, `queue` and `committed` are named steps now) |
//! | crossings (thread + channel or mailbox) | 3, 4 with results | 3: the queue, `SnapshotReady`, `CommitReport` |
//! | messages model <-> checkpoint per commit | 2, 3 with results | 2, with or without results |
//! | `NewResults` | one per step with results | one per input batch, only for results no snapshot took |
//! | ModelActor entries | 2 (the batch, the report) | 2 |
//!
//! The owner and the checkpoint actor share the monitor actor's arbiter;
//! the model has its own thread. A checkpoint due later (maximum interval,
//! a failure's pause) starts from the 1 s tick (model/timers.rs): a third
//! entry.
//!
//! The first checkpoint (before subscribing) takes the same path from
//! step 18 on: the start asks the model for it (`CheckpointNow`, model
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
mod retry;
mod shard;
mod silence;
mod start;

pub use checkpoint_policy::{Attempt, CheckpointLimits, CheckpointPolicy, Trigger};
pub use core::{CoreError, ExportError, MonitorCore, Step, Verdict, no_snapshot};
pub use exit::{ExitReason, Restart};
pub use retry::{FIRST_RETRY, RetryBackoff};
pub use shard::owns;
pub use silence::{Silence, SilenceChange};
pub use start::{RefusedRun, START_ATTEMPTS, StartPlan, retry_overtaken_start};
