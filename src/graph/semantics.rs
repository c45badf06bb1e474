//! The executable-semantics hash of a graph and the per-node diff between
//! two revisions. Layout (positions, labels, colors), the graph's name and
//! description, and the order nodes are listed in never count; readings,
//! alignment, node ids, types, parameters and each node's inputs (in input
//! order) do.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use uuid::Uuid;

use super::{CompiledGraph, GraphDefinition, GraphReading, NodeSpec};
use crate::align::AlignmentPolicy;

/// What binds a run's service (and so its snapshots) to a graph revision.
/// Only `semantics_hash` enters the monitor's config fingerprint; the rest
/// says where the run came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GraphBinding {
    pub graph_id: Uuid,
    pub graph: String,
    pub revision: i32,
    pub run_id: Uuid,
    pub semantics_hash: String,
}

#[derive(Serialize)]
struct GraphSemantics<'a> {
    readings: &'a [GraphReading],
    alignment: &'a AlignmentPolicy,
    /// Sorted by id.
    nodes: Vec<NodeSemantics<'a>>,
}

#[derive(Serialize)]
struct NodeSemantics<'a> {
    id: &'a str,
    spec: &'a NodeSpec,
    inputs: Vec<&'a str>,
}

fn node_semantics<'a>(
    definition: &'a GraphDefinition,
    specs: &'a [NodeSpec],
    inputs: &'a [Vec<usize>],
) -> Vec<NodeSemantics<'a>> {
    let mut nodes: Vec<NodeSemantics<'a>> = definition
        .nodes
        .iter()
        .zip(specs)
        .zip(inputs)
        .map(|((node, spec), inputs)| NodeSemantics {
            id: node.id.as_str(),
            spec,
            inputs: inputs
                .iter()
                .map(|&i| definition.nodes[i].id.as_str())
                .collect(),
        })
        .collect();
    nodes.sort_by(|a, b| a.id.cmp(b.id));
    nodes
}

/// Hex SHA-256 over the canonical JSON of the semantics. serde_json writes
/// struct fields in declaration order and floats in their shortest exact
/// form, and parameters are re-serialized from their typed form, so
/// `1` and `1.0`, or a missing default and its explicit value, hash alike.
pub(super) fn semantics_hash(
    definition: &GraphDefinition,
    specs: &[NodeSpec],
    inputs: &[Vec<usize>],
) -> String {
    let semantics = GraphSemantics {
        readings: &definition.readings,
        alignment: &definition.alignment,
        nodes: node_semantics(definition, specs, inputs),
    };
    hex_sha256(&serde_json::to_vec(&semantics).unwrap_or_default())
}

fn hex_sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// How one node differs between two revisions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeChangeKind {
    Added,
    Removed,
    /// Type, parameters or inputs changed.
    Changed,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NodeChange {
    pub node: String,
    pub change: NodeChangeKind,
}

/// What publishing `new` over `old` does to runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SemanticDiff {
    pub old_hash: String,
    pub new_hash: String,
    pub readings_changed: bool,
    pub alignment_changed: bool,
    /// Nodes whose semantics changed, by id.
    pub nodes: Vec<NodeChange>,
}

impl SemanticDiff {
    /// Only layout (or name/description) changed: snapshots stay valid.
    pub fn is_layout_only(&self) -> bool {
        self.old_hash == self.new_hash
    }
}

/// Compares two compiled revisions node by node.
pub fn diff(old: &CompiledGraph, new: &CompiledGraph) -> SemanticDiff {
    let digests = |g: &CompiledGraph| -> Vec<(String, String)> {
        node_semantics(&g.definition, &g.specs, &g.inputs)
            .iter()
            .map(|n| {
                (
                    n.id.to_string(),
                    hex_sha256(&serde_json::to_vec(n).unwrap_or_default()),
                )
            })
            .collect()
    };
    let before: std::collections::BTreeMap<String, String> = digests(old).into_iter().collect();
    let after: std::collections::BTreeMap<String, String> = digests(new).into_iter().collect();
    let mut nodes = Vec::new();
    for (id, digest) in &after {
        match before.get(id) {
            None => nodes.push(NodeChange {
                node: id.clone(),
                change: NodeChangeKind::Added,
            }),
            Some(old) if old != digest => nodes.push(NodeChange {
                node: id.clone(),
                change: NodeChangeKind::Changed,
            }),
            Some(_) => {}
        }
    }
    for id in before.keys().filter(|id| !after.contains_key(*id)) {
        nodes.push(NodeChange {
            node: id.clone(),
            change: NodeChangeKind::Removed,
        });
    }
    nodes.sort_by(|a, b| a.node.cmp(&b.node));
    SemanticDiff {
        old_hash: old.semantics_hash.clone(),
        new_hash: new.semantics_hash.clone(),
        readings_changed: old.definition.readings != new.definition.readings,
        alignment_changed: old.definition.alignment != new.definition.alignment,
        nodes,
    }
}
