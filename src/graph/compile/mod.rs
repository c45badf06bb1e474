//! The checks that turn a definition into an executable graph: unique ids,
//! known node types with parameters in range, edges between existing nodes
//! whose ports match, no cycle, exactly one alarm sink, every reading
//! resolved to a topic. Every error names the node (or reading) concerned.
//!
//! This file holds the compiled graph and the checks on the definition as
//! a whole (name, readings); `wiring` checks nodes and edges, `order` finds
//! the execution order.

mod order;
mod wiring;

use std::collections::HashMap;

use self::order::execution_order;
use self::wiring::{Wiring, check_node_ids, parse_specs, wire_edges};
use super::{GraphDefinition, GraphError, NodeSpec};
use crate::config::{FieldError, FieldErrors, MonitorConfig, ReadingConfig};

/// A definition that passed every check, with its nodes in execution order.
#[derive(Debug, Clone, PartialEq)]
pub struct CompiledGraph {
    pub(super) definition: GraphDefinition,
    /// Node indexes (into `definition.nodes`) in a topological order.
    pub(super) order: Vec<usize>,
    pub(super) specs: Vec<NodeSpec>,
    /// Per node, the indexes of its input nodes in input order.
    pub(super) inputs: Vec<Vec<usize>>,
    /// Per reading source node, the index of its reading in the frame.
    pub(super) reading_index: Vec<Option<usize>>,
    pub(super) semantics_hash: String,
}

impl CompiledGraph {
    /// Checks a definition; all problems are reported at once.
    pub fn compile(definition: GraphDefinition) -> Result<Self, GraphError> {
        let mut errors = Vec::new();
        check_name(&definition, &mut errors);
        let readings = check_readings(&definition, &mut errors);
        errors.extend(definition.alignment.validate("alignment"));
        let ids = check_node_ids(&definition, &mut errors);
        let (inputs, consumers) = wire_edges(&definition, &ids, &mut errors);
        let specs = parse_specs(&definition, &inputs, &mut errors);
        let wiring = Wiring {
            definition: &definition,
            specs: &specs,
            inputs: &inputs,
            consumers: &consumers,
        };
        let reading_index = wiring.check_nodes(&readings, &mut errors);
        let order = execution_order(&definition, &inputs, &mut errors);
        if !errors.is_empty() {
            return Err(GraphError::Invalid(FieldErrors(errors)));
        }
        let specs: Vec<NodeSpec> = specs.into_iter().flatten().collect();
        let semantics_hash = super::semantics::semantics_hash(&definition, &specs, &inputs);
        Ok(Self {
            definition,
            order,
            specs,
            inputs,
            reading_index,
            semantics_hash,
        })
    }

    /// Parses and compiles a graph file's JSON text.
    pub fn from_json_str(text: &str) -> Result<Self, GraphError> {
        Self::compile(GraphDefinition::from_json_str(text)?)
    }

    pub fn definition(&self) -> &GraphDefinition {
        &self.definition
    }

    /// Lower-case hex SHA-256 of the executable semantics (layout excluded).
    pub fn semantics_hash(&self) -> &str {
        &self.semantics_hash
    }

    /// The readings resolved to their topics, in frame order.
    pub fn resolved_readings(&self) -> Vec<ReadingConfig> {
        self.definition
            .readings
            .iter()
            .map(|r| ReadingConfig {
                name: r.name.clone(),
                topic: r.topic.clone(),
                required: true,
            })
            .collect()
    }

    /// The threshold of the graph's alarm node: a frame is flagged when the
    /// score it receives reaches it. `None` for a graph without one.
    pub fn alarm_threshold(&self) -> Option<f64> {
        self.specs.iter().find_map(|s| match s {
            NodeSpec::Alarm(alarm) => Some(alarm.threshold),
            _ => None,
        })
    }

    /// The monitor a run of this graph is: its readings and alignment, the
    /// first detector node's settings, and the binding whose semantics hash
    /// enters the config fingerprint, so a snapshot of one revision restores
    /// into another only when both compute the same numbers.
    pub fn monitor_config(
        &self,
        service_name: String,
        binding: super::GraphBinding,
    ) -> MonitorConfig {
        let detector = self
            .specs
            .iter()
            .find_map(|s| match s {
                NodeSpec::Detector(settings) => Some(settings.clone()),
                _ => None,
            })
            .unwrap_or_default();
        MonitorConfig {
            name: service_name,
            description: Some(format!(
                "Run of graph {:?} revision {}",
                binding.graph, binding.revision
            )),
            readings: self.resolved_readings(),
            alignment: self.definition.alignment.clone(),
            detector,
            graph: Some(binding),
            payload: None,
        }
    }
}

/// The field name for something wrong with a node.
pub(super) fn node_field(id: &str, what: &str) -> String {
    format!("nodes.{id}.{what}")
}

fn check_name(definition: &GraphDefinition, errors: &mut Vec<FieldError>) {
    let name = definition.name.as_str();
    if name.trim().is_empty() || name.trim() != name || name.len() > super::MAX_GRAPH_NAME_LEN {
        errors.push(FieldError::new(
            "name",
            format!(
                "must be 1 to {} bytes without surrounding spaces",
                super::MAX_GRAPH_NAME_LEN
            ),
        ));
    }
}

/// Reading names to their frame index; reports duplicates and bad topics.
fn check_readings<'a>(
    definition: &'a GraphDefinition,
    errors: &mut Vec<FieldError>,
) -> HashMap<&'a str, usize> {
    if definition.readings.is_empty() {
        errors.push(FieldError::new(
            "readings",
            "a graph needs at least one reading",
        ));
    }
    // The monitor's own checks cover topics (wildcards, system topics,
    // duplicates); reuse them on the readings alone.
    let probe = MonitorConfig {
        name: "probe".into(),
        description: None,
        readings: definition
            .readings
            .iter()
            .map(|r| ReadingConfig {
                name: r.name.clone(),
                topic: r.topic.clone(),
                required: true,
            })
            .collect(),
        alignment: definition.alignment.clone(),
        detector: Default::default(),
        graph: None,
        payload: None,
    };
    if let Err(FieldErrors(found)) = probe.validate() {
        errors.extend(
            found
                .into_iter()
                .filter(|e| e.field.starts_with("readings[")),
        );
    }
    definition
        .readings
        .iter()
        .enumerate()
        .map(|(i, r)| (r.name.as_str(), i))
        .collect()
}
