//! A graph file as an author writes it: readings, alignment, nodes with
//! their parameters and editor layout, and edges. Parsing only; the checks
//! that make a definition executable live in `compile`.

use serde::{Deserialize, Serialize};

use super::GraphError;
use crate::align::AlignmentPolicy;

/// Longest accepted graph name; run services are named after it.
pub const MAX_GRAPH_NAME_LEN: usize = 96;

/// A graph definition exactly as published (layout included).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GraphDefinition {
    /// Names the graph across revisions. Not part of the semantics hash.
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The sensor readings the graph's source nodes may name, one MQTT topic each.
    pub readings: Vec<GraphReading>,
    /// How observations of the readings are aligned into frames.
    pub alignment: AlignmentPolicy,
    pub nodes: Vec<NodeDefinition>,
    #[serde(default)]
    pub edges: Vec<Edge>,
}

/// One reading a source node can name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GraphReading {
    pub name: String,
    pub topic: String,
}

/// One node: its id, its type, the type's parameters and where an editor
/// draws it. Parameters stay raw JSON here so that a wrong parameter is
/// reported against the node that carries it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeDefinition {
    pub id: String,
    #[serde(rename = "type")]
    pub node_type: String,
    #[serde(default = "empty_params")]
    pub params: serde_json::Value,
    pub layout: Layout,
}

fn empty_params() -> serde_json::Value {
    serde_json::Value::Object(serde_json::Map::new())
}

/// Editor-only presentation of a node; never part of the semantics.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Layout {
    pub x: f64,
    pub y: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub color: Option<String>,
}

/// Data flows from the `from` node's output into the `to` node's input.
/// For nodes with several inputs (detector, combiner) the order of their
/// incoming edges in this list is the order of their inputs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Edge {
    pub from: String,
    pub to: String,
}

impl GraphDefinition {
    /// Parses a graph file's JSON text (no semantic checks yet).
    pub fn from_json_str(text: &str) -> Result<Self, GraphError> {
        serde_json::from_str(text).map_err(|e| GraphError::Parse(e.to_string()))
    }

    /// Parses the stored JSON form.
    pub fn from_json(value: serde_json::Value) -> Result<Self, GraphError> {
        serde_json::from_value(value).map_err(|e| GraphError::Parse(e.to_string()))
    }

    pub fn node(&self, id: &str) -> Option<&NodeDefinition> {
        self.nodes.iter().find(|n| n.id == id)
    }
}
