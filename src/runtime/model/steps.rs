//! The runtime's own steps: acting on a step's outcome, sealing a snapshot
//! and handing it on, the core's "checkpoint, then fit" step, and
//! checkpointing when due.
//!
//! What a hand-off takes is borrowed apart from the lifecycle
//! ([`HandOff`]), so that [`MonitorCore::fit_when_due`], the step that
//! `radar detect`, the demo and the benchmarks share, can seal the very
//! core it is about to fit.

use super::{Clock, Effect, Effects, ModelRuntime, Notice, SnapshotHandoff};
use crate::{
    detector::{AlarmEvent, Scored},
    runtime::{CheckpointPolicy, CoreError, Lifecycle, MonitorCore, SilenceChange, Step, Trigger},
    snapshot::{CheckpointKey, SealedSnapshot, SnapshotBinding, seal},
    store::PendingResults,
    telemetry::{DetectorPhase, ModelOperation, MonitorTelemetry, events},
};

/// What sealing a snapshot and handing it off takes beside the core.
struct HandOff<'a, E, C> {
    binding: &'a SnapshotBinding,
    key: &'a CheckpointKey,
    metrics: &'a MonitorTelemetry,
    policy: &'a mut CheckpointPolicy,
    clock: &'a C,
    /// The batch's results not yet handed on: the snapshot takes them.
    results: &'a mut PendingResults,
    effects: &'a mut E,
}

impl<E: Effects, C: Clock> HandOff<'_, E, C> {
    /// Seals `core`'s state.
    fn seal(&self, core: &MonitorCore) -> Result<SealedSnapshot, String> {
        let started = self.clock.now();
        let state = core.managed_state().map_err(|e| e.to_string())?;
        let sealed =
            seal(self.binding, &state, self.clock.wall(), self.key).map_err(|e| e.to_string());
        self.metrics.emit(events::ModelOperationFinished {
            operation: ModelOperation::EncodeSnapshot,
            duration: self.clock.now().saturating_duration_since(started),
        });
        sealed
    }

    /// Seals `core` and hands the snapshot on in one effect with the
    /// results produced up to it, which commit in its transaction.
    fn send(&mut self, core: &MonitorCore, trigger: Trigger, last: bool) -> Result<(), String> {
        let (_, attempt) = self.policy.started(self.clock.now());
        match self.seal(core) {
            Ok(sealed) => {
                self.effects.effect(Effect::Commit(SnapshotHandoff {
                    sealed,
                    results: std::mem::take(self.results),
                    trigger,
                    attempt,
                    last,
                }));
                Ok(())
            }
            Err(error) => {
                // The results wait for the next snapshot or the batch's end.
                self.policy.failed(attempt, Some(trigger), self.clock.now());
                Err(error)
            }
        }
    }
}

impl<E: Effects, C: Clock> ModelRuntime<E, C> {
    /// The lifecycle and, borrowed apart from it, what a hand-off takes.
    fn lifecycle_and_hand_off(&mut self) -> (&mut Lifecycle, HandOff<'_, E, C>) {
        (
            &mut self.lifecycle,
            HandOff {
                binding: &self.binding,
                key: &self.key,
                metrics: &self.metrics,
                policy: &mut self.policy,
                clock: &self.clock,
                results: &mut self.results,
                effects: &mut self.effects,
            },
        )
    }

    /// Seals the live model's state and hands it on; every other state has
    /// none to seal, and the error says why.
    pub(super) fn hand_off(&mut self, trigger: Trigger, last: bool) -> Result<(), String> {
        let (lifecycle, mut hand_off) = self.lifecycle_and_hand_off();
        let core = lifecycle.as_live().ok_or_else(|| not_live(lifecycle))?;
        hand_off.send(core, trigger, last)
    }

    /// Seals and hands on a snapshot; a failure is logged.
    pub(super) fn seal_now(&mut self, trigger: Trigger, last: bool) {
        if let Err(error) = self.hand_off(trigger, last) {
            tracing::error!(monitor_id = %self.id, %error, "Could not seal a snapshot.");
        }
    }

    pub(super) fn checkpoint_if_due(&mut self) {
        if self.lifecycle.as_live().is_none() {
            return;
        }
        if let Some(trigger) = self.policy.due(self.clock.now()) {
            self.seal_now(trigger, false);
        }
    }

    /// The results no snapshot took along, for a background evidence
    /// batch: one effect per batch of input, none when there are none.
    pub(super) fn send_results(&mut self) {
        if !self.results.is_empty() {
            let results = std::mem::take(&mut self.results);
            self.effect(Effect::Results(results));
        }
    }

    /// Records a silence change in the coverage history (a checkpoint trigger).
    pub(super) fn silence_changed(&mut self, change: Option<SilenceChange>) {
        if let Some(change) = change
            && self.lifecycle.record_silence(&change)
        {
            self.policy
                .request(Trigger::CoverageChange, self.clock.now());
        }
    }

