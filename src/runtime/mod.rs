//! Runtime decisions free of any actor framework: the model side of a
//! monitor, checkpoint triggers, retry pauses, shard assignment, exit reasons and the start plan
//! (`start`: fresh, restore or refuse, and the exit a refused graph run
//! takes). `radar-actors` carries them out.
//!
//! # The path of one message (as of 1c4d103)
//!
//! One PUBLISH in `radar worker` (`radar_actors` is `actors/src`), when it
//! completes the frame that reaches `interval_frames`, as read in the code:
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
//! 13. `ModelActor::after_step` (model/state.rs) — sends `NewResults` to the checkpoint actor only if the step has alarms or evidence (optional [mailbox] [thread])
//! 14. `CheckpointPolicy::on_frames` (runtime/checkpoint_policy/decide.rs) — requests `FrameInterval`
//! 15. `ModelActor::checkpoint_if_due` (model/state.rs)
//! 16. `CheckpointPolicy::due` (runtime/checkpoint_policy/decide.rs) — the trigger, unless a failure's pause lasts
//! 17. `ModelActor::checkpoint_now` (model/state.rs)
//! 18. `CheckpointPolicy::started` (runtime/checkpoint_policy/record.rs) — the `Attempt`; covers every change so far
//! 19. `ModelActor::seal` (model/state.rs) — `MonitorCore::managed_state`, then `radar::snapshot::seal`
//! 20. `CheckpointActor as Handler<SnapshotReady>::handle` (checkpoint/handlers.rs) — keeps it as `next` [mailbox] [thread]
//! 21. `CheckpointActor::drive` (checkpoint/mod.rs) — the writer is idle and the retry pause over
//! 22. `CheckpointActor::commit_snapshot` (checkpoint/writes.rs) — runs the write with `.wait(ctx)`
//! 23. `radar::store::CheckpointWriter::checkpoint` (store/checkpoints/writer.rs) — fenced row swap, ledger and pending results in one transaction: committed
//! 24. `CheckpointActor::report` (checkpoint/mod.rs) — sends `CommitReport` from the write's completion
//! 25. `ModelActor as Handler<CommitReport>::handle` (model/handlers.rs) — back on the model thread [mailbox] [thread]
//! 26. `CheckpointPolicy::committed` (runtime/checkpoint_policy/record.rs) — settles the attempt
//!
//! Totals: 26 function-level hops; 3 crossings, each a thread and a channel
//! or mailbox (queue, `SnapshotReady`, `CommitReport`: the owner and the
//! checkpoint actor share the monitor actor's arbiter, the model has its own
//! thread), 4 with the optional `NewResults`; ModelActor entered twice (the
//! batch, the report); 2 messages between the model and checkpoint actors
//! per commit, 3 with results. A checkpoint due later (maximum interval, a
//! failure's pause) starts from the 1 s tick (model/timers.rs): a third entry.

mod checkpoint_policy;
mod core;
mod exit;
mod graph_run;
mod retry;
mod shard;
mod silence;
mod start;

pub use checkpoint_policy::{Attempt, CheckpointLimits, CheckpointPolicy, Trigger};
pub use core::{CoreError, ExportError, MonitorCore, Step, Verdict};
pub use exit::{ExitReason, Restart};
pub use retry::{FIRST_RETRY, RetryBackoff};
pub use shard::owns;
pub use silence::{Silence, SilenceChange};
pub use start::{RefusedRun, START_ATTEMPTS, StartPlan, retry_overtaken_start};
