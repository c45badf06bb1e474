//! The model side of one monitor as a pure runtime: inputs in (a batch of
//! raw messages, a tick, a commit outcome, a connection change, a request
//! for a checkpoint, the end of input, a halt), effects out (a snapshot to
//! commit with its results, results alone, observer notices, a quarantine,
//! the end of draining, the view to publish) and, as each input's
//! [`Output`], whether time passing alone can change anything
//! (`needs_tick`). No IO and no actor framework: the clock is a [`Clock`]
//! so tests drive time; telemetry events go through the monitor's
//! [`MonitorTelemetry`] handle and logs through `tracing`.
//!
//! Effects go to an [`Effects`] sink the moment they are decided, in
//! order, rather than after the input: a snapshot sealed before a fit is
//! handed on before the fit runs (so it can commit meanwhile, and a fit cut
//! short by a crash reruns from it), and the view is published exactly
//! where the model published it before. `radar-actors`' model actor is
//! the interpreter: its sink sends each effect as a message (or publishes
//! the view), and each handler arms the 1 s tick when the output needs it.
//!
//! - this file: the runtime, its setup, effects and output.
//! - `inputs`: what the runtime takes.
//! - `steps`: its own steps (a step's outcome, sealing, the fit, triggers).
//! - `view`: the view it publishes.
//! - `tally`: what the metrics were told, and the unit-mismatch log line.

use std::{sync::Arc, time::Instant};

use chrono::{DateTime, TimeDelta, Utc};
use uuid::Uuid;

use super::{Attempt, CheckpointPolicy, Lifecycle, MonitorCore, Silence, Trigger};
use crate::{
    coverage::CoverageHistory,
    graph::FailureDiagnostics,
    mqtt::payload::PayloadFormat,
    snapshot::{CheckpointKey, RecoveryMetadata, SealedSnapshot, SnapshotBinding},
    store::PendingResults,
    telemetry::MonitorTelemetry,
};

mod inputs;
mod steps;
mod tally;
mod view;

pub use view::ModelView;

use tally::{Tally, UnitMismatches};

/// Where the runtime reads the time: the wall clock for timestamps, the
/// monotonic clock for intervals. Tests drive both.
pub trait Clock {
    fn wall(&self) -> DateTime<Utc>;
    fn now(&self) -> Instant;
}

/// The process's clocks.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn wall(&self) -> DateTime<Utc> {
        Utc::now()
    }

    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// A sealed snapshot and the results produced up to it, which commit in
/// its transaction: what the checkpoint side is handed in one message.
#[derive(Debug, Clone)]
pub struct SnapshotHandoff {
    pub sealed: SealedSnapshot,
    pub results: PendingResults,
    pub trigger: Trigger,
    /// The checkpoint attempt the outcome is reported for.
    pub attempt: Attempt,
    /// The last snapshot of a graceful stop: its outcome ends the monitor.
    pub last: bool,
}

/// How a snapshot's commit ended, as the checkpoint side reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommitOutcome {
    pub committed: bool,
    /// The attempt that committed or failed.
    pub attempt: Attempt,
    /// The trigger of the snapshot, to retry it when the commit failed.
    pub trigger: Option<Trigger>,
    pub wall: DateTime<Utc>,
}

/// What a monitor's model reported to an observer, as it happened.
#[derive(Debug, Clone, PartialEq)]
pub enum Notice {
    /// A scored frame above the threshold.
    Flagged {
        monitor_id: Uuid,
        ts: DateTime<Utc>,
        /// Per required reading, its share of the frame's raw score.
        contributions: Vec<f64>,
    },
    AlarmOpened {
        monitor_id: Uuid,
        seq: u64,
        ts: DateTime<Utc>,
        peak_score: f64,
    },
    AlarmClosed {
        monitor_id: Uuid,
        seq: u64,
        ts: DateTime<Utc>,
        peak_score: f64,
    },
}

/// What the runtime asks its interpreter to do, in order.
#[derive(Debug, Clone)]
#[allow(clippy::large_enum_variant)]
pub enum Effect {
    /// Publish this view of the model (replacing the last one).
    Publish(ModelView),
    /// Commit this snapshot with its results.
    Commit(SnapshotHandoff),
    /// Results no snapshot took along, for a background evidence batch:
    /// at most one per input batch (or one before a quarantine).
    Results(PendingResults),
    /// Tell the observer (only when the runtime was set up observed).
    Notice(Notice),
    /// The graph run failed uncertainly: the monitor records the failure.
    Quarantined(FailureDiagnostics),
    /// Input ended and the last snapshot was sealed (or none could be).
    Drained,
}

/// Where the runtime puts its effects, as it decides them.
pub trait Effects {
    fn effect(&mut self, effect: Effect);
}

/// Collects the effects, in order (tests, and any caller that carries them
/// out after the input).
impl Effects for Vec<Effect> {
    fn effect(&mut self, effect: Effect) {
        self.push(effect);
    }
}

/// What an input leaves for its interpreter beside the effects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub struct Output {
    /// Whether time passing alone can change anything now: the interpreter
    /// keeps a tick running while it does, and only then.
    pub needs_tick: bool,
    /// While it does: before this wall time a tick changes nothing, so the
    /// tick may wait for it (see [`ModelRuntime::tick_not_before`]).
    pub tick_not_before: Option<DateTime<Utc>>,
}

