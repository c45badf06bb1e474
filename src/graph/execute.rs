//! Running one graph revision over aligned frames.
//!
//! Every node update ends in exactly one of three ways: applied, a certain
//! rejection (the node's state is as before) or a fatal uncertain failure
//! (the node may have changed its state, so nothing computed from here on
//! can be trusted). The executor is consumed by every frame and handed back
//! only when the frame did not fail uncertainly; after a fatal uncertain
//! failure the caller holds a [`QuarantinedGraph`], which can neither run a
//! node nor export state: the damaged state cannot reach a checkpoint.

use std::{collections::VecDeque, sync::Arc};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::nodes::CombineOp;
use super::{CompiledGraph, GraphError, NodeSpec};
use crate::align::Frame;
use crate::detector::{AlarmEvent, AlarmState, Detector, Outcome, Phase, Scored};

/// How one node's update ended.
#[derive(Debug, Clone, PartialEq)]
pub enum NodeUpdate {
    /// The node took the input; `Some` is its output for this frame
    /// (a detector still collecting frames has none).
    Applied(Option<f64>),
    /// Certainly not applied: the node's state is unchanged.
    Rejected(String),
    /// The node failed after it may have changed its state.
    FatalUncertain(String),
}

/// One node's part in a frame.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum NodeOutcome {
    Applied {
        node: String,
    },
    Rejected {
        node: String,
        reason: String,
    },
    /// An input had no value this frame; the node was not called.
    Skipped {
        node: String,
    },
}

/// A detector node's view of a frame.
#[derive(Debug, Clone, PartialEq)]
pub struct DetectorFrame {
    pub node: String,
    pub phase: Phase,
    pub phase_changed: bool,
    pub scored: Option<Box<Scored>>,
}

/// What reached the alarm sink on a frame.
#[derive(Debug, Clone, PartialEq)]
pub struct SinkOutput {
    pub score: f64,
    pub flagged: bool,
    pub alarm_event: Option<AlarmEvent>,
}

/// Everything a frame did, for the runtime's counters and evidence.
#[derive(Debug, Clone, PartialEq)]
pub struct FrameReport {
    pub ts: DateTime<Utc>,
    /// In execution order.
    pub nodes: Vec<NodeOutcome>,
    pub detectors: Vec<DetectorFrame>,
    pub sink: Option<SinkOutput>,
}

impl FrameReport {
    /// A detector changed phase: a checkpoint trigger.
    pub fn phase_changed(&self) -> bool {
        self.detectors.iter().any(|d| d.phase_changed)
    }

    pub fn rejected(&self) -> impl Iterator<Item = (&str, &str)> {
        self.nodes.iter().filter_map(|n| match n {
            NodeOutcome::Rejected { node, reason } => Some((node.as_str(), reason.as_str())),
            _ => None,
        })
    }
}

/// Why a run was quarantined; stored as the failed run's diagnostics.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FailureDiagnostics {
    pub failed_node: String,
    pub node_type: String,
    pub reason: String,
    /// Source time of the frame during which the node failed.
    pub frame_ts: DateTime<Utc>,
    /// Frames fully applied before the failing one.
    pub frames_applied: u64,
    pub semantics_hash: String,
}

/// The end of an executor: only the diagnostics remain. There is no way
/// back to an executor and no way to export the damaged state.
///
/// What a caller can do with each outcome:
/// ```
/// # use radar::graph::{GraphExecutor, Step};
/// # fn f(executor: GraphExecutor, frame: &radar::align::Frame) {
/// match executor.run_frame(frame) {
///     Step::Advanced { executor, .. } => drop(executor.export_state()),
///     Step::Quarantined(q) => drop(q.diagnostics().failed_node.clone()),
/// }
/// # }
/// ```
/// A quarantined graph cannot run a frame:
/// ```compile_fail
/// # fn f(q: radar::graph::QuarantinedGraph, frame: &radar::align::Frame) {
/// q.run_frame(frame);
/// # }
/// ```
/// nor export its state:
/// ```compile_fail
/// # fn f(q: radar::graph::QuarantinedGraph) {
/// q.export_state();
/// # }
/// ```
/// and the executor that produced it is gone, moved into `run_frame`:
/// ```compile_fail
/// # use radar::graph::{GraphExecutor, Step};
/// # fn f(executor: GraphExecutor, frame: &radar::align::Frame) {
/// if let Step::Quarantined(_) = executor.run_frame(frame) {
///     executor.export_state();
/// }
/// # }
/// ```
#[derive(Debug)]
pub struct QuarantinedGraph {
    diagnostics: FailureDiagnostics,
}

