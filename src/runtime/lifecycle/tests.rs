//! What each lifecycle state may still do, and that nothing after the live
//! state ever scores or seals.

use chrono::Utc;
use uuid::Uuid;

use super::Lifecycle;
use crate::{
    graph::FailureDiagnostics,
    runtime::{
        ExitReason, MonitorCore, SilenceChange,
        core::tests::{at, config, frame_observations},
    },
};

fn live() -> Lifecycle {
    Lifecycle::new(MonitorCore::fresh(Uuid::from_u128(9), config(), at(0)).unwrap())
}

/// Offers frame `i` through the lifecycle; `None` once it is not live.
fn offer(lifecycle: &mut Lifecycle, i: i64) -> Option<crate::runtime::Step> {
    let [a, b] = frame_observations(i);
    let now = a.received_at;
    lifecycle.ingest(Ok(a), now)?;
    let step = lifecycle.ingest(Ok(b), now)?;
    if step.fit_due {
        lifecycle.live()?.fit().unwrap();
    }
    Some(step)
}

fn diagnostics() -> FailureDiagnostics {
    FailureDiagnostics {
        failed_node: "boom".into(),
        node_type: "fail_after".into(),
        reason: "failed uncertainly".into(),
        frame_ts: at(0),
        frames_applied: 3,
        semantics_hash: "h".into(),
    }
}

/// Nothing in `lifecycle` can ingest, fit or export a snapshot.
fn assert_cannot_score_or_seal(lifecycle: &mut Lifecycle) {
    assert!(lifecycle.as_live().is_none());
    assert!(lifecycle.live().is_none());
    assert!(lifecycle.why_not_live().is_some());
    assert!(
        offer(lifecycle, 1_000).is_none(),
        "a non-live state ingested"
    );
}

#[test]
fn a_live_monitor_scores_frames_and_can_export_its_state() {
    let mut lifecycle = live();
    for i in 0..5 {
        assert!(offer(&mut lifecycle, i).is_some_and(|s| s.frame.is_some()));
    }
    assert_eq!(lifecycle.facts().unwrap().processed(), 5);
    assert!(lifecycle.why_not_live().is_none());
    assert!(lifecycle.as_live().unwrap().managed_state().is_ok());
}

#[test]
fn a_drained_monitor_stays_readable_but_offers_nothing_to_score_or_seal() {
    let mut lifecycle = live();
    offer(&mut lifecycle, 0);
    assert!(lifecycle.drain());
    assert!(matches!(lifecycle, Lifecycle::Drained(_)));
    assert_cannot_score_or_seal(&mut lifecycle);
    assert_eq!(lifecycle.facts().unwrap().processed(), 1);
    assert!(!lifecycle.drain(), "drained once only");
}

#[test]
fn a_quarantined_monitor_records_coverage_but_never_scores_and_is_never_drained() {
    let mut lifecycle = live();
    offer(&mut lifecycle, 0);
    lifecycle.quarantine_with(diagnostics());
    assert_cannot_score_or_seal(&mut lifecycle);
    assert_eq!(lifecycle.quarantine(), Some(&diagnostics()));
    assert!(
        lifecycle.record_silence(&SilenceChange::Started { from: at(50) }),
        "coverage keeps recording what happens around a quarantined monitor"
    );
    assert!(
        !lifecycle.drain(),
        "a quarantine is never turned into a drain"
    );
    assert!(lifecycle.quarantine().is_some());
}

#[test]
fn a_stall_ends_on_a_commit_even_after_the_last_snapshot_was_sealed() {
    let mut lifecycle = live();
    assert!(lifecycle.live().unwrap().suspend(at(10)));
    assert!(lifecycle.drain());
    assert!(lifecycle.facts().unwrap().is_suspended());
    assert!(lifecycle.resume(at(20)));
    assert!(!lifecycle.facts().unwrap().is_suspended());
}

#[test]
fn a_halted_monitor_keeps_nothing_and_refuses_everything() {
    let mut lifecycle = live();
    offer(&mut lifecycle, 0);
    lifecycle.halt(ExitReason::OwnershipLost {
        detail: "a successor committed".into(),
    });
    assert_cannot_score_or_seal(&mut lifecycle);
    assert!(lifecycle.facts().is_none());
    assert!(!lifecycle.record_silence(&SilenceChange::Started { from: at(50) }));
    assert!(!lifecycle.resume(Utc::now()));
    assert!(!lifecycle.drain());
    assert!(lifecycle.has_ended());
    assert!(matches!(
        &lifecycle,
        Lifecycle::OwnershipLost { detail } if detail == "a successor committed"
    ));
}

