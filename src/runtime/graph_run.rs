//! The graph side of a monitor that executes a graph run: its executor, or,
//! once a node failed uncertainly, only the failure's diagnostics.
//!
//! Quarantine is a state without an executor: there is nothing left that
//! could run a frame or be exported into a snapshot.

use crate::{
    align::Frame,
    detector::Phase,
    graph::{CompiledGraph, FailureDiagnostics, FrameReport, GraphExecutor, GraphState, NodeState},
    snapshot::{BoundGraph, GraphCheckpoint},
};

/// What offering one frame to the graph did.
#[derive(Debug)]
pub(super) enum GraphFrame {
    /// Every node applied or certainly rejected its update.
    Advanced(FrameReport),
    /// A node failed uncertainly on this frame: the run is quarantined now.
    Quarantined(FailureDiagnostics),
    /// The run was quarantined before; the graph was not called.
    Refused,
}

/// Whether the run can still execute frames. A quarantined run holds only
/// its failure: the executor was consumed by the failing frame.
#[derive(Debug)]
enum Stage {
    Running(GraphExecutor),
    Quarantined(FailureDiagnostics),
}

/// A graph run inside a [`super::MonitorCore`].
#[derive(Debug)]
pub(super) struct GraphRun {
    bound: BoundGraph,
    stage: Stage,
    /// Each detector node's phase, in declaration order, as last reported.
    phases: Vec<(String, Phase)>,
}

impl GraphRun {
    pub(super) fn fresh(graph: CompiledGraph, bound: BoundGraph) -> Result<Self, String> {
        let executor = GraphExecutor::new(graph).map_err(|e| e.to_string())?;
        Ok(Self::running(executor, bound))
    }

    pub(super) fn restore(
        graph: CompiledGraph,
        bound: BoundGraph,
        state: GraphState,
    ) -> Result<Self, String> {
        let executor = GraphExecutor::restore(graph, state).map_err(|e| e.to_string())?;
        Ok(Self::running(executor, bound))
    }

    fn running(executor: GraphExecutor, bound: BoundGraph) -> Self {
        let phases = executor
            .export_state()
            .nodes
            .into_iter()
            .filter_map(|(id, state)| match state {
                NodeState::Detector { detector } => Some((id, detector.phase())),
                _ => None,
            })
            .collect();
        Self {
            bound,
            stage: Stage::Running(executor),
            phases,
        }
    }

    /// The least advanced detector node's phase: the graph monitors only
    /// once every detector does. A graph without detectors monitors at once.
    pub(super) fn phase(&self) -> Phase {
        self.phases
            .iter()
            .map(|(_, phase)| *phase)
            .min_by_key(|phase| rank(*phase))
            .unwrap_or(Phase::Monitoring)
    }

    pub(super) fn failure(&self) -> Option<&FailureDiagnostics> {
        match &self.stage {
            Stage::Running(_) => None,
            Stage::Quarantined(diagnostics) => Some(diagnostics),
        }
    }

    pub(super) fn frames_applied(&self) -> Option<u64> {
        match &self.stage {
            Stage::Running(executor) => Some(executor.frames_applied()),
            Stage::Quarantined(_) => None,
        }
    }

    /// See [`GraphExecutor::continue_alarms_after`]; nothing once quarantined.
    pub fn continue_alarms_after(&mut self, seq: u64) {
        if let Stage::Running(executor) = &mut self.stage {
            executor.continue_alarms_after(seq);
        }
    }

    /// Runs every node once. The executor is moved through the frame and
    /// only comes back when no node failed uncertainly.
    ///
    /// While the frame runs the run counts as quarantined by an interrupted
    /// frame: should the executor panic, the nodes' state is uncertain and
    /// the run must never execute or export it again.
    pub(super) fn offer(&mut self, frame: &Frame) -> GraphFrame {
        let executor = match std::mem::replace(&mut self.stage, interrupted(frame)) {
            Stage::Running(executor) => executor,
            quarantined @ Stage::Quarantined(_) => {
                self.stage = quarantined;
                return GraphFrame::Refused;
            }
        };
        match executor.run_frame(frame) {
            crate::graph::Step::Advanced { executor, report } => {
                self.stage = Stage::Running(executor);
                for detector in &report.detectors {
                    if let Some(entry) = self.phases.iter_mut().find(|(id, _)| *id == detector.node)
                    {
                        entry.1 = detector.phase;
                    }
                }
                GraphFrame::Advanced(report)
            }
            crate::graph::Step::Quarantined(quarantined) => {
                let diagnostics = quarantined.into_diagnostics();
                self.stage = Stage::Quarantined(diagnostics.clone());
                GraphFrame::Quarantined(diagnostics)
            }
        }
    }

    /// The snapshot's graph part; `None` once quarantined, because the
    /// damaged state is gone with the executor.
    pub(super) fn checkpoint(&self) -> Option<GraphCheckpoint> {
        match &self.stage {
            Stage::Running(executor) => Some(GraphCheckpoint {
                bound: self.bound.clone(),
                state: executor.export_state(),
            }),
            Stage::Quarantined(_) => None,
        }
    }
}

/// The stage a run is in while a frame executes: only observable if the
/// executor panicked half-way through the frame.
fn interrupted(frame: &Frame) -> Stage {
    Stage::Quarantined(FailureDiagnostics {
        failed_node: String::new(),
        node_type: String::new(),
        reason: String::from("a graph frame was interrupted before every node finished"),
        frame_ts: frame.ts,
        frames_applied: 0,
        semantics_hash: String::new(),
    })
}

fn rank(phase: Phase) -> u8 {
    match phase {
        Phase::Training => 0,
        Phase::Calibrating => 1,
        Phase::Fitting => 2,
        Phase::Monitoring => 3,
    }
}

#[cfg(test)]
mod tests;
