//! The model side of one monitor, free of any actor framework: payload
//! parsing, alignment, the detector, coverage and the cumulative counters, in
//! the one order that both the worker and the offline replay use.
//!
//! Every method takes the clock as an argument and returns what changed, so
//! the runtime decides what to checkpoint or publish.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::graph_run::{GraphFrame, GraphRun};

mod graph;
#[cfg(test)]
mod tests;
use crate::{
    align::{
        Admission, AlignError, AlignRejection, Aligner, AlignmentCounters, Frame, Observation,
    },
    config::MonitorConfig,
    coverage::{CoverageHistory, GapCause},
    detector::{AlarmEvent, Detector, DetectorError, Outcome, Phase, Scored},
    graph::{FailureDiagnostics, FrameReport},
    mqtt::payload::PayloadRejection,
    snapshot::{ManagedState, ProcessingCounters, RecoveryMetadata},
    store::{AlarmRecord, EvidenceRecord, PendingResults},
    telemetry::RejectReason,
};

/// Why a monitor's model could not be built or restored.
#[derive(Debug, thiserror::Error)]
pub enum CoreError {
    #[error("monitor {service_id}: {source}")]
    Align {
        service_id: Uuid,
        #[source]
        source: AlignError,
    },
    #[error("monitor {service_id}: {source}")]
    Detector {
        service_id: Uuid,
        #[source]
        source: DetectorError,
    },
    #[error("monitor {service_id} cannot run its graph: {reason}")]
    Graph { service_id: Uuid, reason: String },
}

/// Why a monitor's state could not be exported into a snapshot.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("monitor {service_id}: encoding the snapshot failed: {source}")]
    Encode {
        service_id: Uuid,
        #[source]
        source: rmp_serde::encode::Error,
    },
    #[error(
        "monitor {service_id} is quarantined: its graph state may be damaged and is never exported"
    )]
    Quarantined { service_id: Uuid },
}

/// What scores the frames. One per monitor, moved only when the monitor is
/// built, so the size difference of the variants costs nothing.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
enum Engine {
    /// The built-in detector of a plain monitor.
    Detector(Detector),
    /// A graph run's executor (its own detector nodes included).
    Graph(GraphRun),
}

/// The verdict on one frame, whichever engine scored it.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub score: f64,
    pub flagged: bool,
    pub alarm_event: Option<AlarmEvent>,
}

/// What one step of the model changed.
#[derive(Debug, Default)]
pub struct Step {
    /// Why the observation was not used, if it was not.
    pub rejected: Option<RejectReason>,
    /// The frame offered to the detector, if one was complete.
    pub frame: Option<Frame>,
    /// The detector's verdict on that frame, once it is monitoring (plain
    /// monitors only).
    pub scored: Option<Scored>,
    /// The verdict of the detector or of a graph's alarm sink.
    pub verdict: Option<Verdict>,
    /// A graph node failed uncertainly on this frame: the monitor is
    /// quarantined from now on.
    pub quarantined: Option<FailureDiagnostics>,
    /// The detector is in a new phase after this step.
    pub phase_changed: Option<Phase>,
    /// The fit is due: checkpoint, then call [`MonitorCore::fit`].
    pub fit_due: bool,
    /// The coverage history changed: a checkpoint trigger.
    pub coverage_changed: bool,
    /// Alarms and evidence to commit.
    pub results: PendingResults,
}

/// One monitor's complete model-side state.
#[derive(Debug)]
pub struct MonitorCore {
    service_id: Uuid,
    config: MonitorConfig,
    readings: Vec<String>,
    aligner: Aligner,
    engine: Engine,
    coverage: CoverageHistory,
    counters: ProcessingCounters,
    recovery: RecoveryMetadata,
    /// When the open alarm opened, so its close can be written as a whole row.
    open_alarm: Option<(u64, DateTime<Utc>)>,
    /// Input is drained and counted without advancing the model, because
    /// checkpoints stopped committing.
    suspended: bool,
}

impl MonitorCore {
    /// A monitor with no snapshot: a new detector and a startup gap.
    pub fn fresh(
        service_id: Uuid,
        config: MonitorConfig,
        now: DateTime<Utc>,
    ) -> Result<Self, CoreError> {
        let detector = Detector::for_readings(config.detector.clone(), &required_names(&config))
            .map_err(|source| CoreError::Detector { service_id, source })?;
        Self::fresh_with(service_id, config, Engine::Detector(detector), now)
    }

    fn fresh_with(
        service_id: Uuid,
        config: MonitorConfig,
        engine: Engine,
        now: DateTime<Utc>,
    ) -> Result<Self, CoreError> {
        let aligner = Aligner::new(config.alignment.clone(), &config.readings)
            .map_err(|source| CoreError::Align { service_id, source })?;
        Ok(Self {
            service_id,
            readings: required_names(&config),
            config,
            aligner,
            engine,
            coverage: CoverageHistory::fresh(now),
            counters: ProcessingCounters::default(),
            recovery: RecoveryMetadata::default(),
            open_alarm: None,
            suspended: false,
        })
    }

