//! Sealing the core's state and handing the snapshot to the checkpoint
//! actor, and the core's "checkpoint, then fit" step that uses it.
//!
//! What a hand-off takes is borrowed apart from the lifecycle
//! ([`HandOff`]), so that [`MonitorCore::fit_when_due`], the step that
//! `radar detect`, the demo and the benchmarks share, can seal the very
//! core it is about to fit.

use std::time::Instant;

use actix::Addr;
use chrono::Utc;
use radar::{
    runtime::{CheckpointPolicy, CoreError, Lifecycle, MonitorCore, Step, Trigger},
    snapshot::{CheckpointKey, SealedSnapshot, SnapshotBinding, seal},
    store::PendingResults,
    telemetry::{DetectorPhase, ModelOperation, MonitorTelemetry, events},
};

use super::ModelActor;
use crate::monitor::checkpoint::{CheckpointActor, SnapshotReady};

/// What sealing a snapshot and handing it off takes beside the core.
pub(super) struct HandOff<'a> {
    binding: &'a SnapshotBinding,
    key: &'a CheckpointKey,
    metrics: &'a MonitorTelemetry,
    policy: &'a mut CheckpointPolicy,
    checkpoint: &'a Addr<CheckpointActor>,
    /// The batch's results not yet sent: the snapshot takes them along.
    results: &'a mut PendingResults,
}

impl HandOff<'_> {
    /// Seals `core`'s state.
    fn seal(&self, core: &MonitorCore) -> Result<SealedSnapshot, String> {
        let started = Instant::now();
        let state = core.managed_state().map_err(|e| e.to_string())?;
        let sealed = seal(self.binding, &state, Utc::now(), self.key).map_err(|e| e.to_string());
        self.metrics.emit(events::ModelOperationFinished {
            operation: ModelOperation::EncodeSnapshot,
            duration: started.elapsed(),
        });
        sealed
    }

    /// Seals `core` and sends the snapshot to the checkpoint actor in one
    /// message with the results produced up to it, which commit in its
    /// transaction.
    fn send(&mut self, core: &MonitorCore, trigger: Trigger, last: bool) -> Result<(), String> {
        let (_, attempt) = self.policy.started(Instant::now());
        match self.seal(core) {
            Ok(sealed) => {
                self.checkpoint.do_send(SnapshotReady {
                    sealed,
                    results: std::mem::take(self.results),
                    trigger,
                    attempt,
                    last,
                });
                Ok(())
            }
            Err(error) => {
                // The results wait for the next snapshot or the batch's end.
                self.policy.failed(attempt, Some(trigger), Instant::now());
                Err(error)
            }
        }
    }
}

impl ModelActor {
    /// The lifecycle and, borrowed apart from it, what a hand-off takes.
    fn lifecycle_and_hand_off(&mut self) -> (&mut Lifecycle, HandOff<'_>) {
        (
            &mut self.lifecycle,
            HandOff {
                binding: &self.binding,
                key: &self.key,
                metrics: &self.metrics,
                policy: &mut self.policy,
                checkpoint: &self.checkpoint,
                results: &mut self.results,
            },
        )
    }

    /// Seals the live model's state and sends it to the checkpoint actor;
    /// every other state has none to seal, and the error says why.
    pub(super) fn hand_off(&mut self, trigger: Trigger, last: bool) -> Result<(), String> {
        let (lifecycle, mut hand_off) = self.lifecycle_and_hand_off();
        let core = lifecycle.as_live().ok_or_else(|| not_live(lifecycle))?;
        hand_off.send(core, trigger, last)
    }

    /// The core's "checkpoint, then fit" step when `step` made the fit due:
    /// the snapshot before the fit keeps the training and calibration
    /// frames, so a fit cut short by a crash reruns from them. A snapshot
    /// that cannot be sealed is logged and the fit goes on, as a failed
    /// checkpoint never holds the model back by itself.
    pub(super) fn checkpoint_then_fit(&mut self, step: &Step) {
        let id = self.id;
        let (lifecycle, mut hand_off) = self.lifecycle_and_hand_off();
        let Some(core) = lifecycle.live() else {
            return;
        };
        let mut fit_started = Instant::now();
        let fitted = core.fit_when_due(step, |core| {
            if let Err(error) = hand_off.send(core, Trigger::PhaseChange, false) {
                tracing::error!(monitor_id = %id, %error, "Could not seal a snapshot.");
            }
            fit_started = Instant::now();
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
            duration: fit_started.elapsed(),
        });
        self.metrics.emit(events::DetectorPhaseChanged {
            phase: DetectorPhase::from(phase),
        });
        tracing::info!(monitor_id = %id, "Fitted the detector; monitoring starts.");
        self.policy.request(Trigger::PhaseChange, Instant::now());
    }
}

/// Why `lifecycle` seals nothing, as an error message.
pub(super) fn not_live(lifecycle: &Lifecycle) -> String {
    lifecycle
        .why_not_live()
        .unwrap_or("the monitor is live")
        .to_string()
}
