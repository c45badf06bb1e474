//! A graph run whose node fails uncertainly: the runtime hands on what
//! it had and never commits again.

use super::{ID, TestClock, checkpoint_now, collect, frame, runtime_of};
use crate::{
    mqtt::RawMessage,
    runtime::{Effect, MonitorCore, core::tests::at},
};

#[test]
fn a_quarantined_model_hands_on_what_it_had_and_never_commits_again() {
    let (graph, config) = crate::graph::tests::failing_on_fourth_update();
    let core = MonitorCore::fresh_graph(ID, config.clone(), graph, at(0)).unwrap();
    let clock = TestClock::new();
    let mut rt = runtime_of(config, core, &clock);
    let batch: Vec<RawMessage> = (0..6).flat_map(|i| frame(&clock, i, false)).collect();
    let out = run!(rt.ingest(batch));
    assert!(
        matches!(out.effects.last(), Some(Effect::Quarantined(_))),
        "{:?}",
        out.effects
    );
    assert_eq!(
        out.view.map(|v| v.consumed),
        Some(8),
        "none after the failing one"
    );
    assert!(!out.needs_tick);
    assert!(checkpoint_now(&mut rt).0.is_err());
    for out in [
        run!(rt.ingest(frame(&clock, 7, false))),
        run!(rt.tick()),
        run!(rt.input_ended()),
    ] {
        assert!(out.effects.is_empty(), "{:?}", out.effects);
    }
}