#[test]
fn any_other_exit_stops_the_monitor_with_its_reason() {
    let mut lifecycle = live();
    lifecycle.halt(ExitReason::Failed {
        error: "the database went away".into(),
    });
    assert_cannot_score_or_seal(&mut lifecycle);
    assert!(lifecycle.has_ended());
    assert!(matches!(
        &lifecycle,
        Lifecycle::Stopped(ExitReason::Failed { .. })
    ));
    assert_eq!(lifecycle.why_not_live(), Some("the monitor is stopped"));
}

/// One input to the lifecycle in the property below.
#[derive(Debug, Clone)]
enum Input {
    Frame,
    Garbage,
    Silence,
    Stall,
    Commit,
    Drain,
    Quarantine,
    Halt,
}

fn input() -> impl proptest::strategy::Strategy<Value = Input> {
    use proptest::prelude::*;
    prop_oneof![
        8 => Just(Input::Frame),
        1 => Just(Input::Garbage),
        1 => Just(Input::Silence),
        1 => Just(Input::Stall),
        1 => Just(Input::Commit),
        1 => Just(Input::Drain),
        1 => Just(Input::Quarantine),
        1 => Just(Input::Halt),
    ]
}

proptest::proptest! {
    #[test]
    fn after_leaving_the_live_state_nothing_is_scored_or_sealed_ever(
        inputs in proptest::collection::vec(input(), 1..120),
    ) {
        let mut lifecycle = live();
        // The counters (received, processed) when the monitor left the live
        // state, by the inputs alone: `None` while it should still be live.
        let mut left: Option<Option<(u64, u64)>> = None;
        for (i, input) in inputs.into_iter().enumerate() {
            let i = i as i64;
            let leaves = matches!(input, Input::Drain | Input::Quarantine | Input::Halt);
            match input {
                Input::Frame => { offer(&mut lifecycle, i); }
                Input::Garbage => {
                    lifecycle.ingest(Err(crate::mqtt::payload::PayloadRejection::NotJson), at(100 * i));
                }
                Input::Silence => { lifecycle.record_silence(&SilenceChange::Started { from: at(100 * i) }); }
                Input::Stall => { lifecycle.live().map(|core| core.suspend(at(100 * i))); }
                Input::Commit => { lifecycle.resume(at(100 * i)); }
                Input::Drain => { lifecycle.drain(); }
                Input::Quarantine => lifecycle.quarantine_with(diagnostics()),
                Input::Halt => lifecycle.halt(ExitReason::Stopped),
            }
            let counted = lifecycle
                .facts()
                .map(|f| (f.counters().observations_received, f.processed()));
            if leaves && left.is_none() {
                left = Some(counted);
            }
            let Some(then) = left else {
                proptest::prop_assert!(lifecycle.as_live().is_some(), "not live after {:?}", lifecycle);
                continue;
            };
            proptest::prop_assert!(lifecycle.as_live().is_none(), "live again: {:?}", lifecycle);
            proptest::prop_assert!(lifecycle.live().is_none());
            proptest::prop_assert!(lifecycle.why_not_live().is_some());
            // Halting drops the counters; until then they stand still.
            if let (Some(then), Some(now)) = (then, counted) {
                proptest::prop_assert_eq!(then, now, "scored after leaving the live state");
            }
        }
    }
}

/// The one transition the lifecycle makes on its own: the step whose graph
/// node failed uncertainly leaves the monitor quarantined, so the next
/// observation is never offered to the core.
#[cfg(feature = "fault-injection")]
#[test]
fn the_step_that_fails_a_graph_node_uncertainly_quarantines_the_lifecycle() {
    let (graph, config) = crate::graph::tests::failing_on_fourth_update();
    let core = MonitorCore::fresh_graph(Uuid::from_u128(1), config, graph, at(0)).unwrap();
    let mut lifecycle = Lifecycle::new(core);
    for i in 0..3 {
        assert!(offer(&mut lifecycle, i).is_some_and(|s| s.quarantined.is_none()));
    }
    let step = offer(&mut lifecycle, 3).expect("still live when the node fails");
    let diagnostics = step
        .quarantined
        .expect("the fourth update fails uncertainly");
    assert_eq!(lifecycle.quarantine(), Some(&diagnostics));
    assert_cannot_score_or_seal(&mut lifecycle);
    assert_eq!(
        lifecycle.facts().unwrap().counters().observations_received,
        8
    );
}
