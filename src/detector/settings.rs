//! Per-monitor detector settings, as written in a monitor's TOML file.

use serde::{Deserialize, Serialize};

use super::{ChangeSettings, StuckSettings};
use crate::config::FieldError;

/// How the detector trains, calibrates and raises alarms. Every field is part
/// of the config fingerprint: changing one invalidates the monitor's snapshot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DetectorSettings {
    /// Frames used to fit the model.
    pub training_frames: usize,
    /// Frames, after training, used to calibrate the alarm threshold.
    pub calibration_frames: usize,
    /// Target probability that a normal frame is flagged.
    pub false_alarm_rate: f64,
    /// The rule that turns flagged frames into alarms.
    #[serde(default)]
    pub alarm: AlarmRule,
    /// Share of the standardized training variance the principal subspace
    /// keeps; the rest is watched by the squared prediction error.
    #[serde(default = "default_explained_variance")]
    pub explained_variance: f64,
    /// Weight of the newest frame in the per-reading exponentially weighted
    /// moving average the model sees (1 uses each frame's values as they are).
    #[serde(default = "default_score_smoothing")]
    pub feature_smoothing: f64,
    /// Weight of the newest frame in the exponentially weighted moving
    /// average of scores (1 scores every frame on its own).
    #[serde(default = "default_score_smoothing")]
    pub score_smoothing: f64,
    /// Score deviations from a slowly tracked level instead of raw values
    /// (absent: raw values, a purely static model).
    #[serde(default)]
    pub level_tracking: Option<LevelTracking>,
    /// Keep the tracked levels where they are while an alarm is open, so a
    /// fault that lasts is not learned as the new normal (no effect without
    /// `level_tracking`).
    #[serde(default)]
    pub hold_level_during_alarm: bool,
    /// Readings scored on their changes instead of their level (absent:
    /// every reading is in the level model). See `change`.
    #[serde(default)]
    pub change: Option<ChangeSettings>,
    /// Monitored frames the model-health figures look back over.
    #[serde(default = "default_health_window")]
    pub health_window: usize,
    /// Monitored frames between two model-health refreshes.
    #[serde(default = "default_health_refresh_frames")]
    pub health_refresh_frames: usize,
    /// Watch every reading for a value repeated longer than it plausibly
    /// is (absent: not watched). See `stuck`. Left out of the encoding
    /// when absent, so monitors without it keep their fingerprints and
    /// snapshots their bytes; the last field, so a positional encoding
    /// without it is the same array one shorter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stuck: Option<StuckSettings>,
}

/// The error of a false-alarm rate that is not a probability strictly
/// between 0 and 1 (every channel's rate is checked alike).
pub(super) fn probability_error(field: String, rate: f64) -> Option<FieldError> {
    (!(rate.is_finite() && rate > 0.0 && rate < 1.0)).then(|| {
        FieldError::new(
            field,
            format!("{rate} is not a probability strictly between 0 and 1"),
        )
    })
}

fn default_explained_variance() -> f64 {
    0.9
}

fn default_score_smoothing() -> f64 {
    1.0
}

fn default_health_window() -> usize {
    1000
}

fn default_health_refresh_frames() -> usize {
    100
}

/// A per-reading level followed by an exponentially weighted moving average;
/// the detector sees each value's deviation from the level before the frame.
/// Each frame's pull on the level is clipped to `clip` robust training
/// deviations, so slow drift is followed while a sudden, sustained change is
/// absorbed only slowly (linearly, not exponentially) and stays visible.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LevelTracking {
    /// Weight of a frame in the level, in (0, 1].
    pub weight: f64,
    /// Largest pull of one frame, in robust standard deviations of the
    /// reading over the training frames; positive.
    pub clip: f64,
}

/// An alarm opens when `open_k` of the last `open_n` frames are flagged and
/// closes after `close_m` consecutive normal frames.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlarmRule {
    pub open_k: usize,
    pub open_n: usize,
    pub close_m: usize,
}

impl Default for AlarmRule {
    fn default() -> Self {
        Self {
            open_k: 3,
            open_n: 5,
            close_m: 5,
        }
    }
}

impl Default for DetectorSettings {
    fn default() -> Self {
        Self {
            training_frames: 300,
            calibration_frames: 100,
            false_alarm_rate: 0.01,
            alarm: AlarmRule::default(),
            explained_variance: default_explained_variance(),
            feature_smoothing: default_score_smoothing(),
            score_smoothing: default_score_smoothing(),
            level_tracking: None,
            hold_level_during_alarm: false,
            change: None,
            health_window: default_health_window(),
            health_refresh_frames: default_health_refresh_frames(),
            stuck: None,
        }
    }
}

