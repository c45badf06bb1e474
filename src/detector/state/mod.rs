//! The detector's phases and its whole serializable state.
//!
//! Training and calibration frames are kept verbatim until the fit has
//! replaced them with a model, so a snapshot taken in any phase restores a
//! detector that continues exactly as the original would have: the fit is a
//! pure function of those frames and the settings.
//!
//! The fit itself is in `fit.rs`; this file holds the detector's state, its
//! construction, and the processing and scoring of each frame.

mod fit;

use serde::{Deserialize, Serialize};

use super::{
    AlarmState, Calibration, ChangeChannels, DetectorSettings, Evidence, Features, HealthWindow,
    ModelHealth, Outcome, PcaModel, Rejection, Scored, StuckChannel,
    change::{contributions, pick_level},
    pca::Scratch,
};
use crate::{align::Frame, config::FieldErrors};

/// Where the detector is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    Training,
    Calibrating,
    /// All frames for the fit are in; the fit has not run yet.
    Fitting,
    Monitoring,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Training => "training",
            Phase::Calibrating => "calibrating",
            Phase::Fitting => "fitting",
            Phase::Monitoring => "monitoring",
        }
    }
}

/// Errors of the detector layer.
#[derive(Debug, thiserror::Error)]
pub enum DetectorError {
    #[error("invalid detector settings: {0}; fix the monitor file")]
    Settings(#[from] FieldErrors),
    #[error(
        "change reading {0:?} is not one of the detector's required readings; fix detector.change.readings"
    )]
    UnknownChangeReading(String),
    #[error("the fit cannot run in the {} phase; it runs once calibration frames are complete", .0.as_str())]
    NotReadyToFit(Phase),
}

/// A multivariate detector over aligned frames.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Detector {
    settings: DetectorSettings,
    width: usize,
    /// Frame positions scored by the change channels; the others are the
    /// level model's, in frame order.
    change_columns: Vec<usize>,
    phase: Phase,
    training: Vec<Vec<f64>>,
    calibration: Vec<Vec<f64>>,
    fitted: Option<Fitted>,
    alarm: AlarmState,
    health_window: HealthWindow,
    health: Option<ModelHealth>,
    monitored_frames: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Fitted {
    features: Features,
    model: PcaModel,
    calibration: Calibration,
    /// The moving average of scores, carried from calibration into monitoring.
    smoothed: Option<f64>,
    change: Option<ChangeChannels>,
    /// Left out of the encoding when absent, so snapshots of detectors
    /// without it are the bytes they were (the last encoded field, so a
    /// positional encoding stays one element shorter, not shifted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    stuck: Option<StuckChannel>,
    #[serde(skip)]
    scratch: Scratch,
}

impl Detector {
    /// A fresh detector for frames of `width` required readings.
    /// Change readings (`settings.change`) are named, so a detector with
    /// them is made by [`Detector::for_readings`].
    pub fn new(settings: DetectorSettings, width: usize) -> Result<Self, DetectorError> {
        if let Some(name) = settings.change.as_ref().and_then(|c| c.readings.first()) {
            return Err(DetectorError::UnknownChangeReading(name.clone()));
        }
        Self::with_change_columns(settings, width, Vec::new())
    }

    /// A fresh detector for frames of the named required readings, in frame
    /// order; `settings.change.readings` are looked up among them.
    pub fn for_readings(
        settings: DetectorSettings,
        names: &[String],
    ) -> Result<Self, DetectorError> {
        let mut columns = Vec::new();
        for name in settings.change.iter().flat_map(|c| &c.readings) {
            match names.iter().position(|n| n == name) {
                Some(c) if !columns.contains(&c) => columns.push(c),
                _ => return Err(DetectorError::UnknownChangeReading(name.clone())),
            }
        }
        columns.sort_unstable();
        Self::with_change_columns(settings, names.len(), columns)
    }

