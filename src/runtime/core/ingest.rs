//! Advancing the model: ingesting, expiring, fitting, suspending, and the
//! bookkeeping of each frame's fate.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::{
    align::{Admission, AlignRejection, AlignmentCounters, Frame, Observation},
    coverage::GapCause,
    detector::{AlarmEvent, Outcome, Phase, Scored},
    graph::FrameReport,
    mqtt::payload::PayloadRejection,
    runtime::graph_run::GraphFrame,
    snapshot::ManagedState,
    store::{AlarmRecord, EvidenceRecord},
    telemetry::RejectReason,
};

use super::{CoreError, Engine, ExportError, MonitorCore, Step, Verdict};

impl MonitorCore {
    /// Offers one parsed-or-not observation. `payload` is the raw body;
    /// `now` is this worker's processing time (receipt plus time queued).
    pub fn ingest(
        &mut self,
        parsed: Result<Observation, PayloadRejection>,
        now: DateTime<Utc>,
    ) -> Step {
        self.counters.observations_received += 1;
        let mut step = Step::default();
        let observation = match parsed {
            Ok(observation) => observation,
            Err(reason) => {
                step.rejected = Some(self.reject(reason.into()));
                return step;
            }
        };
        if self.suspended || self.quarantine().is_some() {
            step.rejected = Some(self.reject(RejectReason::ModelStopped));
            return step;
        }
        let before = self.aligner.counters().clone();
        let admission = self.aligner.admit(observation, now);
        // Every value the aligner discarded in this step (the observation
        // itself, or held values it pushed out) gets its fate counted once.
        self.count_alignment_fates(&before);
        match admission {
            Admission::Rejected(reason) => step.rejected = Some(reason.into()),
            // Waiting for the rest of its frame: neither accepted nor
            // rejected yet (the snapshot counts it as held).
            Admission::Held => {}
            Admission::Recorded => self.counters.observations_accepted += 1,
            Admission::FrameReady(frame) => self.offer(frame, &mut step),
        }
        step
    }

    /// Adds what alignment discarded since `before` to the rejections by
    /// reason: rejected observations, held values expired, pushed out for
    /// skew or superseded by a newer value of their reading.
    fn count_alignment_fates(&mut self, before: &AlignmentCounters) {
        let after = self.aligner.counters();
        let superseded = after.superseded.saturating_sub(before.superseded);
        let mut changes = [(RejectReason::Superseded, superseded); AlignRejection::ALL.len() + 1];
        for (slot, reason) in changes.iter_mut().skip(1).zip(AlignRejection::ALL) {
            *slot = (
                reason.into(),
                after
                    .rejected(reason)
                    .saturating_sub(before.rejected(reason)),
            );
        }
        for (reason, count) in changes {
            if count > 0 {
                self.reject_many(reason, count);
            }
        }
    }

    /// Drops values that waited in a partial frame longer than the
    /// freshness allows; call it periodically.
    pub fn expire(&mut self, now: DateTime<Utc>) -> usize {
        let expired = self.aligner.expire(now);
        if expired > 0 {
            self.reject_many(RejectReason::Expired, expired as u64);
        }
        expired
    }

    /// Runs the static fit once it is due. A graph's detector nodes fit
    /// within their frame, so a graph run never has a fit due.
    pub fn fit(&mut self) -> Result<Step, CoreError> {
        let service_id = self.service_id;
        let Engine::Detector(detector) = &mut self.engine else {
            return Ok(Step::default());
        };
        slow_fit_for_tests(service_id);
        detector
            .fit()
            .map_err(|source| CoreError::Detector { service_id, source })?;
        Ok(Step {
            phase_changed: Some(detector.phase()),
            ..Step::default()
        })
    }

    /// Records an MQTT connection change in the coverage history.
    pub fn record_connection(&mut self, event: &crate::mqtt::ConnectionEvent) -> bool {
        event.record_in(&mut self.coverage)
    }

    /// Opens or closes the `no_data` gap; returns whether the history changed.
    pub fn record_silence(&mut self, change: &crate::runtime::SilenceChange) -> bool {
        match change {
            crate::runtime::SilenceChange::Started { from } => {
                self.coverage.open_gap(GapCause::NoData, *from)
            }
            crate::runtime::SilenceChange::Ended { at } => {
                self.coverage.close_gap(GapCause::NoData, *at)
            }
        }
    }

    /// Stops advancing the model: checkpoints have not committed in time.
    pub fn suspend(&mut self, now: DateTime<Utc>) -> bool {
        if self.suspended {
            return false;
        }
        self.suspended = true;
        self.coverage.open_gap(GapCause::CheckpointStall, now)
    }

    /// Resumes after a checkpoint committed again.
    pub fn resume(&mut self, now: DateTime<Utc>) -> bool {
        if !self.suspended {
            return false;
        }
        self.suspended = false;
        let cleared = self.aligner.reset_partial();
        if cleared > 0 {
            self.reject_many(RejectReason::PartialCleared, cleared as u64);
        }
        self.coverage.close_gap(GapCause::CheckpointStall, now)
    }

    /// The state a snapshot carries, encoded on the model side. A
    /// quarantined graph run has no state to export.
    pub fn managed_state(&self) -> Result<ManagedState, ExportError> {
        let service_id = self.service_id;
        let mut state = ManagedState {
            detector: Vec::new(),
            counters: self.counters.clone(),
            alignment: self.aligner.counters().clone(),
            coverage: self.coverage.clone(),
            watermarks: self.aligner.watermarks().clone(),
            recovery: self.recovery.clone(),
            open_alarm: self.open_alarm,
            graph: None,
            partial_observations: self.aligner.held_values() as u64,
        };
        match &self.engine {
            Engine::Detector(detector) => state
                .set_detector(detector)
                .map_err(|source| ExportError::Encode { service_id, source })?,
            Engine::Graph(run) => {
                state.graph = Some(
                    run.checkpoint()
                        .ok_or(ExportError::Quarantined { service_id })?,
                );
            }
        }
        Ok(state)
    }