impl QuarantinedGraph {
    pub fn diagnostics(&self) -> &FailureDiagnostics {
        &self.diagnostics
    }

    pub fn into_diagnostics(self) -> FailureDiagnostics {
        self.diagnostics
    }
}

/// The result of offering one frame.
#[derive(Debug)]
pub enum Step {
    /// Every update was applied or certainly rejected; keep going with `executor`.
    Advanced {
        executor: GraphExecutor,
        report: FrameReport,
    },
    /// A node failed uncertainly. The executor is gone.
    Quarantined(QuarantinedGraph),
}

/// A node's mutable state, serializable for snapshots.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum NodeState {
    Stateless,
    Difference { previous: Option<f64> },
    RollingMean { values: VecDeque<f64> },
    Ewma { level: Option<f64> },
    Detector { detector: Box<Detector> },
    Alarm { alarm: AlarmState },
    FailAfter { applied: u64 },
}

/// An executor's exportable state, bound to its revision's semantics.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GraphState {
    pub semantics_hash: String,
    pub frames_applied: u64,
    /// By node id, in declaration order.
    pub nodes: Vec<(String, NodeState)>,
}

/// A graph revision's running state.
#[derive(Debug)]
pub struct GraphExecutor {
    /// Shared, so that moving the executor through every frame stays cheap.
    graph: Arc<CompiledGraph>,
    states: Vec<NodeState>,
    frames_applied: u64,
}

impl GraphExecutor {
    /// Fresh state: detectors start training.
    pub fn new(graph: CompiledGraph) -> Result<Self, GraphError> {
        let mut states = Vec::with_capacity(graph.specs.len());
        for (i, spec) in graph.specs.iter().enumerate() {
            states.push(initial_state(spec, graph.inputs[i].len()).map_err(|e| {
                GraphError::StateMismatch(format!("node {:?}: {e}", graph.definition.nodes[i].id))
            })?);
        }
        Ok(Self {
            graph: Arc::new(graph),
            states,
            frames_applied: 0,
        })
    }

    /// Continues from exported state of the same semantics.
    pub fn restore(graph: CompiledGraph, state: GraphState) -> Result<Self, GraphError> {
        if state.semantics_hash != graph.semantics_hash {
            return Err(GraphError::StateMismatch(format!(
                "the state was exported by semantics {} but this revision is {}",
                state.semantics_hash, graph.semantics_hash
            )));
        }
        let fresh = Self::new(graph)?;
        if state.nodes.len() != fresh.states.len() {
            return Err(GraphError::StateMismatch("node count differs".into()));
        }
        for ((id, restored), (node, initial)) in state
            .nodes
            .iter()
            .zip(fresh.graph.definition.nodes.iter().zip(&fresh.states))
        {
            if *id != node.id || std::mem::discriminant(restored) != std::mem::discriminant(initial)
            {
                return Err(GraphError::StateMismatch(format!(
                    "state for node {id:?} does not fit node {:?}",
                    node.id
                )));
            }
        }
        Ok(Self {
            states: state.nodes.into_iter().map(|(_, s)| s).collect(),
            frames_applied: state.frames_applied,
            graph: fresh.graph,
        })
    }

    pub fn graph(&self) -> &CompiledGraph {
        &self.graph
    }

    pub fn frames_applied(&self) -> u64 {
        self.frames_applied
    }

    /// A copy of the state for a checkpoint.
    pub fn export_state(&self) -> GraphState {
        GraphState {
            semantics_hash: self.graph.semantics_hash.clone(),
            frames_applied: self.frames_applied,
            nodes: self
                .graph
                .definition
                .nodes
                .iter()
                .zip(&self.states)
                .map(|(n, s)| (n.id.clone(), s.clone()))
                .collect(),
        }
    }

