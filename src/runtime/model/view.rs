//! The view the model publishes for readers that must never wait: the
//! health actor, readiness and metrics. Cheap to clone; replaced whole.

use std::sync::Arc;

use chrono::{DateTime, SecondsFormat, Utc};

use super::{Clock, Effect, Effects, ModelRuntime};
use crate::{
    coverage::CoverageHistory,
    detector::Phase,
    graph::FailureDiagnostics,
    runtime::{Facts, MonitorCore},
    snapshot::RecoveryMetadata,
    telemetry::events,
};

/// The model's last published state.
#[derive(Debug, Clone)]
pub struct ModelView {
    pub phase: Phase,
    /// Frames processed by the detector (the snapshot's processed count).
    pub processed: u64,
    /// Frames kept for the fit so far: (training, calibration).
    pub buffered: (usize, usize),
    /// Messages taken from the ingress queue, whatever became of them.
    pub consumed: u64,
    /// Checkpoints stopped committing: input is drained without advancing.
    pub suspended: bool,
    /// A graph node failed uncertainly: what failed. Terminal.
    pub quarantine: Option<String>,
    /// Connected, but required readings are silent: which, for how long.
    pub no_data: Option<String>,
    pub coverage: Arc<CoverageHistory>,
    pub recovery: Arc<RecoveryMetadata>,
    /// Per required reading, when its newest accepted observation was
    /// received (`None` before the first), for the status row.
    pub readings_seen: Vec<(String, Option<DateTime<Utc>>)>,
}

impl ModelView {
    /// The first view of `core`, before its runtime exists.
    pub fn initial(core: &MonitorCore) -> Self {
        view_of(
            Facts::from(core),
            core.quarantine(),
            0,
            Arc::new(core.coverage().clone()),
            Arc::new(core.recovery().clone()),
            None,
        )
    }
}

fn view_of(
    core: Facts<'_>,
    quarantine: Option<&FailureDiagnostics>,
    consumed: u64,
    coverage: Arc<CoverageHistory>,
    recovery: Arc<RecoveryMetadata>,
    no_data: Option<String>,
) -> ModelView {
    ModelView {
        no_data,
        phase: core.phase(),
        processed: core.processed(),
        buffered: core.buffered_frames(),
        consumed,
        suspended: core.is_suspended(),
        quarantine: quarantine.map(|d| {
            format!(
                "node {:?} ({}) failed uncertainly: {}",
                d.failed_node, d.node_type, d.reason
            )
        }),
        coverage,
        recovery,
        readings_seen: Vec::new(),
    }
}

impl<E: Effects, C: Clock> ModelRuntime<E, C> {
    /// The model's view as it is now, for the first publication; an ended
    /// model has none.
    pub fn view(&mut self) -> Option<ModelView> {
        let facts = self.lifecycle.facts()?;
        if self.coverage.version != facts.coverage().version {
            let now = Arc::new(facts.coverage().clone());
            for gap in now.closed_since(&self.coverage) {
                if let Some(to) = gap.to {
                    self.metrics.emit(events::CoverageGapClosed {
                        cause: gap.cause,
                        duration: (to - gap.from).to_std().unwrap_or_default(),
                    });
                }
            }
            self.coverage = now;
        }
        let mut view = view_of(
            facts,
            self.lifecycle.quarantine(),
            self.consumed,
            self.coverage.clone(),
            self.recovery.clone(),
            self.no_data(),
        );
        view.readings_seen = self.silence.last_accepted();
        self.metrics.set_last_accepted(view.readings_seen.clone());
        self.metrics.set_held_values(facts.held_values());
        Some(view)
    }

    /// Publishes the view (an effect); an ended model has nothing to show.
    /// Every input that changes what the view shows publishes it; the
    /// interpreter calls this once more for the first publication.
    pub fn publish(&mut self) {
        if let Some(view) = self.view() {
            self.effect(Effect::Publish(view));
        }
    }

    /// The `no_data` detail: which required readings are silent, how long.
    fn no_data(&self) -> Option<String> {
        if !self.silence.is_silent() {
            return None;
        }
        let config = self.lifecycle.facts()?.config();
        let now = self.clock.wall();
        // The time each went quiet, not a duration: the view is published
        // on events only once the monitor is idle, so a duration would go
        // stale.
        let silent: Vec<String> = self
            .silence
            .silent_readings(now)
            .iter()
            .map(|(name, quiet)| {
                let since = (now - *quiet).to_rfc3339_opts(SecondsFormat::Secs, true);
                format!("{name} (nothing since {since})")
            })
            .collect();
        Some(format!(
            "no data from required readings: {}; longer than alignment.silence_ms {} ms",
            silent.join(", "),
            config.alignment.silence().num_milliseconds()
        ))
    }
}
