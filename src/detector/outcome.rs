//! What the detector says about each frame it is given.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::{AlarmEvent, ModelHealth, Phase};

/// The result of offering one frame to the detector.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Kept for the fit. `phase` is the phase after this frame; when it is
    /// `Fitting` the fit is due: checkpoint, then call `Detector::fit`.
    Buffered { phase: Phase, phase_changed: bool },
    /// Scored by the fitted model.
    Scored(Box<Scored>),
    /// Not usable; the detector state is unchanged.
    Rejected(Rejection),
}

impl Outcome {
    /// Whether the runtime should now checkpoint and run the fit.
    pub fn fit_due(&self) -> bool {
        matches!(
            self,
            Outcome::Buffered {
                phase: Phase::Fitting,
                ..
            }
        )
    }
}

/// Why a frame was not used.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, thiserror::Error)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum Rejection {
    #[error("frame has {got} values but the monitor has {expected} required readings")]
    WrongWidth { expected: usize, got: usize },
    #[error("value of reading {reading} is not a finite number")]
    NonFinite { reading: usize },
}

/// One monitored frame's verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Scored {
    pub ts: DateTime<Utc>,
    /// The level model's (smoothed) score compared with the threshold.
    /// With change readings a frame can also be flagged by the change
    /// channels while this stays below the threshold; `p_value` covers both.
    pub score: f64,
    /// This frame's own score before smoothing.
    pub raw_score: f64,
    pub threshold: f64,
    /// The level model's conformal p-value or, with change readings or the
    /// stuck-value channel, the Bonferroni combination over the channels
    /// (`min(1, 2 min(p_level, p_change))` with change readings alone).
    pub p_value: f64,
    /// With change readings: the change score and its threshold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub change: Option<(f64, f64)>,
    /// With the stuck-value channel: the frame's surprise (`-ln` of the
    /// smallest run p-value) and its threshold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stuck: Option<(f64, f64)>,
    pub flagged: bool,
    /// Whether an alarm is open after this frame.
    pub alarm_open: bool,
    /// Present when the frame is flagged.
    pub evidence: Option<Evidence>,
    /// An alarm opened or closed on this frame.
    pub alarm_event: Option<AlarmEvent>,
    /// Present when the health figures were refreshed on this frame.
    pub health: Option<ModelHealth>,
}

impl Scored {
    /// How far the frame is beyond the alarm line: the score over its
    /// threshold, or the largest such ratio over the channels (change,
    /// stuck). Above 1 exactly when `flagged`.
    pub fn alarm_ratio(&self) -> f64 {
        let level = self.score / self.threshold;
        self.change
            .iter()
            .chain(&self.stuck)
            .fold(level, |r, (score, threshold)| r.max(score / threshold))
    }
}

/// Why a flagged frame was flagged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Evidence {
    pub ts: DateTime<Utc>,
    pub score: f64,
    pub threshold: f64,
    pub p_value: f64,
    /// Per required reading, its share of this frame's unsmoothed level
    /// score, or for a change reading its own change score (see
    /// `ChangeChannels`).
    pub contributions: Vec<f64>,
    /// The alarm open after this frame, if any.
    pub alarm_seq: Option<u64>,
}