    /// A monitor restored from its verified snapshot. Watermarks come back,
    /// partial frames do not (they were never saved), and the time since the
    /// snapshot was saved is recorded as a possible gap: the live stream is
    /// not replayed.
    pub fn restore(
        service_id: Uuid,
        config: MonitorConfig,
        state: ManagedState,
        detector: Option<Detector>,
        saved_at: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<Self, CoreError> {
        let detector = match detector {
            Some(detector) => detector,
            // An initial snapshot taken before the detector existed.
            None => Detector::for_readings(config.detector.clone(), &required_names(&config))
                .map_err(|source| CoreError::Detector { service_id, source })?,
        };
        Self::restore_with(
            service_id,
            config,
            Engine::Detector(detector),
            state,
            saved_at,
            now,
        )
    }

    fn restore_with(
        service_id: Uuid,
        config: MonitorConfig,
        engine: Engine,
        state: ManagedState,
        saved_at: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<Self, CoreError> {
        let aligner = Aligner::restore(
            config.alignment.clone(),
            &config.readings,
            state.watermarks,
            state.alignment,
        )
        .map_err(|source| CoreError::Align { service_id, source })?;
        let mut coverage = state.coverage;
        coverage.record_restore(saved_at, now);
        let mut counters = state.counters;
        if state.partial_observations > 0 {
            // Held at save time, received then: their fate is this restore.
            let cleared = counters
                .observations_rejected
                .entry(RejectReason::PartialCleared.as_str().to_string())
                .or_default();
            *cleared = cleared.saturating_add(state.partial_observations);
        }
        let recovery = RecoveryMetadata {
            restored_processed_count: Some(counters.frames),
            // Partial frames are never saved: what was held is dropped.
            cleared_partial_observations: state.partial_observations,
        };
        Ok(Self {
            service_id,
            readings: required_names(&config),
            config,
            aligner,
            open_alarm: state.open_alarm,
            engine,
            coverage,
            counters,
            recovery,
            suspended: false,
        })
    }

    pub fn service_id(&self) -> Uuid {
        self.service_id
    }

    /// The open alarm the detector knows (restored from the snapshot).
    pub fn open_alarm_opened_at(&self) -> Option<DateTime<Utc>> {
        self.open_alarm.map(|(_, at)| at)
    }

    /// After a restore: the alarm table already holds alarms up to `seq`
    /// (some committed after the snapshot), so new ones are numbered after it.
    pub fn continue_alarms_after(&mut self, seq: u64) {
        match &mut self.engine {
            Engine::Detector(detector) => detector.continue_alarms_after(seq),
            Engine::Graph(run) => run.continue_alarms_after(seq),
        }
    }

    pub fn config(&self) -> &MonitorConfig {
        &self.config
    }

    /// The detector's phase; for a graph run, its least advanced detector node's.
    pub fn phase(&self) -> Phase {
        match &self.engine {
            Engine::Detector(detector) => detector.phase(),
            Engine::Graph(run) => run.phase(),
        }
    }

    /// The built-in detector; `None` for a graph run.
    pub fn detector(&self) -> Option<&Detector> {
        match &self.engine {
            Engine::Detector(detector) => Some(detector),
            Engine::Graph(_) => None,
        }
    }

    pub fn is_graph(&self) -> bool {
        matches!(self.engine, Engine::Graph(_))
    }

    /// Why the graph run is quarantined; `None` while it is not.
    pub fn quarantine(&self) -> Option<&FailureDiagnostics> {
        match &self.engine {
            Engine::Graph(run) => run.failure(),
            Engine::Detector(_) => None,
        }
    }

    /// Frames the graph's executor applied; `None` for plain monitors and
    /// once quarantined.
    pub fn graph_frames_applied(&self) -> Option<u64> {
        match &self.engine {
            Engine::Graph(run) => run.frames_applied(),
            Engine::Detector(_) => None,
        }
    }

    pub fn coverage(&self) -> &CoverageHistory {
        &self.coverage
    }

    pub fn counters(&self) -> &ProcessingCounters {
        &self.counters
    }

    pub fn recovery(&self) -> &RecoveryMetadata {
        &self.recovery
    }

    pub fn aligner(&self) -> &Aligner {
        &self.aligner
    }

    /// Frames the detector processed: the snapshot's processed count.
    pub fn processed(&self) -> u64 {
        self.counters.frames
    }

    pub fn is_suspended(&self) -> bool {
        self.suspended
    }

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
    pub fn record_silence(&mut self, change: &super::SilenceChange) -> bool {
        match change {
            super::SilenceChange::Started { from } => {
                self.coverage.open_gap(GapCause::NoData, *from)
            }
            super::SilenceChange::Ended { at } => self.coverage.close_gap(GapCause::NoData, *at),
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

    fn offer(&mut self, frame: Frame, step: &mut Step) {
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
                    self.record_scored(*scored, step);
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

    fn record_scored(&mut self, scored: Scored, step: &mut Step) {
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
        step.scored = Some(scored);
    }

    /// An alarm opening or closing, as a whole alarm row.
    fn record_alarm_event(&mut self, event: Option<&AlarmEvent>, step: &mut Step) {
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

fn required_names(config: &MonitorConfig) -> Vec<String> {
    config.required_readings().map(|r| r.name.clone()).collect()
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