    /// Metrics and observer notices for one step.
    pub(super) fn record(&mut self, step: &Step) {
        let m = &self.metrics;
        if let Some(frame) = &step.frame
            && let Some(saved_at) = self.gap_pending_since.take()
        {
            let gap = (frame.ts - saved_at).to_std().unwrap_or_default();
            m.emit(events::PossibleGapMeasured { gap });
        }
        if let Some(verdict) = &step.verdict {
            m.emit(events::FrameScored {
                score: verdict.score,
                flagged: verdict.flagged,
            });
            match verdict.alarm_event {
                Some(AlarmEvent::Opened { .. }) => m.emit(events::AlarmOpened),
                Some(AlarmEvent::Closed { .. }) => m.emit(events::AlarmClosed),
                None => {}
            }
        }
        if self.observed
            && let Some(scored) = &step.scored
        {
            notices(self.id, scored, &mut self.effects);
        }
        if let Some(phase) = step.phase_changed {
            m.emit(events::DetectorPhaseChanged {
                phase: DetectorPhase::from(phase),
            });
        }
    }

    /// Acts on one step's outcome; the input publishes the view.
    pub(super) fn after_step(&mut self, mut step: Step) {
        if let Some(diagnostics) = step.quarantined {
            // No checkpoint is due any more: the monitor records the failure.
            // The results before it reach the checkpoint side first, which
            // drops them unwritten once it records the failure.
            self.send_results();
            self.effect(Effect::Quarantined(diagnostics));
            return;
        }
        // Kept until a snapshot sealed in this batch takes them along, or
        // the batch ends (`send_results`).
        self.results.alarms.append(&mut step.results.alarms);
        self.results.evidence.append(&mut step.results.evidence);
        let now = self.clock.now();
        if step.frame.is_some() {
            self.policy.on_frames(1, now);
        }
        if step.coverage_changed {
            self.policy.request(Trigger::CoverageChange, now);
        }
        if step.phase_changed.is_some() {
            self.policy.request(Trigger::PhaseChange, now);
        }
        self.checkpoint_then_fit(&step);
        self.checkpoint_if_due();
    }

    /// The core's "checkpoint, then fit" step when `step` made the fit due:
    /// the snapshot before the fit keeps the training and calibration
    /// frames, so a fit cut short by a crash reruns from them. A snapshot
    /// that cannot be sealed is logged and the fit goes on, as a failed
    /// checkpoint never holds the model back by itself.
    fn checkpoint_then_fit(&mut self, step: &Step) {
        let id = self.id;
        let (lifecycle, mut hand_off) = self.lifecycle_and_hand_off();
        let Some(core) = lifecycle.live() else {
            return;
        };
        let mut fit_started = hand_off.clock.now();
        let fitted = core.fit_when_due(step, |core| {
            if let Err(error) = hand_off.send(core, Trigger::PhaseChange, false) {
                tracing::error!(monitor_id = %id, %error, "Could not seal a snapshot.");
            }
            fit_started = hand_off.clock.now();
            Ok::<_, CoreError>(())
        });
        let phase = match fitted {
            Ok(Some(_)) => core.phase(),
            Ok(None) => return,
            Err(error) => {
                tracing::error!(monitor_id = %id, %error, "The static fit failed.");
                return;
            }
        };
        self.metrics.emit(events::ModelOperationFinished {
            operation: ModelOperation::Fit,
            duration: self.clock.now().saturating_duration_since(fit_started),
        });
        self.metrics.emit(events::DetectorPhaseChanged {
            phase: DetectorPhase::from(phase),
        });
        tracing::info!(monitor_id = %id, "Fitted the detector; monitoring starts.");
        self.policy.request(Trigger::PhaseChange, self.clock.now());
    }
}

/// Why `lifecycle` seals nothing, as an error message.
pub(super) fn not_live(lifecycle: &Lifecycle) -> String {
    lifecycle
        .why_not_live()
        .unwrap_or("the monitor is live")
        .to_string()
}

/// An observer's notices for a flagged frame and an alarm event, in that
/// order.
fn notices(monitor_id: uuid::Uuid, scored: &Scored, effects: &mut impl Effects) {
    if let Some(evidence) = &scored.evidence {
        effects.effect(Effect::Notice(Notice::Flagged {
            monitor_id,
            ts: evidence.ts,
            contributions: evidence.contributions.clone(),
        }));
    }
    let notice = match scored.alarm_event {
        Some(AlarmEvent::Opened {
            seq,
            ts,
            peak_score,
        }) => Notice::AlarmOpened {
            monitor_id,
            seq,
            ts,
            peak_score,
        },
        Some(AlarmEvent::Closed {
            seq,
            ts,
            peak_score,
        }) => Notice::AlarmClosed {
            monitor_id,
            seq,
            ts,
            peak_score,
        },
        None => return,
    };
    effects.effect(Effect::Notice(notice));
}
