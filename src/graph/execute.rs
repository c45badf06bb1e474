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

use super::update::{initial_state, read_value, update};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::{CompiledGraph, GraphError};
use crate::align::Frame;
use crate::detector::{AlarmEvent, AlarmState, Detector, Phase, Scored};

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
    /// The sink's threshold: `flagged` is `score >= threshold`.
    pub threshold: f64,
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
            let inputs: Vec<String> = graph.inputs[i]
                .iter()
                .map(|&j| graph.definition.nodes[j].id.clone())
                .collect();
            states.push(initial_state(spec, &inputs).map_err(|e| {
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

    /// Every alarm and detector node numbers its next alarm after `seq`
    /// at least (see [`AlarmState::continue_after`]).
    pub fn continue_alarms_after(&mut self, seq: u64) {
        for state in &mut self.states {
            match state {
                NodeState::Alarm { alarm } => alarm.continue_after(seq),
                NodeState::Detector { detector } => detector.continue_alarms_after(seq),
                _ => {}
            }
        }
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