    fn reject(&mut self, reason: RejectReason) -> RejectReason {
        self.reject_many(reason, 1);
        reason
    }

    fn reject_many(&mut self, reason: RejectReason, count: u64) {
        let rejected = &mut self.counters.observations_rejected;
        match rejected.get_mut(reason.as_str()) {
            Some(n) => *n = n.saturating_add(count),
            None => {
                rejected.insert(reason.as_str().to_string(), count);
            }
        }
    }

    /// Values of a complete frame the engine did not take: each counts.
    fn refuse_frame(&mut self, reason: RejectReason, frame: &Frame) -> RejectReason {
        self.reject_many(reason, frame.values.len() as u64);
        reason
    }

    pub(super) fn offer(&mut self, frame: Frame, step: &mut Step) {
        let before = self.phase();
        let report = match &mut self.engine {
            Engine::Detector(detector) => match detector.process(&frame) {
                Outcome::Rejected(rejection) => {
                    step.rejected = Some(self.refuse_frame(RejectReason::FrameRejected, &frame));
                    tracing::warn!(
                        monitor_id = %self.service_id,
                        error = %rejection,
                        "Detector rejected a frame."
                    );
                    return;
                }
                Outcome::Buffered { .. } => None,
                Outcome::Scored(scored) => {
                    self.record_scored(scored, step);
                    None
                }
            },
            Engine::Graph(run) => match run.offer(&frame) {
                GraphFrame::Advanced(report) => Some(report),
                GraphFrame::Quarantined(diagnostics) => {
                    // The runtime reports it (GraphQuarantined) and records it.
                    step.quarantined = Some(diagnostics);
                    return;
                }
                GraphFrame::Refused => {
                    step.rejected = Some(self.refuse_frame(RejectReason::ModelStopped, &frame));
                    return;
                }
            },
        };
        let graph_phase_changed = report.as_ref().is_some_and(FrameReport::phase_changed);
        if let Some(report) = report {
            self.record_graph(report, step);
        }
        self.counters.frames += 1;
        self.counters.observations_accepted += frame.values.len() as u64;
        step.coverage_changed |= self.coverage.record_frame(frame.ts);
        let after = self.phase();
        if after != before || graph_phase_changed {
            step.phase_changed = Some(after);
        }
        step.fit_due = after == Phase::Fitting && !self.is_graph();
        step.frame = Some(frame);
    }

    /// Boxed until it lands in `step`: moved out of its box once, not
    /// through a copy on the stack first (a replay does this every row).
    fn record_scored(&mut self, scored: Box<Scored>, step: &mut Step) {
        let frame_seq = self.counters.frames + 1;
        if scored.flagged {
            self.counters.frames_flagged += 1;
        }
        if let Some(evidence) = &scored.evidence {
            step.results.evidence.push(EvidenceRecord {
                frame_ts: evidence.ts,
                frame_seq,
                alarm_seq: evidence.alarm_seq,
                score: evidence.score,
                threshold: evidence.threshold,
                p_value: evidence.p_value,
                contributions: self
                    .readings
                    .iter()
                    .cloned()
                    .zip(evidence.contributions.iter().copied())
                    .collect(),
            });
        }
        self.record_alarm_event(scored.alarm_event.as_ref(), step);
        step.verdict = Some(Verdict {
            score: scored.score,
            flagged: scored.flagged,
            alarm_event: scored.alarm_event.clone(),
        });
        step.scored = Some(*scored);
    }

    /// An alarm opening or closing, as a whole alarm row.
    pub(super) fn record_alarm_event(&mut self, event: Option<&AlarmEvent>, step: &mut Step) {
        match event {
            Some(AlarmEvent::Opened {
                seq,
                ts,
                peak_score,
            }) => {
                self.counters.alarms_opened += 1;
                self.open_alarm = Some((*seq, *ts));
                step.results.alarms.push(AlarmRecord {
                    alarm_seq: *seq,
                    opened_at: *ts,
                    closed_at: None,
                    peak_score: *peak_score,
                });
            }
            Some(AlarmEvent::Closed {
                seq,
                ts,
                peak_score,
            }) => {
                let opened_at = match self.open_alarm.take() {
                    Some((open_seq, at)) if open_seq == *seq => at,
                    _ => *ts,
                };
                step.results.alarms.push(AlarmRecord {
                    alarm_seq: *seq,
                    opened_at,
                    closed_at: Some(*ts),
                    peak_score: *peak_score,
                });
            }
            None => {}
        }
    }
}

/// Tests only (the `fault-injection` feature, refused in release builds):
/// `RADAR_TEST_FIT_DELAY_MS` makes the static fit take that long, so that a
/// test can kill a worker while it fits. The fit itself takes milliseconds.
#[cfg(feature = "fault-injection")]
fn slow_fit_for_tests(service_id: Uuid) {
    if let Some(ms) = std::env::var("RADAR_TEST_FIT_DELAY_MS")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
    {
        tracing::warn!(monitor_id = %service_id, delay_ms = ms, "Test hook: the static fit is held up.");
        std::thread::sleep(std::time::Duration::from_millis(ms));
    }
}

#[cfg(not(feature = "fault-injection"))]
fn slow_fit_for_tests(_: Uuid) {}
