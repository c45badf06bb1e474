//! One node's update: the per-type arithmetic and state changes behind
//! [`super::GraphExecutor`], each ending in one [`NodeUpdate`].

use std::collections::VecDeque;

use chrono::{DateTime, Utc};

use super::NodeSpec;
use super::execute::{DetectorFrame, FrameReport, NodeState, NodeUpdate, SinkOutput};
use super::nodes::{AlarmParams, CombineOp};
use crate::align::Frame;
use crate::detector::{AlarmState, Detector, Outcome};

/// `inputs`: the ids of the node's input nodes, in edge order (a detector's
/// readings, which its `change.readings` name).
pub(super) fn initial_state(spec: &NodeSpec, inputs: &[String]) -> Result<NodeState, String> {
    Ok(match spec {
        NodeSpec::Reading(_) | NodeSpec::Scale(_) | NodeSpec::Combine(_) => NodeState::Stateless,
        NodeSpec::Difference(_) => NodeState::Difference { previous: None },
        NodeSpec::RollingMean(p) => NodeState::RollingMean {
            values: VecDeque::with_capacity(p.window),
        },
        NodeSpec::Ewma(_) => NodeState::Ewma { level: None },
        NodeSpec::Detector(settings) => NodeState::Detector {
            detector: Box::new(
                Detector::for_readings(settings.clone(), inputs).map_err(|e| e.to_string())?,
            ),
        },
        NodeSpec::Alarm(p) => NodeState::Alarm {
            alarm: AlarmState::new(p.rule.clone()),
        },
        #[cfg(feature = "fault-injection")]
        NodeSpec::FailAfter(_) => NodeState::FailAfter { applied: 0 },
    })
}

pub(super) fn read_value(frame: &Frame, index: usize, width: usize) -> NodeUpdate {
    if frame.values.len() != width {
        return NodeUpdate::Rejected(format!(
            "the frame has {} values but the graph has {width} readings",
            frame.values.len()
        ));
    }
    match frame.values[index] {
        v if v.is_finite() => NodeUpdate::Applied(Some(v)),
        _ => NodeUpdate::Rejected("the reading's value is not a finite number".into()),
    }
}

fn finite(value: f64, what: &str) -> Result<f64, NodeUpdate> {
    if value.is_finite() {
        Ok(value)
    } else {
        Err(NodeUpdate::Rejected(format!(
            "{what} is not a finite number"
        )))
    }
}

/// One node's update. Stateful nodes compute their next state first and
/// store it only once it is known to be finite, so every rejection leaves
/// the state as it was.
pub(super) fn update(
    spec: &NodeSpec,
    state: &mut NodeState,
    inputs: &[f64],
    ts: DateTime<Utc>,
    id: &str,
    report: &mut FrameReport,
) -> NodeUpdate {
    let first = inputs.first().copied().unwrap_or(f64::NAN);
    let result = match (spec, state) {
        (NodeSpec::Scale(p), _) => finite(first * p.factor + p.offset, "the scaled value"),
        (NodeSpec::Difference(_), NodeState::Difference { previous }) => {
            finite(first - previous.unwrap_or(first), "the difference")
                .inspect(|_| *previous = Some(first))
        }
        (NodeSpec::RollingMean(p), NodeState::RollingMean { values }) => {
            rolling_mean(values, p.window, first)
        }
        (NodeSpec::Ewma(p), NodeState::Ewma { level }) => {
            let next = level.map_or(first, |l| l + p.alpha * (first - l));
            finite(next, "the moving average").inspect(|&next| *level = Some(next))
        }
        (NodeSpec::Detector(_), NodeState::Detector { detector }) => {
            return detector_update(detector, inputs, ts, id, report);
        }
        (NodeSpec::Combine(p), _) => {
            let combined = match p.op {
                CombineOp::Mean => inputs.iter().sum::<f64>() / inputs.len().max(1) as f64,
                CombineOp::Max => inputs.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            };
            finite(combined, "the combined score")
        }
        (NodeSpec::Alarm(p), NodeState::Alarm { alarm }) => {
            return alarm_update(p, alarm, first, ts, report);
        }
        #[cfg(feature = "fault-injection")]
        (NodeSpec::FailAfter(p), NodeState::FailAfter { applied }) => {
            return fail_after(p, applied, first);
        }
        // Compile and restore pair every spec with its own state kind.
        (spec, state) => return mismatched_state(spec, state),
    };
    match result {
        Ok(value) => NodeUpdate::Applied(Some(value)),
        Err(rejected) => rejected,
    }
}

