use chrono::{TimeZone, Utc};
use serde_json::{Value, json};
use uuid::Uuid;

use super::*;
use crate::align::Frame;

/// An edit of the example graph.
type Edit = Box<dyn Fn(&mut Value)>;

const EXAMPLE: &str = include_str!("../../config/graphs/pump-7.json");

fn example_json() -> Value {
    serde_json::from_str(EXAMPLE).unwrap()
}

fn compiled(value: Value) -> CompiledGraph {
    CompiledGraph::compile(GraphDefinition::from_json(value).unwrap()).unwrap()
}

fn rejected_fields(value: Value) -> Vec<String> {
    match CompiledGraph::compile(GraphDefinition::from_json(value).unwrap()) {
        Ok(_) => panic!("graph was accepted"),
        Err(GraphError::Invalid(e)) => e.fields().into_iter().map(str::to_string).collect(),
        Err(other) => panic!("unexpected error {other}"),
    }
}

fn node_mut<'a>(graph: &'a mut Value, id: &str) -> &'a mut Value {
    graph["nodes"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|n| n["id"] == id)
        .unwrap()
}

fn binding(graph: &CompiledGraph, revision: i32) -> GraphBinding {
    GraphBinding {
        graph_id: Uuid::nil(),
        graph: graph.definition().name.clone(),
        revision,
        run_id: Uuid::new_v4(),
        semantics_hash: graph.semantics_hash().to_string(),
    }
}

/// A small graph: one reading, scaled, into a detector, into the sink.
pub(crate) fn small(extra_node: Option<Value>) -> Value {
    let mut nodes = vec![
        json!({"id": "p", "type": "reading", "params": {"reading": "p"}, "layout": {"x": 0, "y": 0}}),
        json!({"id": "q", "type": "reading", "params": {"reading": "q"}, "layout": {"x": 0, "y": 1}}),
        json!({"id": "det", "type": "detector", "params": {"training_frames": 10, "calibration_frames": 20, "false_alarm_rate": 0.1}, "layout": {"x": 1, "y": 0}}),
        json!({"id": "alarm", "type": "alarm", "params": {}, "layout": {"x": 2, "y": 0}}),
    ];
    let mut edges = vec![
        json!({"from": "q", "to": "det"}),
        json!({"from": "det", "to": "alarm"}),
    ];
    match extra_node {
        Some(node) => {
            let id = node["id"].as_str().unwrap().to_string();
            nodes.push(node);
            edges.push(json!({"from": "p", "to": id}));
            edges.push(json!({"from": id, "to": "det"}));
        }
        None => edges.push(json!({"from": "p", "to": "det"})),
    }
    json!({
        "name": "small",
        "readings": [{"name": "p", "topic": "t/p"}, {"name": "q", "topic": "t/q"}],
        "alignment": {"freshness_ms": 1000, "max_age_ms": 1000, "future_tolerance_ms": 0, "max_skew_ms": 100},
        "nodes": nodes,
        "edges": edges,
    })
}

/// [`small`] with a `fail_after` node that fails uncertainly on its
/// fourth update, compiled, and its monitor bound to run 7: the graph that
/// quarantines a run.
#[cfg(feature = "fault-injection")]
pub(crate) fn failing_on_fourth_update() -> (CompiledGraph, crate::config::MonitorConfig) {
    let graph = compiled(small(Some(json!(
        {"id": "boom", "type": "fail_after", "params": {"updates": 3, "mode": "uncertain"}, "layout": {"x": 0, "y": 0}}
    ))));
    let binding = GraphBinding {
        graph_id: Uuid::nil(),
        graph: "small".into(),
        revision: 1,
        run_id: Uuid::from_u128(7),
        semantics_hash: graph.semantics_hash().to_string(),
    };
    let config = graph.monitor_config("small.r1.g1".into(), binding);
    (graph, config)
}

fn frame(i: i64) -> Frame {
    let x = i as f64;
    Frame {
        ts: Utc.timestamp_opt(1_800_000_000 + i, 0).unwrap(),
        values: vec![10.0 + (x * 0.7).sin(), 5.0 + (x * 1.3).cos()],
    }
}

