//! Graphs: DAGs of typed nodes (reading sources, transforms, detectors,
//! combiners, one alarm sink) that a monitor can run instead of a single
//! detector. Pure code: definitions, checks, the semantics hash and the
//! executor. `crate::store::graphs` keeps revisions and runs in PostgreSQL.
//!
//! # Layout
//! - `definition`: the JSON an author writes (layout included).
//! - `nodes`: node types, typed parameters, ports, parameter ranges.
//! - `compile`: validation into an executable [`CompiledGraph`].
//! - `semantics`: the executable-semantics hash, the per-node diff and the
//!   [`GraphBinding`] a run's monitor carries.
//! - `execute`: [`GraphExecutor`], node update outcomes and quarantine.
//! - `update`: each node type's update.
//!
//! # Running a graph run in a worker
//! A monitor whose config carries a [`GraphBinding`] is a graph run;
//! `radar-actors` (monitor startup, model and checkpoint actors) runs it so:
//! 1. `GraphStore::compiled_for(&binding)`, then `GraphStore::admit(binding.run_id,
//!    service_id)`; anything but `Admitted` ends the monitor without touching
//!    its snapshot.
//! 2. `MonitorCore::fresh_graph`, or `MonitorCore::restore_graph` from the
//!    snapshot's graph state ([`GraphExecutor::new`] / [`GraphExecutor::restore`]).
//! 3. Per frame `executor.run_frame(&frame)`: `Step::Advanced` hands the
//!    executor back with its report, `Step::Quarantined` does not.
//! 4. On `Quarantined`: no more frames, no checkpoint (shutdown included);
//!    `GraphStore::record_failure_retrying(run, service, writer tokens,
//!    q.diagnostics(), timeout, stop)` until it settles or an explicit stop.

mod compile;
mod definition;
mod execute;
mod nodes;
mod semantics;
mod update;

#[cfg(all(feature = "fault-injection", not(debug_assertions)))]
compile_error!(
    "the fault-injection feature adds a node that fails on demand; it is for tests only \
     and must never be enabled in a release build"
);

pub use compile::CompiledGraph;
pub use definition::{
    Edge, GraphDefinition, GraphReading, Layout, MAX_GRAPH_NAME_LEN, NodeDefinition,
};
pub use execute::{
    DetectorFrame, FailureDiagnostics, FrameReport, GraphExecutor, GraphState, NodeOutcome,
    NodeState, NodeUpdate, QuarantinedGraph, SinkOutput, Step,
};
pub use nodes::{
    AlarmParams, CombineOp, CombineParams, EwmaParams, Inputs, MAX_ROLLING_WINDOW, NoParams,
    NodeSpec, Port, ReadingParams, RollingMeanParams, ScaleParams,
};
#[cfg(feature = "fault-injection")]
pub use nodes::{FailAfterParams, FailMode};
pub use semantics::{GraphBinding, NodeChange, NodeChangeKind, SemanticDiff, diff};

use crate::config::FieldErrors;

/// The launch contract this binary implements: how a run's service, its
/// binding and its snapshot are laid out. A run records the contract it was
/// activated under; a binary refuses runs of any other contract.
pub const LAUNCH_CONTRACT_VERSION: i32 = 1;

/// The version of the node types' arithmetic and state. A graph run's
/// snapshot records it among its runtime versions, so a binary whose nodes
/// compute differently refuses to restore it. Bump on any such change.
pub const NODES_VERSION: u32 = 1;

#[derive(Debug, thiserror::Error)]
pub enum GraphError {
    #[error("the graph file is not a valid graph definition: {0}")]
    Parse(String),
    #[error("invalid graph: {0}")]
    Invalid(FieldErrors),
    #[error("graph state does not fit this revision: {0}")]
    StateMismatch(String),
}

#[cfg(test)]
pub(crate) mod tests;
