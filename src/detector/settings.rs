//! Per-monitor detector settings, as written in a monitor's TOML file.

use serde::{Deserialize, Serialize};

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
        }
    }
}

impl DetectorSettings {
    /// Field errors under the given prefix (e.g. `detector`).
    pub fn validate(&self, prefix: &str, readings: usize) -> Vec<FieldError> {
        let mut errors = Vec::new();
        let field = |name: &str| format!("{prefix}.{name}");
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
        if !(rate.is_finite() && rate > 0.0 && rate < 1.0) {
            errors.push(FieldError::new(
                field("false_alarm_rate"),
                format!("{rate} is not a probability strictly between 0 and 1"),
            ));
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
        let alarm = &self.alarm;
        if alarm.open_n == 0 {
            errors.push(FieldError::new(field("alarm.open_n"), "must be at least 1"));
        }
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
}
