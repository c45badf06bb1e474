//! What time passing alone changes: held values expire, a checkpoint
//! without a commit stalls the model.

use std::time::Duration;

use super::{TestClock, checkpoint_now, collect, commits, frame, message, runtime, settle};
use crate::{
    mqtt::ConnectionEvent,
    runtime::{Trigger, core::tests::at, model::Clock},
};

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

/// Just past `secs` seconds after the test clock's start.
fn just_after(secs: i64) -> chrono::DateTime<chrono::Utc> {
    at(0) + chrono::TimeDelta::seconds(secs) + chrono::TimeDelta::nanoseconds(1)
}

#[test]
fn a_model_waiting_only_for_silence_asks_for_its_first_tick_at_the_silence_limit() {
    let clock = TestClock::new();
    let mut rt = runtime(&clock);
    let mut out = run!(rt.connection(&ConnectionEvent::Connected {
        at: clock.wall(),
        attempt: 1,
    }));
    while let Some(handed) = commits(&out).first().cloned() {
        out = run!(rt.committed(settle(handed, true)));
    }
    assert!(out.needs_tick, "connected: the readings can fall silent");
    // The readings' silence limit is max_age_ms, 60 s.
    assert_eq!(out.tick_not_before, Some(just_after(60)));
    clock.advance(Duration::from_secs(60));
    let out = run!(rt.tick());
    assert_eq!(out.view.and_then(|v| v.no_data), None, "not silent yet");
    assert_eq!(out.tick_not_before, Some(just_after(60)));
    clock.advance(Duration::from_nanos(1));
    let out = run!(rt.tick());
    assert!(
        out.view.and_then(|v| v.no_data).is_some(),
        "silent at its first tick"
    );
}

#[test]
fn an_uncommitted_frame_asks_for_its_first_tick_at_the_maximum_interval() {
    let clock = TestClock::new();
    let mut rt = runtime(&clock);
    // The first frame closes the start's gap with a checkpoint of its own.
    let out = run!(rt.ingest(frame(&clock, 0, false)));
    let first = commits(&out)[0].clone();
    run!(rt.committed(settle(&first, true)));
    let out = run!(rt.ingest(frame(&clock, 1, false)));
    assert!(commits(&out).is_empty(), "{:?}", out.effects);
    let due = clock.wall() + chrono::TimeDelta::seconds(30);
    assert_eq!(out.tick_not_before, Some(due), "max_interval is 30 s");
    clock.advance(Duration::from_secs(29));
    let out = run!(rt.tick());
    assert!(commits(&out).is_empty(), "due early: {:?}", out.effects);
    assert_eq!(out.tick_not_before, Some(due));
    clock.advance(Duration::from_secs(1));
    let out = run!(rt.tick());
    let handed = commits(&out);
    assert_eq!(handed.len(), 1, "{:?}", out.effects);
    assert_eq!(handed[0].trigger, Trigger::MaxInterval);
    // In flight: the next thing time can change is the stall, 30 s on.
    assert_eq!(
        out.tick_not_before,
        Some(clock.wall() + chrono::TimeDelta::seconds(30) + chrono::TimeDelta::nanoseconds(1))
    );
}
