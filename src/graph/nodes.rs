//! The node types: their typed parameters, their ports and the ranges their
//! parameters must lie in.

use serde::{Deserialize, Serialize};

use crate::config::FieldError;
use crate::detector::{AlarmRule, DetectorSettings};

/// Longest rolling-mean window; the window is kept in the node's state.
pub const MAX_ROLLING_WINDOW: usize = 10_000;

/// A node's type with its validated parameters. Serialized as
/// `{"type": ..., "params": {...}}`, which is also the canonical form the
/// semantics hash covers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", content = "params", rename_all = "snake_case")]
pub enum NodeSpec {
    /// A source: the values of one reading, frame by frame.
    Reading(ReadingParams),
    /// `value * factor + offset`.
    Scale(ScaleParams),
    /// The change since the previous frame (0 on the first frame).
    Difference(NoParams),
    /// The mean of the last `window` values.
    RollingMean(RollingMeanParams),
    /// Exponentially weighted moving average.
    Ewma(EwmaParams),
    /// The built-in detector over its input series, in input order. Its
    /// output is the score divided by the calibrated threshold, so 1 is the
    /// detector's own alarm line and scores of several detectors compare.
    Detector(DetectorSettings),
    /// Combines scores into one.
    Combine(CombineParams),
    /// Raises alarms from one score.
    Alarm(AlarmParams),
    /// Test-only: passes its input through and fails on demand.
    #[cfg(feature = "fault-injection")]
    FailAfter(FailAfterParams),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReadingParams {
    /// The name of one of the graph's readings.
    pub reading: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScaleParams {
    pub factor: f64,
    #[serde(default)]
    pub offset: f64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoParams {}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RollingMeanParams {
    pub window: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EwmaParams {
    /// Weight of the newest value, in (0, 1].
    pub alpha: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CombineOp {
    Mean,
    Max,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CombineParams {
    pub op: CombineOp,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlarmParams {
    /// A frame is flagged when its score reaches this value.
    #[serde(default = "one")]
    pub threshold: f64,
    #[serde(default)]
    pub rule: AlarmRule,
}

fn one() -> f64 {
    1.0
}

/// How the fault node fails once it has applied `updates` updates.
#[cfg(feature = "fault-injection")]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailMode {
    /// A certain rejection: the node's state is untouched.
    Rejected,
    /// The node may have changed its state: the run cannot be trusted.
    Uncertain,
    /// No failure: every later update blocks the model for `slow_ms`, as a
    /// slow or stuck model operation would.
    Slow,
}

#[cfg(feature = "fault-injection")]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FailAfterParams {
    pub updates: u64,
    pub mode: FailMode,
    /// How long each update blocks in `slow` mode.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub slow_ms: u64,
}

#[cfg(feature = "fault-injection")]
fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// What flows along an edge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Port {
    /// One value per frame from a reading or a transform.
    Series,
    /// An anomaly score.
    Score,
}

impl Port {
    pub fn as_str(self) -> &'static str {
        match self {
            Port::Series => "series",
            Port::Score => "score",
        }
    }
}

/// How many inputs of which kind a node takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Inputs {
    pub port: Option<Port>,
    pub min: usize,
    pub max: usize,
}

impl NodeSpec {
    /// Parses a node's type and parameters; unknown types and parameters
    /// are errors.
    pub fn parse(node_type: &str, params: &serde_json::Value) -> Result<Self, String> {
        let tagged = serde_json::json!({ "type": node_type, "params": params });
        serde_json::from_value(tagged).map_err(|e| e.to_string())
    }

    pub fn type_name(&self) -> &'static str {
        match self {
            NodeSpec::Reading(_) => "reading",
            NodeSpec::Scale(_) => "scale",
            NodeSpec::Difference(_) => "difference",
            NodeSpec::RollingMean(_) => "rolling_mean",
            NodeSpec::Ewma(_) => "ewma",
            NodeSpec::Detector(_) => "detector",
            NodeSpec::Combine(_) => "combine",
            NodeSpec::Alarm(_) => "alarm",
            #[cfg(feature = "fault-injection")]
            NodeSpec::FailAfter(_) => "fail_after",
        }
    }

    /// The node's output, if it has one.
    pub fn output(&self) -> Option<Port> {
        match self {
            NodeSpec::Reading(_)
            | NodeSpec::Scale(_)
            | NodeSpec::Difference(_)
            | NodeSpec::RollingMean(_)
            | NodeSpec::Ewma(_) => Some(Port::Series),
            #[cfg(feature = "fault-injection")]
            NodeSpec::FailAfter(_) => Some(Port::Series),
            NodeSpec::Detector(_) | NodeSpec::Combine(_) => Some(Port::Score),
            NodeSpec::Alarm(_) => None,
        }
    }

    pub fn inputs(&self) -> Inputs {
        let (port, min, max) = match self {
            NodeSpec::Reading(_) => (None, 0, 0),
            NodeSpec::Scale(_)
            | NodeSpec::Difference(_)
            | NodeSpec::RollingMean(_)
            | NodeSpec::Ewma(_) => (Some(Port::Series), 1, 1),
            #[cfg(feature = "fault-injection")]
            NodeSpec::FailAfter(_) => (Some(Port::Series), 1, 1),
            NodeSpec::Detector(_) => (Some(Port::Series), 1, usize::MAX),
            NodeSpec::Combine(_) => (Some(Port::Score), 1, usize::MAX),
            NodeSpec::Alarm(_) => (Some(Port::Score), 1, 1),
        };
        Inputs { port, min, max }
    }

    /// Parameters out of range, under `prefix` (e.g. `nodes.avg.params`).
    /// `inputs` is the number of incoming edges (the detector's width).
    pub fn validate(&self, prefix: &str, inputs: usize) -> Vec<FieldError> {
        let at = |f: &str| format!("{prefix}.{f}");
        let mut errors = Vec::new();
        match self {
            NodeSpec::Scale(p) => {
                if !p.factor.is_finite() || p.factor == 0.0 {
                    errors.push(FieldError::new(
                        at("factor"),
                        "must be a finite, non-zero number",
                    ));
                }
                if !p.offset.is_finite() {
                    errors.push(FieldError::new(at("offset"), "must be a finite number"));
                }
            }
            NodeSpec::RollingMean(p) => {
                if p.window == 0 || p.window > MAX_ROLLING_WINDOW {
                    errors.push(FieldError::new(
                        at("window"),
                        format!("must be between 1 and {MAX_ROLLING_WINDOW} frames"),
                    ));
                }
            }
            NodeSpec::Ewma(p) => {
                if !(p.alpha > 0.0 && p.alpha <= 1.0) {
                    errors.push(FieldError::new(at("alpha"), "must be in (0, 1]"));
                }
            }
            NodeSpec::Detector(settings) => errors.extend(settings.validate(prefix, inputs)),
            NodeSpec::Alarm(p) => {
                if !(p.threshold.is_finite() && p.threshold > 0.0) {
                    errors.push(FieldError::new(
                        at("threshold"),
                        "must be a positive number",
                    ));
                }
                let rule = &p.rule;
                if rule.open_n == 0 || rule.open_k == 0 || rule.open_k > rule.open_n {
                    errors.push(FieldError::new(at("rule"), "needs 1 <= open_k <= open_n"));
                }
                if rule.close_m == 0 {
                    errors.push(FieldError::new(at("rule.close_m"), "must be at least 1"));
                }
            }
            NodeSpec::Reading(_) | NodeSpec::Difference(_) | NodeSpec::Combine(_) => {}
            #[cfg(feature = "fault-injection")]
            NodeSpec::FailAfter(_) => {}
        }
        errors
    }
}
