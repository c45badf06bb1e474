//! Change channels: readings scored on how they change, not on their level.
//!
//! Some plant signals (vibration RMS, water temperature, a thermocouple)
//! wander with the rig's heat balance over hours: their level after an hour
//! is far outside anything a few minutes of training saw, with no fault at
//! all. A level model flags that wander; ignoring the readings misses every
//! fault that shows first in them. A change channel watches what stays
//! stationary while the level drifts:
//!
//! - **Innovations of a predictor.** Each reading is predicted by an
//!   exponentially weighted moving average of its past values (weight
//!   `predictor_weight`); the innovation `x - prediction` is the reading's
//!   news. With weight 1 (the default) the prediction is the previous value
//!   and the innovations are first differences: a drifting level that
//!   behaves like a random walk with trend (an integrated process) has
//!   stationary differences, so their law does not move with the level. A
//!   slower predictor lets a changing trend through (`s (1 - w) / w` for a
//!   slope `s`): on the SKAB thermocouple, weight 0.2 flagged a quarter of
//!   the fault-free run. The innovations are standardized by their robust
//!   scale over the training frames (`RobustScaler`: median/MAD with the
//!   trimmed-mean fallback for quantized sensors).
//! - **Two short-window statistics of the standardized innovations `u`**,
//!   each an exponentially weighted average with weight `window_weight`: the
//!   mean of `u` (a fast excursion of the level against its recent values:
//!   the EWMA of differences is the contrast between the value and a short
//!   moving average of the values before it) and the mean of `u^2` (added
//!   noise, impulses: a variance chart). A short window keeps the
//!   statistics' memory short, so the calibration values are many and
//!   nearly independent; an accumulating statistic (CUSUM) has excursions
//!   far longer than any calibration window (README: the CUSUM attempts).
//! - **One max-type combination, calibrated conformally.** Each statistic is
//!   robustly standardized against its own training values (centre and
//!   scale), the mean two-sided and the energy one-sided (a rise); the
//!   frame's change score is the largest of them over all change readings
//!   (Tippett's combination; valid under any dependence between the
//!   readings because the threshold is calibrated on the maximum itself).
//!   The threshold is the split-conformal order statistic (`Calibration`)
//!   of the change scores of the training frames after a burn-in and of the
//!   calibration frames, recomputed from the first frame with the fitted
//!   standardization: a normal frame exchangeable with them exceeds it with
//!   probability at most `false_alarm_rate`, whatever the noise law. Two
//!   approximations, stated: the training frames also fixed the
//!   standardization (four location and scale numbers per reading, robust,
//!   from about 285 values), and neighbouring window values are dependent.
//!   The unit tests measure the rate under drift on Gaussian and Student t3
//!   noise. The detector flags a frame when either this channel or the
//!   level model crosses its threshold, so by the union bound a normal frame
//!   is flagged with probability at most the sum of the two rates.
//!
//! - **Held shifts (optional, `hold_shifts`).** The statistics above see a
//!   step only while it is fresh; a held shift keeps a reading whose change
//!   crossed the threshold flagged while its level stays away from where
//!   it was (`shift.rs`).
//!
//! The predictors are never held while an alarm is open (unlike the level
//! model's tracked levels): a held previous value turns every later
//! difference into the accumulated drift since the alarm opened, and the
//! alarm would never close (on SKAB, 77% false alarms).

use serde::{Deserialize, Serialize};

use super::conformal::Calibration;
use super::robust::{RobustScaler, Z_LIMIT};
use super::settings::probability_error;
use super::shift::ShiftHold;
use crate::config::FieldError;

/// Which readings are scored on their changes, and how.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChangeSettings {
    /// Required readings scored by their changes instead of the level model.
    pub readings: Vec<String>,
    /// Weight of the newest value in each reading's predictor, in (0, 1];
    /// 1 (the default) predicts each value by the one before it, so the
    /// innovations are first differences.
    #[serde(default = "default_predictor_weight")]
    pub predictor_weight: f64,
    /// Weight of the newest innovation in the window statistics, in (0, 1].
    #[serde(default = "default_window_weight")]
    pub window_weight: f64,
    /// Target probability that a normal frame crosses the change threshold.
    pub false_alarm_rate: f64,
    /// Hold a sudden shift: once a reading's change crosses the threshold,
    /// its frames stay flagged while the reading stays beyond where it was
    /// before the change (see [`ShiftHold`]). Absent from the encoding when
    /// off, so monitors without it keep their fingerprints.
    #[serde(default, skip_serializing_if = "is_false")]
    pub hold_shifts: bool,
}

fn is_false(value: &bool) -> bool {
    !value
}

fn default_predictor_weight() -> f64 {
    1.0
}

fn default_window_weight() -> f64 {
    0.35
}