    fn with_change_columns(
        settings: DetectorSettings,
        width: usize,
        change_columns: Vec<usize>,
    ) -> Result<Self, DetectorError> {
        let mut errors = settings.validate("detector", width);
        if width == 0 {
            errors.push(crate::config::FieldError::new(
                "readings",
                "the detector needs at least one required reading",
            ));
        }
        if !errors.is_empty() {
            return Err(FieldErrors(errors).into());
        }
        Ok(Self {
            alarm: AlarmState::new(settings.alarm.clone()),
            health_window: HealthWindow::new(settings.health_window),
            // Grown as frames arrive, not reserved: a monitor that has seen
            // nothing (thousands of idle ones in a worker) keeps nothing.
            training: Vec::new(),
            calibration: Vec::new(),
            settings,
            width,
            change_columns,
            phase: Phase::Training,
            fitted: None,
            health: None,
            monitored_frames: 0,
        })
    }

    pub fn phase(&self) -> Phase {
        self.phase
    }

    pub fn settings(&self) -> &DetectorSettings {
        &self.settings
    }

    /// The calibrated threshold, once fitted.
    pub fn threshold(&self) -> Option<f64> {
        self.fitted.as_ref().map(|f| f.calibration.threshold)
    }

    /// The fitted model, once fitted.
    pub fn model(&self) -> Option<&PcaModel> {
        self.fitted.as_ref().map(|f| &f.model)
    }

    /// The last published model-health figures.
    pub fn health(&self) -> Option<&ModelHealth> {
        self.health.as_ref()
    }

    /// See [`AlarmState::continue_after`].
    pub fn continue_alarms_after(&mut self, seq: u64) {
        self.alarm.continue_after(seq);
    }

    pub fn alarm_open(&self) -> bool {
        self.alarm.is_open()
    }

    /// Frames still kept for the fit (training, calibration).
    pub fn buffered_frames(&self) -> (usize, usize) {
        (self.training.len(), self.calibration.len())
    }

    /// Offers one frame. In `Fitting` the fit runs first (a runtime that
    /// checkpoints between phases calls `fit` itself before this).
    pub fn process(&mut self, frame: &Frame) -> Outcome {
        if let Err(rejection) = self.check(frame) {
            return Outcome::Rejected(rejection);
        }
        match self.phase {
            Phase::Training => {
                self.training.push(frame.values.clone());
                let changed = self.training.len() >= self.settings.training_frames;
                if changed {
                    self.phase = Phase::Calibrating;
                }
                Outcome::Buffered {
                    phase: self.phase,
                    phase_changed: changed,
                }
            }
            Phase::Calibrating => {
                self.calibration.push(frame.values.clone());
                let changed = self.calibration.len() >= self.settings.calibration_frames;
                if changed {
                    self.phase = Phase::Fitting;
                }
                Outcome::Buffered {
                    phase: self.phase,
                    phase_changed: changed,
                }
            }
            Phase::Fitting => {
                self.run_fit();
                self.score(frame)
            }
            Phase::Monitoring => self.score(frame),
        }
    }

    /// Runs the static fit from the kept frames and starts monitoring. The
    /// result depends only on those frames and the settings, so a fit
    /// interrupted by a crash and rerun from a snapshot gives the same model.
    pub fn fit(&mut self) -> Result<(), DetectorError> {
        if self.phase != Phase::Fitting {
            return Err(DetectorError::NotReadyToFit(self.phase));
        }
        self.run_fit();
        Ok(())
    }

    /// Offline convenience: `process`, and run the fit as soon as it is due.
    pub fn process_and_fit(&mut self, frame: &Frame) -> Outcome {
        let outcome = self.process(frame);
        if outcome.fit_due() {
            self.run_fit();
        }
        outcome
    }

    fn check(&self, frame: &Frame) -> Result<(), Rejection> {
        if frame.values.len() != self.width {
            return Err(Rejection::WrongWidth {
                expected: self.width,
                got: frame.values.len(),
            });
        }
        match frame.values.iter().position(|v| !v.is_finite()) {
            Some(reading) => Err(Rejection::NonFinite { reading }),
            None => Ok(()),
        }
    }

    fn level_values(&self, row: &[f64]) -> Vec<f64> {
        let mut out = Vec::with_capacity(row.len());
        pick_level(row, &self.change_columns, &mut out);
        out
    }

