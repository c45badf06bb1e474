//! The checks on nodes and edges: ids, edges between existing nodes, each
//! node's type and parameters, matching ports, reading nodes that name the
//! graph's readings, every output used, exactly one alarm sink.

use std::collections::{HashMap, HashSet};

use super::node_field;
use crate::config::FieldError;
use crate::graph::{GraphDefinition, NodeSpec, Port};

/// Node ids: 1 to 64 bytes, unique; layouts finite. Returns id -> index.
pub(super) fn check_node_ids<'a>(
    definition: &'a GraphDefinition,
    errors: &mut Vec<FieldError>,
) -> HashMap<&'a str, usize> {
    let mut ids: HashMap<&str, usize> = HashMap::new();
    for (i, node) in definition.nodes.iter().enumerate() {
        if node.id.trim().is_empty() || node.id.len() > 64 {
            errors.push(FieldError::new(
                format!("nodes[{i}].id"),
                "must be 1 to 64 bytes, not blank",
            ));
        } else if ids.insert(node.id.as_str(), i).is_some() {
            errors.push(FieldError::new(
                node_field(&node.id, "id"),
                format!("duplicate node id {:?}", node.id),
            ));
        }
        if !(node.layout.x.is_finite() && node.layout.y.is_finite()) {
            errors.push(FieldError::new(
                node_field(&node.id, "layout"),
                "x and y must be finite",
            ));
        }
    }
    ids
}

/// Edges between existing nodes, each once. Returns per node its inputs (in
/// edge order) and how many nodes consume its output.
pub(super) fn wire_edges(
    definition: &GraphDefinition,
    ids: &HashMap<&str, usize>,
    errors: &mut Vec<FieldError>,
) -> (Vec<Vec<usize>>, Vec<usize>) {
    let mut inputs: Vec<Vec<usize>> = vec![Vec::new(); definition.nodes.len()];
    let mut consumers = vec![0usize; definition.nodes.len()];
    let mut seen_edges = HashSet::new();
    for (i, edge) in definition.edges.iter().enumerate() {
        let from = ids.get(edge.from.as_str()).copied();
        let to = ids.get(edge.to.as_str()).copied();
        for (end, id) in [(from, &edge.from), (to, &edge.to)] {
            if end.is_none() {
                errors.push(FieldError::new(
                    format!("edges[{i}]"),
                    format!("names node {id:?}, which does not exist"),
                ));
            }
        }
        if let (Some(from), Some(to)) = (from, to) {
            if !seen_edges.insert((from, to)) {
                errors.push(FieldError::new(
                    format!("edges[{i}]"),
                    format!("duplicate edge {} -> {}", edge.from, edge.to),
                ));
                continue;
            }
            inputs[to].push(from);
            consumers[from] += 1;
        }
    }
    (inputs, consumers)
}

/// Each node's type and parameters (`None` where they do not parse); a
/// detector's change readings must name its input nodes.
pub(super) fn parse_specs(
    definition: &GraphDefinition,
    inputs: &[Vec<usize>],
    errors: &mut Vec<FieldError>,
) -> Vec<Option<NodeSpec>> {
    let mut specs = Vec::with_capacity(definition.nodes.len());
    for (i, node) in definition.nodes.iter().enumerate() {
        match NodeSpec::parse(&node.node_type, &node.params) {
            Ok(spec) => {
                let prefix = node_field(&node.id, "params");
                errors.extend(spec.validate(&prefix, inputs[i].len()));
                if let NodeSpec::Detector(settings) = &spec {
                    // Change readings name the detector's input nodes.
                    for name in settings.change.iter().flat_map(|c| &c.readings) {
                        if !inputs[i].iter().any(|&j| &definition.nodes[j].id == name) {
                            errors.push(FieldError::new(
                                format!("{prefix}.change.readings"),
                                format!("{name:?} is not an input node of this detector"),
                            ));
                        }
                    }
                }
                specs.push(Some(spec));
            }
            Err(e) => {
                errors.push(FieldError::new(node_field(&node.id, "type"), e));
                specs.push(None);
            }
        }
    }
    specs
}

/// The parsed nodes and the edges between them.
pub(super) struct Wiring<'a> {
    pub(super) definition: &'a GraphDefinition,
    pub(super) specs: &'a [Option<NodeSpec>],
    pub(super) inputs: &'a [Vec<usize>],
    pub(super) consumers: &'a [usize],
}

impl Wiring<'_> {
    /// Ports that match, reading nodes that name the graph's readings (each
    /// reading used), every output consumed, exactly one alarm sink.
    /// Returns per node the frame index of its reading.
    pub(super) fn check_nodes(
        &self,
        readings: &HashMap<&str, usize>,
        errors: &mut Vec<FieldError>,
    ) -> Vec<Option<usize>> {
        let Self {
            definition,
            specs,
            inputs,
            consumers,
        } = *self;
        let mut reading_index = vec![None; definition.nodes.len()];
        let mut used_readings = HashSet::new();
        let mut sinks = Vec::new();
        for (i, node) in definition.nodes.iter().enumerate() {
            let Some(spec) = &specs[i] else { continue };
            check_ports(
                node.id.as_str(),
                spec,
                &inputs[i],
                specs,
                definition,
                errors,
            );
            if let NodeSpec::Reading(p) = spec {
                match readings.get(p.reading.as_str()) {
                    Some(&index) => {
                        reading_index[i] = Some(index);
                        used_readings.insert(index);
                    }
                    None => errors.push(FieldError::new(
                        node_field(&node.id, "params.reading"),
                        format!("{:?} is not one of the graph's readings", p.reading),
                    )),
                }
            }
            match spec.output() {
                None => sinks.push(node.id.as_str()),
                Some(_) if consumers[i] == 0 => errors.push(FieldError::new(
                    node_field(&node.id, "edges"),
                    "its output is not used by any node",
                )),
                Some(_) => {}
            }
        }
        if sinks.len() != 1 {
            errors.push(FieldError::new(
                "nodes",
                format!(
                    "a graph needs exactly one alarm sink, found {}",
                    sinks.len()
                ),
            ));
        }
        for (index, reading) in definition.readings.iter().enumerate() {
            if !used_readings.contains(&index) {
                errors.push(FieldError::new(
                    format!("readings.{}", reading.name),
                    "no reading node uses it; remove it or add a source node",
                ));
            }
        }
        reading_index
    }
}

fn check_ports(
    id: &str,
    spec: &NodeSpec,
    inputs: &[usize],
    specs: &[Option<NodeSpec>],
    definition: &GraphDefinition,
    errors: &mut Vec<FieldError>,
) {
    let wanted = spec.inputs();
    if inputs.len() < wanted.min || inputs.len() > wanted.max {
        let expected = match (wanted.min, wanted.max) {
            (0, 0) => "no inputs".to_string(),
            (a, b) if a == b => format!("exactly {a} input"),
            (a, _) => format!("at least {a} input"),
        };
        errors.push(FieldError::new(
            node_field(id, "edges"),
            format!(
                "a {} node takes {expected}, it has {}",
                spec.type_name(),
                inputs.len()
            ),
        ));
    }
    let Some(port) = wanted.port else { return };
    for &from in inputs {
        let Some(source) = &specs[from] else { continue };
        let got = source.output();
        if got != Some(port) {
            errors.push(FieldError::new(
                node_field(id, "edges"),
                format!(
                    "a {} node takes {} inputs, but {:?} gives {}",
                    spec.type_name(),
                    port.as_str(),
                    definition.nodes[from].id,
                    got.map_or("nothing", Port::as_str)
                ),
            ));
        }
    }
}