impl ChangeSettings {
    /// Frames whose change scores calibrate the threshold: the training
    /// frames after the burn-in, then the calibration frames.
    pub fn calibration_frames(&self, training: usize, calibration: usize) -> usize {
        training - burn_in(self.window_weight, training) + calibration
    }

    pub fn validate(
        &self,
        field: &dyn Fn(&str) -> String,
        training: usize,
        calibration: usize,
    ) -> Vec<FieldError> {
        let mut errors = Vec::new();
        let weights = [
            ("change.predictor_weight", self.predictor_weight),
            ("change.window_weight", self.window_weight),
        ];
        for (name, w) in weights {
            if !(w.is_finite() && w > 0.0 && w <= 1.0) {
                errors.push(FieldError::new(
                    field(name),
                    format!("{w} is not a weight in (0, 1]"),
                ));
            }
        }
        let rate = self.false_alarm_rate;
        if let Some(error) = probability_error(field("change.false_alarm_rate"), rate) {
            errors.push(error);
        } else if self.window_weight > 0.0
            && self.calibration_frames(training, calibration)
                < ((1.0 - rate) / rate).ceil() as usize
        {
            let calibration = self.calibration_frames(training, calibration);
            errors.push(FieldError::new(
                field("change.false_alarm_rate"),
                format!("{calibration} calibration frames cannot calibrate a rate of {rate}"),
            ));
        }
        errors
    }
}

/// Training frames whose statistics are not used: about three window
/// lengths, so the statistics have forgotten their starting values; at most
/// half the training frames.
fn burn_in(window_weight: f64, training: usize) -> usize {
    ((3.0 / window_weight).ceil() as usize).min(training / 2)
}

/// Robust scale of the one-step innovations of `series` under an
/// exponentially weighted predictor of weight `w`.
fn innovation_scale(series: &[f64], w: f64) -> f64 {
    let mut innovations = Vec::with_capacity(series.len());
    let mut predicted = series.first().copied().unwrap_or(0.0);
    for &x in series.iter().skip(1) {
        innovations.push(vec![x - predicted]);
        predicted += w * (x - predicted);
    }
    RobustScaler::fit(&innovations, 1).scale[0]
}

/// The fitted change channels and their running state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChangeChannels {
    /// Frame positions of the change readings.
    columns: Vec<usize>,
    predictor_weight: f64,
    window_weight: f64,
    /// One over the robust scale of each reading's innovations over the
    /// training frames (reciprocals: the per-frame path multiplies).
    inverse_noise: Vec<f64>,
    /// Training centre and one over the scale of the mean and energy
    /// statistics, per reading: `[mean centre, 1 / mean scale, energy
    /// centre, 1 / energy scale]`.
    norms: Vec<[f64; 4]>,
    running: Running,
    pub calibration: Calibration,
    /// With `hold_shifts`, set once the threshold is calibrated. Left out of
    /// the encoding when absent (the last field: a positional encoding
    /// without it is one element shorter).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    shift: Option<ShiftHold>,
}

/// The predictors and window statistics, carried frame to frame.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Running {
    predicted: Option<Vec<f64>>,
    mean: Vec<f64>,
    energy: Vec<f64>,
}

impl Running {
    fn new(width: usize) -> Self {
        Self {
            predicted: None,
            mean: vec![0.0; width],
            energy: vec![1.0; width],
        }
    }

    /// Advances on one full frame's change readings (`columns`); returns
    /// whether the frame produced innovations (the first one only sets the
    /// predictors).
    fn step(
        &mut self,
        row: &[f64],
        columns: &[usize],
        inverse_noise: &[f64],
        w: f64,
        window: f64,
    ) -> bool {
        let Some(predicted) = &mut self.predicted else {
            self.predicted = Some(columns.iter().map(|&c| row[c]).collect());
            return false;
        };
        for (j, (&c, p)) in columns.iter().zip(predicted.iter_mut()).enumerate() {
            let e = row[c] - *p;
            let u = (e * inverse_noise[j]).clamp(-Z_LIMIT, Z_LIMIT);
            self.mean[j] += window * (u - self.mean[j]);
            self.energy[j] += window * ((u * u).min(Z_LIMIT) - self.energy[j]);
            *p += w * e;
        }
        true
    }
}

