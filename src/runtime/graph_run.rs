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

/// A graph run inside a [`super::MonitorCore`].
#[derive(Debug)]
pub(super) struct GraphRun {
    bound: BoundGraph,
    /// `None` once quarantined: the executor was consumed by the failing frame.
    executor: Option<GraphExecutor>,
    failure: Option<FailureDiagnostics>,
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
            executor: Some(executor),
            failure: None,
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
        self.failure.as_ref()
    }

    pub(super) fn frames_applied(&self) -> Option<u64> {
        self.executor.as_ref().map(GraphExecutor::frames_applied)
    }

    /// See [`GraphExecutor::continue_alarms_after`]; nothing once quarantined.
    pub fn continue_alarms_after(&mut self, seq: u64) {
        if let Some(executor) = &mut self.executor {
            executor.continue_alarms_after(seq);
        }
    }

    /// Runs every node once. The executor is moved through the frame and
    /// only comes back when no node failed uncertainly.
    pub(super) fn offer(&mut self, frame: &Frame) -> GraphFrame {
        let Some(executor) = self.executor.take() else {
            return GraphFrame::Refused;
        };
        match executor.run_frame(frame) {
            crate::graph::Step::Advanced { executor, report } => {
                self.executor = Some(executor);
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
                self.failure = Some(diagnostics.clone());
                GraphFrame::Quarantined(diagnostics)
            }
        }
    }

    /// The snapshot's graph part; `None` once quarantined, because the
    /// damaged state is gone with the executor.
    pub(super) fn checkpoint(&self) -> Option<GraphCheckpoint> {
        self.executor.as_ref().map(|executor| GraphCheckpoint {
            bound: self.bound.clone(),
            state: executor.export_state(),
        })
    }
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
