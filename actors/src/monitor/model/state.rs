//! The model's own steps: recording a step's outcome, checkpointing when
//! due, publishing the view (sealing and the fit are in `seal`).

use std::{sync::Arc, time::Instant};

use chrono::Utc;
use radar::{
    detector::AlarmEvent,
    runtime::{SilenceChange, Step, Trigger},
    telemetry::{DetectorPhase, events},
};

use super::{ModelActor, UNIT_WARNING_EVERY, UnitMismatches, seal::not_live, view_of};
use crate::{
    monitor::{checkpoint::NewResults, handlers::Quarantined},
    worker::{Notice, Observer},
};

impl ModelActor {
    /// Records a silence change in the coverage history (a checkpoint trigger).
    pub(super) fn silence_changed(&mut self, change: Option<SilenceChange>) {
        if let Some(change) = change
            && self.lifecycle.record_silence(&change)
        {
            self.policy.request(Trigger::CoverageChange, Instant::now());
        }
    }

    /// The `no_data` detail: which required readings are silent, how long.
    fn no_data(&self) -> Option<String> {
        if !self.silence.is_silent() {
            return None;
        }
        let config = self.lifecycle.facts()?.config();
        let now = Utc::now();
        // The time each went quiet, not a duration: the view is published
        // on events only once the monitor is idle, so a duration would go
        // stale.
        let silent: Vec<String> = self
            .silence
            .silent_readings(now)
            .iter()
            .map(|(name, quiet)| {
                let since = (now - *quiet).to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
                format!("{name} (nothing since {since})")
            })
            .collect();
        Some(format!(
            "no data from required readings: {}; longer than alignment.silence_ms {} ms",
            silent.join(", "),
            config.alignment.silence().num_milliseconds()
        ))
    }

    /// Publishes the model's view; a halted model has nothing to show.
    pub(super) fn publish(&mut self) {
        let Some(facts) = self.lifecycle.facts() else {
            return;
        };
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
        self.view.send_replace(view);
    }

    /// Seals and hands a snapshot to the checkpoint actor.
    pub(super) fn checkpoint_now(&mut self, trigger: Trigger, last: bool) {
        if let Err(error) = self.hand_off(trigger, last) {
            tracing::error!(monitor_id = %self.id, %error, "Could not seal a snapshot.");
        }
    }

    /// Sends the results no snapshot took along, for a background evidence
    /// batch: one message per batch of input, none when there are none.
    pub(super) fn send_results(&mut self) {
        if !self.results.is_empty() {
            self.checkpoint.do_send(NewResults {
                results: std::mem::take(&mut self.results),
            });
        }
    }

    /// One line for the `timestamp_unit` rejections since the last one, at
    /// most every [`UNIT_WARNING_EVERY`].
    pub(super) fn log_unit_mismatches(&mut self) {
        let m = &mut self.unit_mismatches;
        let Some((reading, looks_like)) = m.first else {
            return;
        };
        if m.logged_at
            .is_some_and(|at| at.elapsed() < UNIT_WARNING_EVERY)
        {
            return;
        }
        let Some(facts) = self.lifecycle.facts() else {
            return;
        };
        let name = facts
            .config()
            .readings
            .get(reading)
            .map_or("?", |r| r.name.as_str());
        self.metrics.emit(events::TimestampUnitMismatch {
            reading: name,
            configured: self.format.unit().as_str(),
            looks_like,
            count: m.count,
        });
        *m = UnitMismatches {
            logged_at: Some(Instant::now()),
            ..UnitMismatches::default()
        };
    }

    /// Why this state seals nothing, as an error message.
    pub(super) fn not_live(&self) -> String {
        not_live(&self.lifecycle)
    }

    pub(super) fn checkpoint_if_due(&mut self) {
        if self.lifecycle.as_live().is_none() {
            return;
        }
        if let Some(trigger) = self.policy.due(Instant::now()) {
            self.checkpoint_now(trigger, false);
        }
    }

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
        if let (Some(observer), Some(scored)) = (&self.observer, &step.scored) {
            notify(observer, self.id, scored);
        }
        if let Some(phase) = step.phase_changed {
            m.emit(events::DetectorPhaseChanged {
                phase: DetectorPhase::from(phase),
            });
        }
    }

    /// Acts on one step's outcome; the caller publishes the view.
    pub(super) fn after_step(&mut self, mut step: Step) {
        if let Some(diagnostics) = step.quarantined {
            // No checkpoint is due any more: the monitor records the failure.
            // The results before it reach the checkpoint actor first, which
            // drops them unwritten once it records the failure.
            self.send_results();
            self.monitor.do_send(Quarantined { diagnostics });
            return;
        }
        // Kept until a snapshot sealed in this batch takes them along, or
        // the batch ends (`send_results`).
        self.results.alarms.append(&mut step.results.alarms);
        self.results.evidence.append(&mut step.results.evidence);
        if step.frame.is_some() {
            self.policy.on_frames(1, Instant::now());
        }
        if step.coverage_changed {
            self.policy.request(Trigger::CoverageChange, Instant::now());
        }
        if step.phase_changed.is_some() {
            self.policy.request(Trigger::PhaseChange, Instant::now());
        }
        self.checkpoint_then_fit(&step);
        self.checkpoint_if_due();
    }
}

/// Tells an observer about a flagged frame and an alarm event, in that order.
fn notify(observer: &Observer, monitor_id: uuid::Uuid, scored: &radar::detector::Scored) {
    if let Some(evidence) = &scored.evidence {
        observer.notify(Notice::Flagged {
            monitor_id,
            ts: evidence.ts,
            contributions: evidence.contributions.clone(),
        });
    }
    match scored.alarm_event {
        Some(AlarmEvent::Opened {
            seq,
            ts,
            peak_score,
        }) => observer.notify(Notice::AlarmOpened {
            monitor_id,
            seq,
            ts,
            peak_score,
        }),
        Some(AlarmEvent::Closed {
            seq,
            ts,
            peak_score,
        }) => observer.notify(Notice::AlarmClosed {
            monitor_id,
            seq,
            ts,
            peak_score,
        }),
        None => {}
    }
}