    /// Runs every node once, in execution order.
    pub fn run_frame(mut self, frame: &Frame) -> Step {
        let mut outputs: Vec<Option<f64>> = vec![None; self.states.len()];
        let mut report = FrameReport {
            ts: frame.ts,
            nodes: Vec::with_capacity(self.states.len()),
            detectors: Vec::new(),
            sink: None,
        };
        for &i in &self.graph.order {
            let id = self.graph.definition.nodes[i].id.clone();
            let inputs: Option<Vec<f64>> =
                self.graph.inputs[i].iter().map(|&j| outputs[j]).collect();
            let Some(inputs) = inputs else {
                report.nodes.push(NodeOutcome::Skipped { node: id });
                continue;
            };
            let update = match self.graph.reading_index[i] {
                Some(index) => read_value(frame, index, self.graph.definition.readings.len()),
                None => update(
                    &self.graph.specs[i],
                    &mut self.states[i],
                    &inputs,
                    frame.ts,
                    &id,
                    &mut report,
                ),
            };
            match update {
                NodeUpdate::Applied(output) => {
                    outputs[i] = output;
                    report.nodes.push(NodeOutcome::Applied { node: id });
                }
                NodeUpdate::Rejected(reason) => {
                    report
                        .nodes
                        .push(NodeOutcome::Rejected { node: id, reason });
                }
                NodeUpdate::FatalUncertain(reason) => {
                    let diagnostics = FailureDiagnostics {
                        node_type: self.graph.specs[i].type_name().to_string(),
                        failed_node: id,
                        reason,
                        frame_ts: frame.ts,
                        frames_applied: self.frames_applied,
                        semantics_hash: self.graph.semantics_hash.clone(),
                    };
                    // `self` (and every node's possibly damaged state) is
                    // dropped here, unexported.
                    return Step::Quarantined(QuarantinedGraph { diagnostics });
                }
            }
        }
        self.frames_applied += 1;
        Step::Advanced {
            executor: self,
            report,
        }
    }
}

fn initial_state(spec: &NodeSpec, inputs: usize) -> Result<NodeState, String> {
    Ok(match spec {
        NodeSpec::Reading(_) | NodeSpec::Scale(_) | NodeSpec::Combine(_) => NodeState::Stateless,
        NodeSpec::Difference(_) => NodeState::Difference { previous: None },
        NodeSpec::RollingMean(p) => NodeState::RollingMean {
            values: VecDeque::with_capacity(p.window),
        },
        NodeSpec::Ewma(_) => NodeState::Ewma { level: None },
        NodeSpec::Detector(settings) => NodeState::Detector {
            detector: Box::new(Detector::new(settings.clone(), inputs).map_err(|e| e.to_string())?),
        },
        NodeSpec::Alarm(p) => NodeState::Alarm {
            alarm: AlarmState::new(p.rule.clone()),
        },
        #[cfg(feature = "fault-injection")]
        NodeSpec::FailAfter(_) => NodeState::FailAfter { applied: 0 },
    })
}

fn read_value(frame: &Frame, index: usize, width: usize) -> NodeUpdate {
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
fn update(
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
            let dropped = if values.len() == p.window {
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
        (NodeSpec::Alarm(p), NodeState::Alarm { alarm }) => match finite(first, "the score") {
            Ok(score) => {
                let flagged = score >= p.threshold;
                let alarm_event = alarm.observe(ts, flagged, score);
                report.sink = Some(SinkOutput {
                    score,
                    flagged,
                    alarm_event,
                });
                return NodeUpdate::Applied(None);
            }
            Err(rejected) => return rejected,
        },
        #[cfg(feature = "fault-injection")]
        (NodeSpec::FailAfter(p), NodeState::FailAfter { applied }) => {
            use super::nodes::FailMode;
            if *applied < p.updates {
                *applied += 1;
                Ok(first)
            } else {
                return match p.mode {
                    FailMode::Rejected => NodeUpdate::Rejected(format!(
                        "injected rejection after {} updates",
                        p.updates
                    )),
                    FailMode::Uncertain => {
                        // The state moves before the failure surfaces, as
                        // it would in a node that fails half-way.
                        *applied += 1;
                        NodeUpdate::FatalUncertain(format!(
                            "injected uncertain failure after {} updates",
                            p.updates
                        ))
                    }
                };
            }
        }
        (spec, state) => {
            // Compile and restore pair every spec with its own state kind.
            return NodeUpdate::FatalUncertain(format!(
                "a {} node holds {} state",
                spec.type_name(),
                serde_json::to_value(&*state)
                    .ok()
                    .and_then(|v| v.get("kind").and_then(|k| k.as_str()).map(str::to_string))
                    .unwrap_or_default()
            ));
        }
    };
    match result {
        Ok(value) => NodeUpdate::Applied(Some(value)),
        Err(rejected) => rejected,
    }
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
            let ratio = scored.score / scored.threshold;
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
