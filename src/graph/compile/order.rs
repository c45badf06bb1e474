//! The execution order: a topological order of the nodes, or an error
//! naming the cycle that prevents one.

use super::node_field;
use crate::config::FieldError;
use crate::graph::GraphDefinition;

/// The nodes in a topological order, or an error naming a cycle.
pub(super) fn execution_order(
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
