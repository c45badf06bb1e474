//! The property: whatever the order of inputs, results leave exactly
//! once and nothing commits after the drain.

use std::time::Duration;

use super::{TestClock, checkpoint_now, collect, commits, flags, frame, results, runtime, settle};
use crate::{
    mqtt::ConnectionEvent,
    runtime::{Clock, Effect, SnapshotHandoff},
};

#[derive(Debug, Clone)]
enum Input {
    /// A batch of this many frames, outliers or not.
    Batch(u8, bool),
    Tick(u8),
    Settle(bool),
    Disconnect,
    CheckpointNow,
}

fn input() -> impl proptest::strategy::Strategy<Value = Input> {
    use proptest::prelude::*;
    prop_oneof![
        6 => (1u8..12, any::<bool>()).prop_map(|(n, o)| Input::Batch(n, o)),
        2 => (0u8..40).prop_map(Input::Tick),
        2 => any::<bool>().prop_map(Input::Settle),
        1 => Just(Input::Disconnect),
        1 => Just(Input::CheckpointNow),
    ]
}

proptest::proptest! {
    /// Whatever the order of inputs: at most one `Results` per output and
    /// always last, every flagged frame's evidence leaves exactly once and
    /// in order, nothing stays behind after an input, and nothing commits
    /// once the model drained.
    #[test]
    fn results_leave_exactly_once_and_nothing_commits_after_the_drain(
        inputs in proptest::collection::vec(input(), 1..60),
    ) {
        let clock = TestClock::new();
        let mut rt = runtime(&clock);
        let mut next = 0i64;
        let mut handed: Vec<SnapshotHandoff> = Vec::new();
        let (mut flagged, mut left) = (0usize, Vec::new());
        for input in inputs {
            let out = match input {
                Input::Batch(n, outlier) => {
                    let batch = (next..next + i64::from(n)).flat_map(|i| frame(&clock, i, outlier && next >= 40)).collect();
                    next += i64::from(n);
                    clock.advance(Duration::from_millis(100 * u64::from(n)));
                    run!(rt.ingest(batch))
                }
                Input::Tick(s) => { clock.advance(Duration::from_secs(u64::from(s))); run!(rt.tick()) }
                Input::Settle(ok) => match handed.pop() {
                    Some(h) => run!(rt.committed(settle(&h, ok))),
                    None => continue,
                },
                Input::Disconnect => run!(rt.connection(&ConnectionEvent::Disconnected { at: clock.wall(), reason: "p".into() })),
                Input::CheckpointNow => checkpoint_now(&mut rt).1,
            };
            proptest::prop_assert!(rt.results.is_empty(), "results kept past an input");
            let r = out.effects.iter().position(|e| matches!(e, Effect::Results(_)));
            proptest::prop_assert!(results(&out).len() <= 1, "{:?}", out.effects);
            proptest::prop_assert!(
                r.is_none_or(|r| out.effects[r..].iter().all(|e| !matches!(e, Effect::Commit(_) | Effect::Notice(_)))),
                "results left before their batch ended: {:?}", out.effects
            );
            flagged += flags(&out);
            for effect in &out.effects {
                match effect {
                    Effect::Commit(h) => { left.extend(h.results.evidence.iter().map(|e| e.frame_ts)); handed.push(h.clone()); }
                    Effect::Results(r) => left.extend(r.evidence.iter().map(|e| e.frame_ts)),
                    _ => {}
                }
            }
        }
        proptest::prop_assert_eq!(left.len(), flagged);
        proptest::prop_assert!(left.windows(2).all(|w| w[0] < w[1]), "evidence out of order or twice");
        let out = run!(rt.input_ended());
        proptest::prop_assert!(commits(&out).iter().all(|h| h.last));
        proptest::prop_assert!(out.effects.iter().any(|e| matches!(e, Effect::Drained)));
        for out in [run!(rt.ingest(frame(&clock, next, false))), run!(rt.tick()), run!(rt.input_ended())] {
            proptest::prop_assert!(out.effects.is_empty(), "{:?}", out.effects);
        }
    }
}