fn advance(executor: GraphExecutor, i: i64) -> (GraphExecutor, FrameReport) {
    match executor.run_frame(&frame(i)) {
        Step::Advanced { executor, report } => (executor, report),
        Step::Quarantined(q) => panic!("quarantined: {:?}", q.diagnostics()),
    }
}

#[test]
fn the_shipped_example_compiles() {
    let graph = compiled(example_json());
    assert_eq!(graph.semantics_hash().len(), 64);
    assert_eq!(graph.resolved_readings().len(), 3);
}

#[test]
fn a_layout_only_edit_keeps_the_hash_and_the_monitor_fingerprint() {
    let base = compiled(example_json());
    let mut edited = example_json();
    let pump = node_mut(&mut edited, "pump");
    pump["layout"] = json!({"x": 9999.5, "y": -3, "label": "renamed", "color": "#000000"});
    edited["description"] = json!("moved things around");
    edited["nodes"].as_array_mut().unwrap().reverse();
    let moved = compiled(edited);
    assert_eq!(moved.semantics_hash(), base.semantics_hash());
    assert!(diff(&base, &moved).is_layout_only());
    assert!(diff(&base, &moved).nodes.is_empty());
    let a = base.monitor_config("a".into(), binding(&base, 1));
    let b = moved.monitor_config("b".into(), binding(&moved, 2));
    assert_eq!(a.fingerprint(), b.fingerprint());
}

#[test]
fn writing_a_default_or_an_integer_float_differently_keeps_the_hash() {
    let base = compiled(example_json());
    let mut edited = example_json();
    node_mut(&mut edited, "flow_ls")["params"] = json!({"factor": 0.2777777777777778});
    node_mut(&mut edited, "alarm")["params"]["threshold"] = json!(1);
    assert_eq!(compiled(edited).semantics_hash(), base.semantics_hash());
}

#[test]
fn every_semantic_edit_changes_the_hash_the_fingerprint_and_names_the_node() {
    let base = compiled(example_json());
    let base_fp = base
        .monitor_config("a".into(), binding(&base, 1))
        .fingerprint();
    let edits: Vec<(Edit, Option<&str>)> = vec![
        (
            Box::new(|g| node_mut(g, "flow_ls")["params"]["factor"] = json!(0.28)),
            Some("flow_ls"),
        ),
        (
            Box::new(|g| node_mut(g, "pressure_avg")["params"]["window"] = json!(6)),
            Some("pressure_avg"),
        ),
        (
            Box::new(|g| node_mut(g, "temperature_ewma")["params"]["alpha"] = json!(0.31)),
            Some("temperature_ewma"),
        ),
        (
            Box::new(|g| node_mut(g, "worst")["params"]["op"] = json!("mean")),
            Some("worst"),
        ),
        (
            Box::new(|g| node_mut(g, "pump")["params"]["false_alarm_rate"] = json!(0.02)),
            Some("pump"),
        ),
        (
            Box::new(|g| node_mut(g, "alarm")["params"]["threshold"] = json!(1.5)),
            Some("alarm"),
        ),
        // Input order of a detector is its feature order.
        (
            Box::new(|g| g["edges"].as_array_mut().unwrap().swap(4, 5)),
            Some("pump"),
        ),
        (
            Box::new(|g| g["readings"][0]["topic"] = json!("plant/hall-b/pump-8/pressure")),
            None,
        ),
        (
            Box::new(|g| g["alignment"]["max_skew_ms"] = json!(999)),
            None,
        ),
    ];
    for (i, (edit, node)) in edits.iter().enumerate() {
        let mut value = example_json();
        edit(&mut value);
        let changed = compiled(value);
        assert_ne!(changed.semantics_hash(), base.semantics_hash(), "edit {i}");
        let fp = changed
            .monitor_config("a".into(), binding(&changed, 2))
            .fingerprint();
        assert_ne!(fp, base_fp, "edit {i}");
        let d = diff(&base, &changed);
        assert!(!d.is_layout_only());
        match node {
            Some(node) => assert_eq!(
                d.nodes,
                vec![NodeChange {
                    node: node.to_string(),
                    change: NodeChangeKind::Changed
                }],
                "edit {i}"
            ),
            None => assert!(d.readings_changed || d.alignment_changed, "edit {i}"),
        }
    }
}

