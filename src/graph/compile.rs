//! The checks that turn a definition into an executable graph: unique ids,
//! known node types with parameters in range, edges between existing nodes
//! whose ports match, no cycle, exactly one alarm sink, every reading
//! resolved to a topic. Every error names the node (or reading) concerned.

use std::collections::{HashMap, HashSet};

use super::{GraphDefinition, GraphError, NodeSpec, Port};
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

/// Node ids: 1 to 64 bytes, unique; layouts finite. Returns id -> index.
fn check_node_ids<'a>(
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
fn wire_edges(
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
fn parse_specs(
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
struct Wiring<'a> {
    definition: &'a GraphDefinition,
    specs: &'a [Option<NodeSpec>],
    inputs: &'a [Vec<usize>],
    consumers: &'a [usize],
}

impl Wiring<'_> {
    /// Ports that match, reading nodes that name the graph's readings (each
    /// reading used), every output consumed, exactly one alarm sink.
    /// Returns per node the frame index of its reading.
    fn check_nodes(
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

/// The nodes in a topological order, or an error naming a cycle.
fn execution_order(
    definition: &GraphDefinition,
    inputs: &[Vec<usize>],
    errors: &mut Vec<FieldError>,
) -> Vec<usize> {
    match topological_order(inputs) {
        Ok(order) => order,
        Err(cycle) => {
            let names: Vec<&str> = cycle
                .iter()
                .map(|&i| definition.nodes[i].id.as_str())
                .collect();
            errors.push(FieldError::new(
                node_field(names.first().copied().unwrap_or(""), "edges"),
                format!("the graph has a cycle through {}", names.join(", ")),
            ));
            Vec::new()
        }
    }
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

/// Kahn's algorithm, ties broken by declaration order so the execution order
/// is a function of the definition. On a cycle, returns the nodes left over.
fn topological_order(inputs: &[Vec<usize>]) -> Result<Vec<usize>, Vec<usize>> {
    let n = inputs.len();
    let mut pending: Vec<usize> = inputs.iter().map(Vec::len).collect();
    let mut consumers: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (to, froms) in inputs.iter().enumerate() {
        for &from in froms {
            consumers[from].push(to);
        }
    }
    let mut ready: std::collections::BTreeSet<usize> =
        (0..n).filter(|&i| pending[i] == 0).collect();
    let mut order = Vec::with_capacity(n);
    while let Some(next) = ready.pop_first() {
        order.push(next);
        for &c in &consumers[next] {
            pending[c] -= 1;
            if pending[c] == 0 {
                ready.insert(c);
            }
        }
    }
    if order.len() == n {
        return Ok(order);
    }
    // What is left is the cycles plus everything downstream of them; peel
    // off the downstream part so the error names the cycle itself.
    let mut left: std::collections::BTreeSet<usize> = (0..n).filter(|&i| pending[i] > 0).collect();
    loop {
        let tail: Vec<usize> = left
            .iter()
            .copied()
            .filter(|&i| !consumers[i].iter().any(|c| left.contains(c)))
            .collect();
        if tail.is_empty() {
            return Err(left.into_iter().collect());
        }
        for i in tail {
            left.remove(&i);
        }
    }
}
