//! A graph run inside `MonitorCore`: frames reach the executor, its state
//! travels in the snapshot and comes back, and a quarantined run exports
//! nothing.

use chrono::{DateTime, Duration, TimeZone, Utc};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::{
    align::Observation,
    config::MonitorConfig,
    detector::Phase,
    graph::{CompiledGraph, GraphBinding, GraphDefinition, tests::small},
    runtime::MonitorCore,
};

fn at(i: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(1_790_000_000, 0).unwrap() + Duration::milliseconds(100 * i)
}

/// Two readings; `p` goes through `extra` (if any) into a detector with `q`.
fn graph(extra: Option<Value>) -> CompiledGraph {
    CompiledGraph::compile(GraphDefinition::from_json(small(extra)).unwrap()).unwrap()
}

fn config(graph: &CompiledGraph) -> MonitorConfig {
    graph.monitor_config(
        "small.r1.g1".into(),
        GraphBinding {
            graph_id: Uuid::nil(),
            graph: "small".into(),
            revision: 1,
            run_id: Uuid::from_u128(7),
            semantics_hash: graph.semantics_hash().to_string(),
        },
    )
}

/// Offers frame `i` (both readings); returns the step of its last reading.
fn feed(core: &mut MonitorCore, i: i64) -> crate::runtime::Step {
    let x = i as f64;
    let mut last = None;
    for (reading, value) in [
        (0, (x * 0.7).sin() * 3.0 + 10.0),
        (1, (x * 0.3).cos() + 5.0),
    ] {
        let observation = Observation {
            reading,
            ts: at(i),
            value,
            received_at: at(i),
        };
        last = Some(core.ingest(Ok(observation), at(i)));
    }
    last.unwrap()
}

#[test]
fn a_graph_run_scores_through_its_nodes_and_its_state_travels_in_the_snapshot() {
    let g = graph(None);
    let config = config(&g);
    let mut core = MonitorCore::fresh_graph(Uuid::from_u128(1), config.clone(), g, at(0)).unwrap();
    assert!(core.is_graph());
    assert!(core.detector().is_none());
    let mut phase_changes = 0;
    for i in 0..25 {
        let step = feed(&mut core, i);
        assert!(step.frame.is_some(), "frame {i} reached the graph");
        assert!(!step.fit_due, "graph detectors fit within their frame");
        phase_changes += usize::from(step.phase_changed.is_some());
    }
    assert_eq!(core.processed(), 25);
    assert_eq!(core.phase(), Phase::Calibrating);
    assert_eq!(
        phase_changes, 1,
        "training -> calibrating is a checkpoint trigger"
    );

    let state = core.managed_state().unwrap();
    assert!(
        state.detector.is_empty(),
        "a graph run stores no built-in detector"
    );
    let checkpoint = state.graph.clone().expect("graph state in the snapshot");
    assert_eq!(checkpoint.state.frames_applied, 25);
    assert_eq!(checkpoint.bound.readings, config.readings);

    let mut restored = MonitorCore::restore_graph(
        Uuid::from_u128(1),
        config,
        graph(None),
        state,
        at(25),
        at(30),
    )
    .unwrap();
    assert_eq!(restored.graph_frames_applied(), Some(25));
    let mut scored = 0;
    for i in 30..40 {
        scored += usize::from(feed(&mut restored, i).verdict.is_some());
    }
    assert_eq!(restored.phase(), Phase::Monitoring);
    assert!(
        scored > 0,
        "the restored graph calibrated from its saved frames"
    );
}

#[test]
fn a_restore_refuses_graph_state_of_other_semantics() {
    let g = graph(None);
    let mut core = MonitorCore::fresh_graph(Uuid::from_u128(1), config(&g), g, at(0)).unwrap();
    for i in 0..3 {
        feed(&mut core, i);
    }
    let state = core.managed_state().unwrap();
    let other = graph(Some(
        json!({"id": "s", "type": "scale", "params": {"factor": 2.0}, "layout": {"x": 0, "y": 0}}),
    ));
    let err = MonitorCore::restore_graph(
        Uuid::from_u128(1),
        config(&other),
        other,
        state,
        at(3),
        at(4),
    )
    .unwrap_err();
    assert!(err.to_string().contains("another binding"), "{err}");
}

#[test]
fn a_graph_run_needs_the_readings_of_its_revision() {
    let g = graph(None);
    let mut config = config(&g);
    config.readings.swap(0, 1);
    let err = MonitorCore::fresh_graph(Uuid::from_u128(1), config, g, at(0)).unwrap_err();
    assert!(err.to_string().contains("readings differ"), "{err}");
}

#[cfg(feature = "fault-injection")]
#[test]
fn a_fatal_uncertain_update_quarantines_the_core_and_nothing_is_exported_again() {
    let g = graph(Some(
        json!({"id": "boom", "type": "fail_after", "params": {"updates": 3, "mode": "uncertain"}, "layout": {"x": 0, "y": 0}}),
    ));
    let mut core = MonitorCore::fresh_graph(Uuid::from_u128(1), config(&g), g, at(0)).unwrap();
    for i in 0..3 {
        assert!(feed(&mut core, i).quarantined.is_none());
    }
    assert!(core.managed_state().is_ok());
    let step = feed(&mut core, 3);
    let diagnostics = step
        .quarantined
        .expect("the fourth update fails uncertainly");
    assert_eq!(diagnostics.failed_node, "boom");
    assert_eq!(diagnostics.frames_applied, 3);
    assert!(step.frame.is_none() && step.results.is_empty());
    assert_eq!(core.quarantine(), Some(&diagnostics));
    assert!(matches!(
        core.managed_state(),
        Err(crate::runtime::ExportError::Quarantined { .. })
    ));
    let after = feed(&mut core, 4);
    assert!(after.frame.is_none() && after.quarantined.is_none());
    assert_eq!(
        core.processed(),
        3,
        "no frame is processed after the failure"
    );
}