#[test]
fn a_monitor_without_a_graph_keeps_its_old_fingerprint_form() {
    let base = compiled(example_json());
    let mut config = base.monitor_config("a".into(), binding(&base, 1));
    let with = config.fingerprint();
    config.graph = None;
    assert_ne!(config.fingerprint(), with);
    let json = serde_json::to_value(&config).unwrap();
    assert!(
        json.get("graph").is_none(),
        "plain monitors serialize as before"
    );
}

#[test]
fn each_invalid_graph_is_rejected_naming_the_node() {
    let cases: Vec<(Edit, &str)> = vec![
        (
            Box::new(|g| node_mut(g, "flow_ls")["params"]["factor"] = json!(0)),
            "nodes.flow_ls.params.factor",
        ),
        (
            Box::new(|g| node_mut(g, "pressure_avg")["params"]["window"] = json!(0)),
            "nodes.pressure_avg.params.window",
        ),
        (
            Box::new(|g| node_mut(g, "temperature_ewma")["params"]["alpha"] = json!(1.5)),
            "nodes.temperature_ewma.params.alpha",
        ),
        (
            Box::new(|g| node_mut(g, "pump")["params"]["false_alarm_rate"] = json!(2)),
            "nodes.pump.params.false_alarm_rate",
        ),
        (
            Box::new(|g| node_mut(g, "flow_ls")["params"]["gain"] = json!(1)),
            "nodes.flow_ls.type",
        ),
        (
            Box::new(|g| node_mut(g, "flow_ls")["type"] = json!("fft")),
            "nodes.flow_ls.type",
        ),
        (
            Box::new(|g| node_mut(g, "pressure")["params"]["reading"] = json!("vibration")),
            "nodes.pressure.params.reading",
        ),
        // A score into a series transform.
        (
            Box::new(|g| {
                g["edges"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!({"from": "pump", "to": "flow_change"}))
            }),
            "nodes.flow_change.edges",
        ),
        // A series straight into the alarm sink.
        (
            Box::new(|g| {
                g["edges"].as_array_mut().unwrap()[11] = json!({"from": "flow_ls", "to": "alarm"})
            }),
            "nodes.alarm.edges",
        ),
        (
            Box::new(|g| {
                g["edges"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!({"from": "ghost", "to": "alarm"}))
            }),
            "edges[12]",
        ),
        (
            Box::new(|g| g["readings"][1]["topic"] = json!("plant/+/flow")),
            "readings[1].topic",
        ),
        (
            Box::new(|g| {
                g["readings"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!({"name": "spare", "topic": "x/y"}))
            }),
            "readings.spare",
        ),
    ];
    for (edit, field) in cases {
        let mut value = example_json();
        edit(&mut value);
        let fields = rejected_fields(value);
        assert!(
            fields.iter().any(|f| f == field),
            "expected {field}, got {fields:?}"
        );
    }
}

#[test]
fn a_cycle_is_rejected_naming_its_nodes() {
    let mut value = small(Some(
        json!({"id": "s", "type": "scale", "params": {"factor": 2}, "layout": {"x": 0, "y": 0}}),
    ));
    value["nodes"].as_array_mut().unwrap().push(
        json!({"id": "s2", "type": "scale", "params": {"factor": 2}, "layout": {"x": 0, "y": 0}}),
    );
    // p -> s -> det, and s <-> s2: s now has two inputs and a cycle.
    value["edges"]
        .as_array_mut()
        .unwrap()
        .push(json!({"from": "s", "to": "s2"}));
    value["edges"]
        .as_array_mut()
        .unwrap()
        .push(json!({"from": "s2", "to": "s"}));
    let err = CompiledGraph::compile(GraphDefinition::from_json(value).unwrap()).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("cycle through s, s2"), "{text}");
}

#[test]
fn unknown_top_level_or_layout_keys_are_refused() {
    let mut value = example_json();
    value["colour"] = json!("red");
    assert!(GraphDefinition::from_json(value).is_err());
    let mut value = example_json();
    node_mut(&mut value, "pump")["layout"]["z"] = json!(1);
    assert!(GraphDefinition::from_json(value).is_err());
    let mut value = example_json();
    node_mut(&mut value, "pump")["layout"]["x"] = json!("left");
    assert!(GraphDefinition::from_json(value).is_err());
}