/// Everything a model runtime starts with.
pub struct ModelSetup {
    pub core: MonitorCore,
    pub binding: SnapshotBinding,
    pub key: Arc<CheckpointKey>,
    pub max_payload_bytes: usize,
    pub policy: CheckpointPolicy,
    pub metrics: MonitorTelemetry,
    /// Whether an observer listens: `Notice` effects only then.
    pub observed: bool,
}

/// The model side of one monitor: what it holds and decides.
pub struct ModelRuntime<E: Effects, C: Clock = SystemClock> {
    /// The monitor's id, for the log lines of every state (an ended
    /// lifecycle keeps nothing else).
    id: Uuid,
    /// The model and what its state still allows: only a live one ingests,
    /// fits or seals.
    lifecycle: Lifecycle,
    binding: SnapshotBinding,
    key: Arc<CheckpointKey>,
    max_payload_bytes: usize,
    /// The monitor's `[payload]` table, compiled once.
    format: PayloadFormat,
    unit_mismatches: UnitMismatches,
    policy: CheckpointPolicy,
    /// Alarms and evidence of the batch being handled, not yet handed on:
    /// the next snapshot sealed in the batch carries them, or one
    /// `Results` effect at the batch's end.
    results: PendingResults,
    observed: bool,
    consumed: u64,
    /// The coverage history as last published; cloned again only when its
    /// version changes, so publishing a view per batch stays cheap.
    coverage: Arc<CoverageHistory>,
    recovery: Arc<RecoveryMetadata>,
    metrics: MonitorTelemetry,
    /// What the metrics were last told of the core's counters.
    tally: Tally,
    /// Restored and still waiting for the first new frame, which measures
    /// the possible coverage gap since the snapshot's save time.
    gap_pending_since: Option<DateTime<Utc>>,
    /// Whether required readings went silent while connected (`no_data`).
    silence: Silence,
    clock: C,
    /// Where the effects go.
    effects: E,
}

impl<E: Effects> ModelRuntime<E, SystemClock> {
    pub fn new(setup: ModelSetup, effects: E) -> Self {
        Self::with_clock(setup, effects, SystemClock)
    }
}

impl<E: Effects, C: Clock> ModelRuntime<E, C> {
    pub fn with_clock(setup: ModelSetup, effects: E, clock: C) -> Self {
        let core = setup.core;
        let gap_pending_since = core
            .recovery()
            .restored_processed_count
            .and(core.coverage().last_restore().map(|mark| mark.saved_at));
        Self {
            id: core.service_id(),
            coverage: Arc::new(core.coverage().clone()),
            recovery: Arc::new(core.recovery().clone()),
            silence: Silence::new(core.config()),
            format: PayloadFormat::of(core.config().payload.as_ref()),
            tally: Tally::from(core.counters()),
            gap_pending_since,
            lifecycle: Lifecycle::new(core),
            binding: setup.binding,
            key: setup.key,
            max_payload_bytes: setup.max_payload_bytes,
            unit_mismatches: UnitMismatches::default(),
            policy: setup.policy,
            results: PendingResults::default(),
            observed: setup.observed,
            consumed: 0,
            metrics: setup.metrics,
            clock,
            effects,
        }
    }

    pub fn id(&self) -> Uuid {
        self.id
    }

    /// The model's state and what it still allows.
    pub fn lifecycle(&self) -> &Lifecycle {
        &self.lifecycle
    }

    /// Whether time passing alone can change anything: a checkpoint that
    /// can fall due or stall, required readings that can fall silent, held
    /// values that can expire. When none can, only an input (a batch, a
    /// commit outcome, a connection change) changes the state.
    pub fn needs_tick(&self) -> bool {
        self.lifecycle.as_live().is_some_and(|core| {
            !self.policy.quiet() || self.silence.can_change() || core.aligner().held_values() > 0
        })
    }

    /// While [`Self::needs_tick`]: the wall time before which a tick can
    /// change nothing, when every reason to tick has a known deadline (a
    /// checkpoint's maximum interval or timeout, required readings falling
    /// silent); `None`: tick every time (held values can expire, a
    /// requested checkpoint waits, or nothing can fall due at all).
    pub fn tick_not_before(&self) -> Option<DateTime<Utc>> {
        let core = self.lifecycle.as_live()?;
        if core.aligner().held_values() > 0 {
            return None;
        }
        let policy = if self.policy.quiet() {
            None
        } else {
            let at = self.policy.next_deadline()?;
            let ahead = at.saturating_duration_since(self.clock.now());
            Some(self.clock.wall() + TimeDelta::from_std(ahead).ok()?)
        };
        let silence = if self.silence.can_change() {
            Some(self.silence.due()?)
        } else {
            None
        };
        match (policy, silence) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// What this input leaves beside its effects.
    fn output(&self) -> Output {
        let needs_tick = self.needs_tick();
        Output {
            needs_tick,
            tick_not_before: needs_tick.then(|| self.tick_not_before()).flatten(),
        }
    }

    fn effect(&mut self, effect: Effect) {
        self.effects.effect(effect);
    }
}

#[cfg(test)]
mod tests;
