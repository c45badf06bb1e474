//! What time passing alone changes: held values expire, a checkpoint
//! without a commit stalls the model.

use std::time::Duration;

use super::{TestClock, checkpoint_now, collect, commits, message, runtime, settle};
use crate::runtime::{Trigger, core::tests::at};

#[test]
fn a_held_value_keeps_the_tick_until_it_expires() {
    let clock = TestClock::new();
    let mut rt = runtime(&clock);
    let out = run!(rt.ingest(vec![message(&clock, 0, at(0), 1.0)]));
    assert!(commits(&out).is_empty(), "{:?}", out.effects);
    assert!(out.needs_tick, "a value waiting for its frame can expire");
    clock.advance(Duration::from_secs(61));
    let out = run!(rt.tick());
    assert!(!out.needs_tick, "expired: nothing left to fall due");
}

#[test]
fn no_commit_within_the_timeout_stalls_the_model_until_one_commits() {
    let clock = TestClock::new();
    let mut rt = runtime(&clock);
    let (_, out) = checkpoint_now(&mut rt);
    assert_eq!(commits(&out).len(), 1);
    clock.advance(Duration::from_secs(31));
    let out = run!(rt.tick());
    assert_eq!(
        out.view.as_ref().map(|v| v.suspended),
        Some(true),
        "stalled"
    );
    let again = commits(&out);
    assert_eq!(
        again.len(),
        1,
        "the stall is a coverage change: {:?}",
        out.effects
    );
    assert_eq!(again[0].trigger, Trigger::CoverageChange);
    let again = again[0].clone();
    let out = run!(rt.committed(settle(&again, true)));
    assert_eq!(
        out.view.map(|v| v.suspended),
        Some(false),
        "a commit ends the stall"
    );
}