impl ChangeChannels {
    /// Fits on the training frames and calibrates on the calibration frames
    /// (full frames; `columns` picks the change readings). Both pass through
    /// the predictors in arrival order and leave them where monitoring
    /// starts. A pure function of its input.
    pub fn fit(
        settings: &ChangeSettings,
        columns: Vec<usize>,
        training: &[Vec<f64>],
        calibration: &[Vec<f64>],
    ) -> Self {
        let m = columns.len();
        let window = settings.window_weight;
        let w = settings.predictor_weight;
        // Pass 1: each reading's innovation scale.
        let inverse_noise: Vec<f64> = columns
            .iter()
            .map(|&c| {
                let series: Vec<f64> = training.iter().map(|row| row[c]).collect();
                1.0 / innovation_scale(&series, w)
            })
            .collect();
        // Pass 2: the statistics over training, after a burn-in of about
        // three window lengths, give each statistic's centre and scale.
        let burn_in = burn_in(window, training.len());
        let mut running = Running::new(m);
        let mut stats = Vec::with_capacity(training.len());
        let start = running.clone();
        for (i, row) in training.iter().enumerate() {
            running.step(row, &columns, &inverse_noise, w, window);
            if i >= burn_in {
                let mut s = running.mean.clone();
                s.extend_from_slice(&running.energy);
                stats.push(s);
            }
        }
        // Calibration replays the training frames from the start, so the
        // calibration scores are the monitored statistic's own values.
        running = start;
        let fitted = RobustScaler::fit(&stats, 2 * m);
        let norms = (0..m)
            .map(|j| {
                [
                    fitted.centre[j],
                    1.0 / fitted.scale[j],
                    fitted.centre[m + j],
                    1.0 / fitted.scale[m + j],
                ]
            })
            .collect();
        let mut channels = Self {
            columns,
            predictor_weight: w,
            window_weight: window,
            inverse_noise,
            norms,
            running,
            calibration: Calibration::new(Vec::new(), settings.false_alarm_rate),
            shift: None,
        };
        let mut scores = Vec::with_capacity(training.len() + calibration.len());
        for (i, row) in training.iter().enumerate() {
            let score = channels.observe(row);
            if i >= burn_in {
                scores.push(score);
            }
        }
        scores.extend(calibration.iter().map(|row| channels.observe(row)));
        channels.calibration = Calibration::new(scores, settings.false_alarm_rate);
        if settings.hold_shifts {
            channels.shift = Some(ShiftHold::fit(
                &channels.columns,
                training,
                calibration,
                settings.false_alarm_rate,
            ));
        }
        channels
    }

    /// Advances on one full frame and returns its change score (0 for the
    /// very first frame): the largest standardized statistic, or a held
    /// shift's `z` on the threshold's scale ([`ShiftHold`]).
    pub fn observe(&mut self, row: &[f64]) -> f64 {
        let stepped = self.running.step(
            row,
            &self.columns,
            &self.inverse_noise,
            self.predictor_weight,
            self.window_weight,
        );
        let threshold = self.calibration.threshold;
        let mut score: f64 = 0.0;
        for j in 0..self.columns.len() {
            let own = if stepped { self.reading_score(j) } else { 0.0 };
            let held = match &mut self.shift {
                Some(shift) => threshold * shift.step(j, row[self.columns[j]], own > threshold),
                None => 0.0,
            };
            score = score.max(own.max(held));
        }
        score
    }

    /// Change reading `j`'s score as the running statistics stand.
    fn reading_score(&self, j: usize) -> f64 {
        let n = &self.norms[j];
        let mean = (self.running.mean[j] - n[0]).abs() * n[1];
        let energy = (self.running.energy[j] - n[2]) * n[3];
        mean.max(energy).clamp(0.0, Z_LIMIT)
    }

    /// Writes each change reading's score of the last observed frame at its
    /// frame position in `out` (a held shift's score where it is larger).
    pub fn shares(&self, out: &mut [f64]) {
        for (j, &c) in self.columns.iter().enumerate() {
            out[c] = self.reading_score(j).max(self.held_score(j));
        }
    }

    /// Reading `j`'s held shift on the threshold's scale as it stands after
    /// the last frame (0 when not held).
    fn held_score(&self, j: usize) -> f64 {
        self.shift
            .as_ref()
            .map_or(0.0, |shift| self.calibration.threshold * shift.ratio(j))
    }

    pub fn columns(&self) -> &[usize] {
        &self.columns
    }
}

/// The level model's readings of `values` (all but the change columns, in
/// frame order) into `out`.
pub(super) fn pick_level(values: &[f64], change_columns: &[usize], out: &mut Vec<f64>) {
    out.clear();
    // `change_columns` is ascending (`Detector::for_readings` sorts it).
    let mut change = change_columns.iter().peekable();
    for (j, v) in values.iter().enumerate() {
        if change.next_if_eq(&&j).is_none() {
            out.push(*v);
        }
    }
}

/// Per frame position: the level reading's share of the level score
/// (`level`, in level-model order), or the change reading's own change
/// score of the last observed frame.
pub(super) fn contributions(
    level: Vec<f64>,
    change: Option<&ChangeChannels>,
    width: usize,
) -> Vec<f64> {
    let Some(change) = change else {
        return level;
    };
    let mut out = vec![0.0; width];
    let mut shares = level.into_iter();
    for (j, o) in out.iter_mut().enumerate() {
        if !change.columns.contains(&j) {
            *o = shares.next().unwrap_or(0.0);
        }
    }
    change.shares(&mut out);
    out
}