#[test]
fn transforms_compute_their_values_and_the_detector_reaches_monitoring() {
    let graph = compiled(small(Some(
        json!({"id": "avg", "type": "rolling_mean", "params": {"window": 2}, "layout": {"x": 0, "y": 0}}),
    )));
    let mut executor = GraphExecutor::new(graph).unwrap();
    let mut sink_seen = false;
    let mut phase_changes = 0;
    for i in 0..40 {
        let (next, report) = advance(executor, i);
        executor = next;
        phase_changes += usize::from(report.phase_changed());
        sink_seen |= report.sink.is_some();
    }
    assert!(
        sink_seen,
        "scores reach the sink once the detector monitors"
    );
    assert!(
        phase_changes >= 2,
        "training and calibration ends are reported"
    );
    let state = executor.export_state();
    let (_, avg) = state.nodes.iter().find(|(id, _)| id == "avg").unwrap();
    let NodeState::RollingMean { values } = avg else {
        panic!()
    };
    assert_eq!(values.len(), 2);
    assert_eq!(values[1], frame(39).values[0]);
}

#[test]
fn exported_state_restores_into_the_same_semantics_only() {
    let graph = compiled(small(None));
    let mut executor = GraphExecutor::new(graph.clone()).unwrap();
    for i in 0..15 {
        executor = advance(executor, i).0;
    }
    let state = executor.export_state();
    let restored = GraphExecutor::restore(graph.clone(), state.clone()).unwrap();
    let (a, ra) = advance(executor, 15);
    let (b, rb) = advance(restored, 15);
    assert_eq!(ra, rb);
    assert_eq!(a.export_state(), b.export_state());

    let other = compiled(small(Some(
        json!({"id": "s", "type": "scale", "params": {"factor": 2}, "layout": {"x": 0, "y": 0}}),
    )));
    assert!(matches!(
        GraphExecutor::restore(other, state),
        Err(GraphError::StateMismatch(_))
    ));
}

#[test]
fn a_non_finite_reading_is_a_certain_rejection_that_skips_its_consumers() {
    let graph = compiled(small(Some(
        json!({"id": "e", "type": "ewma", "params": {"alpha": 0.5}, "layout": {"x": 0, "y": 0}}),
    )));
    let executor = GraphExecutor::new(graph).unwrap();
    let (executor, _) = advance(executor, 0);
    let before = executor.export_state();
    let bad = Frame {
        ts: frame(1).ts,
        values: vec![f64::NAN, 1.0],
    };
    let Step::Advanced { executor, report } = executor.run_frame(&bad) else {
        panic!()
    };
    assert_eq!(
        report.rejected().map(|(n, _)| n).collect::<Vec<_>>(),
        vec!["p"]
    );
    assert!(
        report
            .nodes
            .contains(&NodeOutcome::Skipped { node: "e".into() })
    );
    let after = executor.export_state();
    assert_eq!(
        after.nodes, before.nodes,
        "a rejection leaves every node's state as it was"
    );
}

#[cfg(feature = "fault-injection")]
mod fault {
    use super::*;

    fn failing(mode: &str) -> CompiledGraph {
        compiled(small(Some(
            json!({"id": "boom", "type": "fail_after", "params": {"updates": 3, "mode": mode}, "layout": {"x": 0, "y": 0}}),
        )))
    }

    #[test]
    fn a_fatal_uncertain_update_consumes_the_executor_into_quarantine() {
        let mut executor = GraphExecutor::new(failing("uncertain")).unwrap();
        for i in 0..3 {
            executor = advance(executor, i).0;
        }
        let Step::Quarantined(quarantined) = executor.run_frame(&frame(3)) else {
            panic!("the fourth update fails uncertainly")
        };
        // Only diagnostics are reachable; there is no executor left to run
        // or export (`run_frame` took it by value).
        let d = quarantined.into_diagnostics();
        assert_eq!(d.failed_node, "boom");
        assert_eq!(d.node_type, "fail_after");
        assert_eq!(d.frames_applied, 3);
        assert_eq!(d.frame_ts, frame(3).ts);
        assert!(d.reason.contains("uncertain"));
    }

