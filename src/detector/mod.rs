//! The detector: training, calibration, static fit, scoring and alarms.

mod settings;

pub use settings::{AlarmRule, DetectorSettings};