impl DetectorSettings {
    /// Field errors under the given prefix (e.g. `detector`).
    pub fn validate(&self, prefix: &str, readings: usize) -> Vec<FieldError> {
        let field = |name: &str| format!("{prefix}.{name}");
        let mut errors = self.sample_errors(&field, readings);
        errors.extend(self.weight_errors(&field));
        if let Some(change) = &self.change {
            errors.extend(change.validate(&field, self.training_frames, self.calibration_frames));
            if change.readings.len() >= readings {
                errors.push(FieldError::new(
                    field("change.readings"),
                    format!(
                        "{} of {readings} readings are change readings: at least one must stay in the level model",
                        change.readings.len()
                    ),
                ));
            }
        }
        if let Some(stuck) = &self.stuck {
            errors.extend(stuck.validate(&field));
        }
        let at_least_one = [
            ("health_window", self.health_window),
            ("health_refresh_frames", self.health_refresh_frames),
            ("alarm.open_n", self.alarm.open_n),
        ];
        for (name, value) in at_least_one {
            if value == 0 {
                errors.push(FieldError::new(field(name), "must be at least 1"));
            }
        }
        let alarm = &self.alarm;
        if alarm.open_k == 0 || alarm.open_k > alarm.open_n {
            errors.push(FieldError::new(
                field("alarm.open_k"),
                format!(
                    "{} must be between 1 and open_n ({})",
                    alarm.open_k, alarm.open_n
                ),
            ));
        }
        if alarm.close_m == 0 {
            errors.push(FieldError::new(
                field("alarm.close_m"),
                "must be at least 1",
            ));
        }
        errors
    }

    /// Enough training frames for the readings, a false-alarm rate that is a
    /// probability, and enough calibration frames to calibrate it.
    fn sample_errors(&self, field: &dyn Fn(&str) -> String, readings: usize) -> Vec<FieldError> {
        let mut errors = Vec::new();
        if self.training_frames < 2 || self.training_frames <= readings {
            errors.push(FieldError::new(
                field("training_frames"),
                format!(
                    "{} is too few: need more training frames than readings ({readings}) and at least 2",
                    self.training_frames
                ),
            ));
        }
        let rate = self.false_alarm_rate;
        if let Some(error) = probability_error(field("false_alarm_rate"), rate) {
            errors.push(error);
        } else {
            // A conformal threshold at rate a needs n with (n + 1)(1 - a) <= n.
            let needed = ((1.0 - rate) / rate).ceil() as usize;
            if self.calibration_frames < needed {
                errors.push(FieldError::new(
                    field("calibration_frames"),
                    format!(
                        "{} frames cannot calibrate a false-alarm rate of {rate}: at least {needed} are needed",
                        self.calibration_frames
                    ),
                ));
            }
        }
        errors
    }

    /// Shares and smoothing weights in (0, 1], and a positive clip.
    fn weight_errors(&self, field: &dyn Fn(&str) -> String) -> Vec<FieldError> {
        let in_unit = |w: f64| w.is_finite() && w > 0.0 && w <= 1.0;
        let mut weights = vec![
            (
                "explained_variance",
                self.explained_variance,
                "is not a share in (0, 1]",
            ),
            (
                "feature_smoothing",
                self.feature_smoothing,
                "is not a weight in (0, 1]; 1 turns smoothing off",
            ),
            (
                "score_smoothing",
                self.score_smoothing,
                "is not a weight in (0, 1]; 1 turns smoothing off",
            ),
        ];
        if let Some(level) = &self.level_tracking {
            weights.push((
                "level_tracking.weight",
                level.weight,
                "is not a weight in (0, 1]",
            ));
        }
        let mut errors: Vec<FieldError> = weights
            .into_iter()
            .filter(|(_, w, _)| !in_unit(*w))
            .map(|(name, w, what)| FieldError::new(field(name), format!("{w} {what}")))
            .collect();
        if let Some(level) = &self.level_tracking {
            let c = level.clip;
            if !(c.is_finite() && c > 0.0) {
                errors.push(FieldError::new(
                    field("level_tracking.clip"),
                    format!("{c} must be a positive number of robust deviations"),
                ));
            }
        }
        errors
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(settings: &DetectorSettings) -> Vec<String> {
        settings
            .validate("detector", 4)
            .into_iter()
            .map(|e| e.field)
            .collect()
    }

    #[test]
    fn defaults_are_valid() {
        assert!(fields(&DetectorSettings::default()).is_empty());
    }

    #[test]
    fn each_invalid_new_field_is_named() {
        let settings = DetectorSettings {
            explained_variance: 0.0,
            feature_smoothing: 1.5,
            score_smoothing: f64::NAN,
            level_tracking: Some(LevelTracking {
                weight: 0.0,
                clip: -1.0,
            }),
            health_window: 0,
            health_refresh_frames: 0,
            ..DetectorSettings::default()
        };
        assert_eq!(
            fields(&settings),
            vec![
                "detector.explained_variance",
                "detector.feature_smoothing",
                "detector.score_smoothing",
                "detector.level_tracking.weight",
                "detector.level_tracking.clip",
                "detector.health_window",
                "detector.health_refresh_frames",
            ]
        );
    }

    #[test]
    fn a_monitor_file_without_the_new_fields_gets_the_documented_defaults() {
        let settings: DetectorSettings = toml::from_str(
            "training_frames = 300\ncalibration_frames = 100\nfalse_alarm_rate = 0.01",
        )
        .unwrap();
        assert_eq!(settings, DetectorSettings::default());
    }
}