/// The mean of the last `window` values, `first` included; the window
/// slides only once the mean is known to be finite.
fn rolling_mean(values: &mut VecDeque<f64>, window: usize, first: f64) -> Result<f64, NodeUpdate> {
    let dropped = if values.len() == window {
        values.front().copied()
    } else {
        None
    };
    let kept = values.len() - usize::from(dropped.is_some());
    let sum: f64 = values
        .iter()
        .skip(usize::from(dropped.is_some()))
        .sum::<f64>()
        + first;
    finite(sum / (kept + 1) as f64, "the rolling mean").inspect(|_| {
        if dropped.is_some() {
            values.pop_front();
        }
        values.push_back(first);
    })
}

/// The alarm sink: flags the score against its threshold and reports the
/// sink's output for the frame.
fn alarm_update(
    p: &AlarmParams,
    alarm: &mut AlarmState,
    first: f64,
    ts: DateTime<Utc>,
    report: &mut FrameReport,
) -> NodeUpdate {
    match finite(first, "the score") {
        Ok(score) => {
            let flagged = score >= p.threshold;
            let alarm_event = alarm.observe(ts, flagged, score);
            report.sink = Some(SinkOutput {
                score,
                threshold: p.threshold,
                flagged,
                alarm_event,
            });
            NodeUpdate::Applied(None)
        }
        Err(rejected) => rejected,
    }
}

/// The fault node (test builds only): passes `first` through for its
/// first `p.updates` updates, then fails as `p.mode` says.
#[cfg(feature = "fault-injection")]
fn fail_after(p: &super::nodes::FailAfterParams, applied: &mut u64, first: f64) -> NodeUpdate {
    use super::nodes::FailMode;
    if *applied < p.updates {
        *applied += 1;
        return NodeUpdate::Applied(Some(first));
    }
    match p.mode {
        FailMode::Slow => {
            tracing::info!(
                updates = *applied,
                slow_ms = p.slow_ms,
                "Fault node: blocking the model thread."
            );
            std::thread::sleep(std::time::Duration::from_millis(p.slow_ms));
            *applied += 1;
            NodeUpdate::Applied(Some(first))
        }
        FailMode::Rejected => {
            NodeUpdate::Rejected(format!("injected rejection after {} updates", p.updates))
        }
        FailMode::Uncertain => {
            // The state moves before the failure surfaces, as it would in
            // a node that fails half-way.
            *applied += 1;
            NodeUpdate::FatalUncertain(format!(
                "injected uncertain failure after {} updates",
                p.updates
            ))
        }
    }
}

/// A node whose state is not its spec's kind: compile and restore never
/// pair them so, so the state cannot be trusted.
fn mismatched_state(spec: &NodeSpec, state: &NodeState) -> NodeUpdate {
    NodeUpdate::FatalUncertain(format!(
        "a {} node holds {} state",
        spec.type_name(),
        serde_json::to_value(state)
            .ok()
            .and_then(|v| v.get("kind").and_then(|k| k.as_str()).map(str::to_string))
            .unwrap_or_default()
    ))
}

/// The built-in detector as a node. Its own rejections leave it untouched;
/// a non-finite score after it advanced (smoothing, alarm rule, health) is
/// a fatal uncertain failure.
fn detector_update(
    detector: &mut Detector,
    inputs: &[f64],
    ts: DateTime<Utc>,
    id: &str,
    report: &mut FrameReport,
) -> NodeUpdate {
    let frame = Frame {
        ts,
        values: inputs.to_vec(),
    };
    match detector.process_and_fit(&frame) {
        Outcome::Rejected(rejection) => NodeUpdate::Rejected(rejection.to_string()),
        Outcome::Buffered {
            phase,
            phase_changed,
        } => {
            report.detectors.push(DetectorFrame {
                node: id.to_string(),
                phase: detector.phase(),
                phase_changed: phase_changed || phase != detector.phase(),
                scored: None,
            });
            NodeUpdate::Applied(None)
        }
        Outcome::Scored(scored) => {
            let ratio = scored.alarm_ratio();
            if !(ratio.is_finite() && scored.threshold > 0.0) {
                return NodeUpdate::FatalUncertain(format!(
                    "the detector advanced but produced score {} against threshold {}",
                    scored.score, scored.threshold
                ));
            }
            report.detectors.push(DetectorFrame {
                node: id.to_string(),
                phase: detector.phase(),
                phase_changed: false,
                scored: Some(scored),
            });
            NodeUpdate::Applied(Some(ratio))
        }
    }
}