    fn score(&mut self, frame: &Frame) -> Outcome {
        let Some(fitted) = self.fitted.as_mut() else {
            // Unreachable by construction: monitoring always has a fit.
            return Outcome::Buffered {
                phase: self.phase,
                phase_changed: false,
            };
        };
        // Decided on the alarm as it stood before this frame: the frame that
        // opens an alarm still moves the level, the one that closes it not.
        let hold = self.settings.hold_level_during_alarm && self.alarm.is_open();
        let (t2, spe) = fitted.level_statistics(&frame.values, &self.change_columns, hold);
        let change = fitted.change.as_mut().map(|change| {
            let score = change.observe(&frame.values);
            (
                change.calibration.flags(score),
                change.calibration.p_value(score),
                (score, change.calibration.threshold),
            )
        });
        let stuck = fitted.stuck.as_mut().map(|stuck| {
            let surprise = stuck.observe(&frame.values);
            (
                stuck.flags(surprise),
                stuck.p_value(surprise),
                (surprise, stuck.threshold),
            )
        });
        let raw_score = fitted.model.combine(t2, spe);
        let score = ewma(fitted.smoothed, raw_score, self.settings.score_smoothing);
        fitted.smoothed = Some(score);
        let threshold = fitted.calibration.threshold;
        // Placed among the calibration scores once, for the p-value and
        // for the health window's key.
        let below = fitted.calibration.rank(score);
        let level_p = fitted.calibration.p_value_of_rank(below);
        // The frame is flagged when any channel crosses its threshold;
        // the p-value is their Bonferroni combination.
        let (mut p_value, mut flagged, mut channels) =
            (level_p, fitted.calibration.flags(score), 1.0);
        for (channel_flagged, channel_p, _) in change.iter().chain(&stuck) {
            p_value = p_value.min(*channel_p);
            flagged |= *channel_flagged;
            channels += 1.0;
        }
        let p_value = (channels * p_value).min(1.0);
        let alarm_event = self.alarm.observe(frame.ts, flagged, score);
        self.monitored_frames += 1;
        self.health_window
            .push_placed(flagged, score, &fitted.calibration.scores, below);
        let health = if self
            .monitored_frames
            .is_multiple_of(self.settings.health_refresh_frames as u64)
        {
            let health = self.health_window.assess(
                &fitted.calibration.scores,
                self.settings.false_alarm_rate,
                self.monitored_frames,
            );
            self.health = Some(health.clone());
            Some(health)
        } else {
            None
        };
        let evidence = flagged.then(|| Evidence {
            ts: frame.ts,
            score,
            threshold,
            p_value,
            contributions: fitted.contributions(self.width),
            alarm_seq: self.alarm.open_seq(),
        });
        Outcome::Scored(Box::new(Scored {
            ts: frame.ts,
            score,
            raw_score,
            threshold,
            p_value,
            change: change.map(|(_, _, c)| c),
            stuck: stuck.map(|(_, _, s)| s),
            flagged,
            alarm_open: self.alarm.is_open(),
            evidence,
            alarm_event,
            health,
        }))
    }
}

impl Fitted {
    /// Each of the `width` readings' share of the frame just scored.
    fn contributions(&self, width: usize) -> Vec<f64> {
        contributions(
            self.model.contributions(&self.scratch),
            self.change.as_ref(),
            width,
        )
    }

    /// The level model's T-squared and SPE of one frame: its level readings
    /// through the feature state (held with `hold`) into the model.
    fn level_statistics(
        &mut self,
        values: &[f64],
        change_columns: &[usize],
        hold: bool,
    ) -> (f64, f64) {
        let mut features = std::mem::take(&mut self.scratch.features);
        if change_columns.is_empty() {
            self.features.next_into(values, hold, &mut features);
        } else {
            let mut level = std::mem::take(&mut self.scratch.level);
            pick_level(values, change_columns, &mut level);
            self.features.next_into(&level, hold, &mut features);
            self.scratch.level = level;
        }
        let statistics = self.model.statistics(&features, &mut self.scratch);
        self.scratch.features = features;
        statistics
    }
}

fn ewma(previous: Option<f64>, value: f64, weight: f64) -> f64 {
    match previous {
        Some(p) => weight * value + (1.0 - weight) * p,
        None => value,
    }
}