    #[test]
    fn a_certain_rejection_keeps_the_executor_and_the_node_state() {
        let mut executor = GraphExecutor::new(failing("rejected")).unwrap();
        for i in 0..3 {
            executor = advance(executor, i).0;
        }
        let before = executor.export_state();
        let (executor, report) = advance(executor, 3);
        assert_eq!(
            report.rejected().map(|(n, _)| n).collect::<Vec<_>>(),
            vec!["boom"]
        );
        assert_eq!(executor.export_state().nodes, before.nodes);
        assert_eq!(executor.frames_applied(), 4);
    }
}

mod properties {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn any_layout_and_node_order_keeps_the_hash(
            positions in proptest::collection::vec((-1e6f64..1e6, -1e6f64..1e6), 11),
            labels in proptest::collection::vec(proptest::option::of("[a-z ]{0,12}"), 11),
            rotate in 0usize..11,
        ) {
            let base = compiled(example_json());
            let mut value = example_json();
            let nodes = value["nodes"].as_array_mut().unwrap();
            for ((node, (x, y)), label) in nodes.iter_mut().zip(&positions).zip(&labels) {
                node["layout"] = json!({"x": x, "y": y});
                if let Some(label) = label {
                    node["layout"]["label"] = json!(label);
                }
            }
            nodes.rotate_left(rotate);
            let moved = compiled(value);
            prop_assert_eq!(moved.semantics_hash(), base.semantics_hash());
        }

        #[test]
        fn any_changed_factor_or_window_changes_the_hash(
            factor in 0.001f64..1000.0,
            window in 1usize..10_000,
        ) {
            let base = compiled(example_json());
            let mut value = example_json();
            node_mut(&mut value, "flow_ls")["params"]["factor"] = json!(factor);
            node_mut(&mut value, "pressure_avg")["params"]["window"] = json!(window);
            let same = factor == 0.2777777777777778 && window == 5;
            prop_assert_eq!(compiled(value).semantics_hash() == base.semantics_hash(), same);
        }
    }
}

#[test]
fn a_detector_node_scores_the_input_nodes_its_change_readings_name() {
    let with_change = |readings: Value| {
        let mut graph = small(None);
        node_mut(&mut graph, "det")["params"]["change"] =
            json!({"readings": readings, "false_alarm_rate": 0.1});
        graph
    };
    assert_eq!(
        rejected_fields(with_change(json!(["nowhere"]))),
        vec!["nodes.det.params.change.readings"]
    );
    // "p" is the detector's second input (edge order: q, then p).
    let mut executor = GraphExecutor::new(compiled(with_change(json!(["p"])))).unwrap();
    let mut scored = 0;
    for i in 0..80 {
        let report;
        (executor, report) = advance(executor, i);
        assert_eq!(report.rejected().count(), 0);
        scored += report
            .detectors
            .iter()
            .filter(|d| d.scored.is_some())
            .count();
    }
    // 10 training and 20 calibration frames, then every frame is scored.
    assert_eq!(scored, 50);
}

#[test]
fn a_detector_node_watches_for_stuck_values_when_its_params_say_so() {
    let with_stuck = |rate: f64| {
        let mut graph = small(None);
        node_mut(&mut graph, "det")["params"]["stuck"] = json!({"false_alarm_rate": rate});
        graph
    };
    assert_eq!(
        rejected_fields(with_stuck(1.5)),
        vec!["nodes.det.params.stuck.false_alarm_rate"]
    );
    let mut executor = GraphExecutor::new(compiled(with_stuck(0.01))).unwrap();
    let mut watched = 0;
    for i in 0..80 {
        let report;
        (executor, report) = advance(executor, i);
        watched += report
            .detectors
            .iter()
            .filter_map(|d| d.scored.as_ref())
            .filter(|s| s.stuck.is_some())
            .count();
    }
    // Every scored frame carries the stuck channel's figures.
    assert_eq!(watched, 50);
}
