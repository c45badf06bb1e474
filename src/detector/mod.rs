//! The detector: training, calibration, static fit, scoring and alarms.
//!
//! Pure domain code: frames in, outcomes out, no IO and no clock.
//! - `robust`: median/MAD standardization learned from training frames.
//! - `pca`: the principal-component model and its T-squared + SPE score.
//! - `conformal`: threshold and p-values from the calibration scores.
//! - `change`: readings scored on their changes (innovations of a
//!   local-level predictor), for readings whose level drifts.
//! - `shift`: a change reading's sudden shift held while it lasts.
//! - `stuck`: every reading's current run of repeated values against a
//!   Markov model of its repeats (a frozen sensor).
//! - `alarm`: the k-of-n open / m-normal close rule and its events.
//! - `health`: recent flag rate and score drift.
//! - `state`: the phases and the whole serializable detector.

mod alarm;
mod change;
#[cfg(test)]
mod change_tests;
mod conformal;
mod features;
mod health;
mod outcome;
mod pca;
mod robust;
mod settings;
mod shift;
mod state;
mod stuck;
#[cfg(test)]
mod stuck_tests;
#[cfg(test)]
mod tests;

pub use alarm::{AlarmEvent, AlarmState};
pub use change::{ChangeChannels, ChangeSettings};
pub use conformal::Calibration;
pub use features::Features;
pub use health::{HealthWindow, ModelHealth};
pub use outcome::{Evidence, Outcome, Rejection, Scored};
pub use pca::{FrameScore, PcaModel};
pub use robust::{RobustScaler, ScaleSource};
pub use settings::{AlarmRule, DetectorSettings, LevelTracking};
pub use state::{Detector, DetectorError, Phase};
pub use stuck::{StuckChannel, StuckSettings};

/// Version of the numbers this detector produces; part of the snapshot
/// envelope. Bump it whenever a change could alter a score, threshold or
/// fitted model for the same input. 2: levels may be held while an alarm is
/// open (`hold_level_during_alarm`), and the settings carry that field.
/// 3: change channels (`change`), a frame is flagged by the level model or
/// the change channels, and the p-value is their Bonferroni combination.
pub const ALGORITHM_VERSION: &str = "robust-pca-t2spe-conformal/3";
