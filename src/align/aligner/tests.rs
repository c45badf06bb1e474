use chrono::TimeDelta;
use proptest::prelude::*;

use super::*;

/// Readings `a`, `b` (required) and `o` (optional), in that order.
fn readings() -> Vec<ReadingConfig> {
    ["a", "b", "o"]
        .iter()
        .map(|name| ReadingConfig {
            name: (*name).into(),
            topic: format!("plant/{name}"),
            required: *name != "o",
        })
        .collect()
}

const A: usize = 0;
const B: usize = 1;
const O: usize = 2;

fn policy() -> AlignmentPolicy {
    AlignmentPolicy {
        freshness_ms: 5_000,
        max_age_ms: 30_000,
        future_tolerance_ms: 2_000,
        max_skew_ms: 1_000,
        silence_ms: None,
    }
}

fn aligner() -> Aligner {
    Aligner::new(policy(), &readings()).unwrap()
}

/// Milliseconds after a fixed origin.
fn t(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(1_800_000_000_000 + ms).unwrap()
}

/// An observation with source time `ts` received at `received` (both ms).
fn obs(reading: usize, ts: i64, received: i64, value: f64) -> Observation {
    Observation {
        reading,
        ts: t(ts),
        value,
        received_at: t(received),
    }
}

/// Admits an observation received and processed at its own source time.
fn admit_now(aligner: &mut Aligner, reading: usize, ts: i64, value: f64) -> Admission {
    aligner.admit(obs(reading, ts, ts, value), t(ts))
}

fn frame(ts: i64, values: &[f64]) -> Admission {
    Admission::FrameReady(Frame {
        ts: t(ts),
        values: values.to_vec(),
    })
}

#[test]
fn a_frame_is_emitted_once_every_required_reading_holds_a_value() {
    let mut aligner = aligner();
    assert_eq!(admit_now(&mut aligner, B, 100, 2.0), Admission::Held);
    assert_eq!(
        admit_now(&mut aligner, A, 200, 1.0),
        frame(200, &[1.0, 2.0])
    );
    assert_eq!(aligner.held_values(), 0);
    assert_eq!(aligner.counters().frames, 1);
    assert_eq!(aligner.counters().accepted, 2);
}

#[test]
fn after_a_frame_each_required_reading_needs_a_newer_observation() {
    let mut aligner = aligner();
    admit_now(&mut aligner, A, 0, 1.0);
    admit_now(&mut aligner, B, 0, 2.0);
    assert_eq!(admit_now(&mut aligner, A, 10, 3.0), Admission::Held);
    assert_eq!(
        aligner.admit(obs(B, 0, 10, 2.0), t(10)),
        Admission::Rejected(AlignRejection::Stale)
    );
    assert_eq!(admit_now(&mut aligner, B, 20, 4.0), frame(20, &[3.0, 4.0]));
}

#[test]
fn optional_readings_are_watermarked_but_never_part_of_frames() {
    let mut aligner = aligner();
    assert_eq!(admit_now(&mut aligner, O, 0, 9.0), Admission::Recorded);
    assert_eq!(aligner.held_values(), 0);
    assert_eq!(aligner.watermarks().get("o"), Some(t(0)));
    assert_eq!(
        admit_now(&mut aligner, O, 0, 9.0),
        Admission::Rejected(AlignRejection::Stale)
    );
    admit_now(&mut aligner, A, 1, 1.0);
    assert_eq!(admit_now(&mut aligner, B, 1, 2.0), frame(1, &[1.0, 2.0]));
}

#[test]
fn a_newer_value_supersedes_the_held_value_of_its_reading() {
    let mut aligner = aligner();
    admit_now(&mut aligner, A, 0, 1.0);
    admit_now(&mut aligner, A, 100, 5.0);
    assert_eq!(
        admit_now(&mut aligner, B, 200, 2.0),
        frame(200, &[5.0, 2.0])
    );
    assert_eq!(aligner.counters().superseded, 1);
}

#[test]
fn an_index_outside_the_readings_is_rejected_as_unknown() {
    let mut aligner = aligner();
    assert_eq!(
        admit_now(&mut aligner, 3, 0, 1.0),
        Admission::Rejected(AlignRejection::UnknownReading)
    );
    assert_eq!(aligner.counters().unknown_reading, 1);
}

#[test]
fn future_tolerance_admits_up_to_its_limit_and_rejects_one_millisecond_more() {
    // Source time ahead of receipt by 1999, 2000 and 2001 ms.
    for (ahead, expected) in [
        (1_999, Admission::Held),
        (2_000, Admission::Held),
        (2_001, Admission::Rejected(AlignRejection::Future)),
    ] {
        let mut aligner = aligner();
        assert_eq!(
            aligner.admit(obs(A, ahead, 0, 1.0), t(0)),
            expected,
            "{ahead} ms ahead"
        );
    }
}

#[test]
fn maximum_age_admits_up_to_its_limit_and_rejects_one_millisecond_more() {
    // Received promptly, processed 29999, 30000 and 30001 ms after source time.
    for (age, expected) in [
        (29_999, Admission::Held),
        (30_000, Admission::Held),
        (30_001, Admission::Rejected(AlignRejection::TooOld)),
    ] {
        let mut aligner = aligner();
        assert_eq!(
            aligner.admit(obs(A, 0, 1, 1.0), t(age)),
            expected,
            "age {age} ms"
        );
    }
}

#[test]
fn time_spent_in_the_queue_counts_towards_the_maximum_age() {
    let mut aligner = aligner();
    // Received 1 s after its source time, yet too old once queued 29.001 s.
    assert_eq!(
        aligner.admit(obs(A, 0, 1_000, 1.0), t(30_001)),
        Admission::Rejected(AlignRejection::TooOld)
    );
    assert_eq!(aligner.counters().too_old, 1);
}

#[test]
fn the_watermark_rejects_at_and_below_it_and_admits_one_millisecond_above() {
    let mut aligner = aligner();
    admit_now(&mut aligner, A, 1_000, 1.0);
    for (ts, expected) in [
        (999, Admission::Rejected(AlignRejection::Stale)),
        (1_000, Admission::Rejected(AlignRejection::Stale)),
        (1_001, Admission::Held),
    ] {
        assert_eq!(
            aligner.admit(obs(A, ts, 1_100, 1.0), t(1_100)),
            expected,
            "ts {ts}"
        );
    }
    assert_eq!(aligner.counters().stale, 2);
}

#[test]
fn a_replay_older_than_the_maximum_age_is_too_old_even_though_it_is_also_stale() {
    let mut aligner = aligner();
    admit_now(&mut aligner, A, 0, 1.0);
    // At the watermark and 60 s old: too old wins, whatever the watermark says.
    assert_eq!(
        aligner.admit(obs(A, 0, 60_000, 1.0), t(60_000)),
        Admission::Rejected(AlignRejection::TooOld)
    );
    // The same replay within the maximum age is stale.
    assert_eq!(
        aligner.admit(obs(A, 0, 30_000, 1.0), t(30_000)),
        Admission::Rejected(AlignRejection::Stale)
    );
    assert_eq!(aligner.counters().too_old, 1);
    assert_eq!(aligner.counters().stale, 1);
}

#[test]
fn freshness_keeps_a_held_value_up_to_its_limit_and_expires_it_one_millisecond_later() {
    // `a` is received at 0; `b` arrives 4999, 5000 and 5001 ms later.
    for (wait, expected) in [
        (4_999, frame(4_999, &[1.0, 2.0])),
        (5_000, frame(5_000, &[1.0, 2.0])),
        (5_001, Admission::Held),
    ] {
        let mut aligner = aligner();
        // Source times stay within the skew so only freshness can decide.
        admit_now(&mut aligner, A, 0, 1.0);
        let result = aligner.admit(obs(B, 500, wait, 2.0), t(wait));
        let expected = match expected {
            Admission::FrameReady(f) => Admission::FrameReady(Frame { ts: t(500), ..f }),
            other => other,
        };
        assert_eq!(result, expected, "waited {wait} ms");
        let expired = u64::from(wait > 5_000);
        assert_eq!(aligner.counters().expired, expired);
        assert_eq!(aligner.held_values(), usize::from(wait > 5_000));
    }
}

#[test]
fn freshness_is_measured_from_receipt_so_queue_time_counts() {
    let mut aligner = aligner();
    admit_now(&mut aligner, A, 0, 1.0);
    // `b` was received at 100 but processed after a long queue wait.
    assert_eq!(
        aligner.admit(obs(B, 100, 100, 2.0), t(5_001)),
        Admission::Held
    );
    assert_eq!(aligner.counters().expired, 1);
}

#[test]
fn expire_drops_waiting_values_without_an_incoming_observation() {
    let mut aligner = aligner();
    admit_now(&mut aligner, A, 0, 1.0);
    assert_eq!(aligner.expire(t(5_000)), 0);
    assert_eq!(aligner.expire(t(5_001)), 1);
    assert_eq!(aligner.held_values(), 0);
}

#[test]
fn skew_admits_a_spread_up_to_its_limit_and_drops_the_oldest_value_beyond_it() {
    for (spread, expected) in [
        (999, frame(999, &[1.0, 2.0])),
        (1_000, frame(1_000, &[1.0, 2.0])),
        (1_001, Admission::Held),
    ] {
        let mut aligner = aligner();
        admit_now(&mut aligner, A, 0, 1.0);
        assert_eq!(
            admit_now(&mut aligner, B, spread, 2.0),
            expected,
            "spread {spread} ms"
        );
        assert_eq!(aligner.counters().skew, u64::from(spread > 1_000));
        // Beyond the limit the newer value stays and the older one is gone.
        assert_eq!(aligner.held_values(), usize::from(spread > 1_000));
    }
}

#[test]
fn an_incoming_value_too_far_behind_the_partial_frame_is_rejected_for_skew() {
    let mut aligner = aligner();
    admit_now(&mut aligner, A, 1_001, 1.0);
    assert_eq!(
        aligner.admit(obs(B, 0, 1_001, 2.0), t(1_001)),
        Admission::Rejected(AlignRejection::Skew)
    );
    // Rejected, so `b` may still deliver anything newer than before.
    assert_eq!(aligner.watermarks().get("b"), None);
    assert_eq!(
        aligner.admit(obs(B, 1, 1_001, 2.0), t(1_001)),
        frame(1_001, &[1.0, 2.0])
    );
}

#[test]
fn rejected_observations_never_move_a_watermark() {
    let mut aligner = aligner();
    admit_now(&mut aligner, A, 0, 1.0);
    let before = aligner.watermarks().clone();
    aligner.admit(obs(A, 10_000, 0, 1.0), t(0)); // future
    aligner.admit(obs(A, 1, 1, 1.0), t(40_000)); // too old
    aligner.admit(obs(A, 0, 1, 1.0), t(1)); // stale
    assert_eq!(aligner.watermarks(), &before);
    assert_eq!(aligner.counters().rejected_total(), 3);
}

#[test]
fn restore_keeps_watermarks_and_counters_and_starts_with_an_empty_partial_frame() {
    let mut before = aligner();
    admit_now(&mut before, A, 0, 1.0);
    admit_now(&mut before, B, 0, 2.0);
    admit_now(&mut before, A, 10, 3.0);
    let mut restored = Aligner::restore(
        policy(),
        &readings(),
        before.watermarks().clone(),
        before.counters().clone(),
    )
    .unwrap();
    assert_eq!(restored.watermarks(), before.watermarks());
    assert_eq!(restored.counters(), before.counters());
    assert_eq!(restored.held_values(), 0);
    // A retained message re-delivered after the restart cannot advance it.
    assert_eq!(
        admit_now(&mut restored, B, 0, 2.0),
        Admission::Rejected(AlignRejection::Stale)
    );
    // The value of `a` held before the restart is gone: `b` alone is not a frame.
    assert_eq!(admit_now(&mut restored, B, 11, 2.0), Admission::Held);
}

#[test]
fn restore_refuses_a_watermark_for_a_reading_the_monitor_lacks() {
    let mut marks = Watermarks::default();
    marks.advance("gone", t(0));
    let result = Aligner::restore(policy(), &readings(), marks, AlignmentCounters::default());
    assert_eq!(
        result.err(),
        Some(AlignError::UnknownWatermark("gone".into()))
    );
}

#[test]
fn reset_partial_reports_the_values_it_discarded_and_keeps_watermarks() {
    let mut aligner = aligner();
    admit_now(&mut aligner, A, 0, 1.0);
    let marks = aligner.watermarks().clone();
    assert_eq!(aligner.reset_partial(), 1);
    assert_eq!(aligner.reset_partial(), 0);
    assert_eq!(aligner.watermarks(), &marks);
}

#[test]
fn readings_without_a_required_one_or_with_a_repeated_name_are_refused() {
    let mut optional_only = readings();
    optional_only.retain(|r| !r.required);
    assert_eq!(
        Aligner::new(policy(), &optional_only).err(),
        Some(AlignError::NoRequiredReading)
    );
    let mut repeated = readings();
    repeated.push(repeated[0].clone());
    assert_eq!(
        Aligner::new(policy(), &repeated).err(),
        Some(AlignError::DuplicateReading("a".into()))
    );
}

#[test]
fn absurd_policy_values_saturate_instead_of_panicking() {
    let huge = AlignmentPolicy {
        freshness_ms: u64::MAX,
        max_age_ms: u64::MAX,
        future_tolerance_ms: u64::MAX,
        max_skew_ms: u64::MAX,
        silence_ms: None,
    };
    let mut aligner = Aligner::new(huge, &readings()).unwrap();
    let far = DateTime::<Utc>::MAX_UTC;
    let early = DateTime::<Utc>::MIN_UTC;
    let a = Observation {
        reading: A,
        ts: far,
        value: 1.0,
        received_at: early,
    };
    assert_eq!(aligner.admit(a, early), Admission::Held);
}

/// One step of a generated stream.
#[derive(Debug, Clone)]
struct Step {
    reading: usize,
    /// Source time relative to receipt, ms.
    ahead: i64,
    /// Time spent queued, ms.
    queued: i64,
    /// How far the receipt clock moves before this step, ms.
    advance: i64,
    value: f64,
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    let step = (
        0usize..4,
        prop_oneof![4 => -500i64..200, 1 => -9_000i64..3_000],
        prop_oneof![49 => 0i64..100, 1 => 0i64..5_000],
        0i64..300,
        -1e3f64..1e3,
    )
        .prop_map(|(reading, ahead, queued, advance, value)| Step {
            reading,
            ahead,
            queued,
            advance,
            value,
        });
    proptest::collection::vec(step, 1..120)
}

fn policies() -> impl Strategy<Value = AlignmentPolicy> {
    (300u64..5_000, 500u64..8_000, 0u64..2_000, 0u64..2_000).prop_map(
        |(freshness_ms, max_age_ms, future_tolerance_ms, max_skew_ms)| AlignmentPolicy {
            freshness_ms,
            max_age_ms,
            future_tolerance_ms,
            max_skew_ms,
            silence_ms: None,
        },
    )
}

/// Turns steps into (observation, processing time) pairs. Processing time
/// never goes backwards, as with one FIFO ingress queue.
fn observations(steps: &[Step]) -> Vec<(Observation, DateTime<Utc>)> {
    let mut clock = 0;
    let mut processed = 0;
    steps
        .iter()
        .map(|s| {
            clock += s.advance;
            processed = (clock + s.queued).max(processed);
            (
                obs(s.reading, clock + s.ahead, clock, s.value),
                t(processed),
            )
        })
        .collect()
}

proptest! {
    #[test]
    fn only_accepted_observations_move_watermarks_and_only_upwards(
        policy in policies(), steps in steps(),
    ) {
        let mut aligner = Aligner::new(policy, &readings()).unwrap();
        let names = ["a", "b", "o"];
        for (o, now) in observations(&steps) {
            let before = aligner.watermarks().clone();
            let admission = aligner.admit(o.clone(), now);
            let after = aligner.watermarks();
            if let Admission::Rejected(_) = admission {
                prop_assert_eq!(after, &before);
            } else {
                prop_assert_eq!(after.get(names[o.reading]), Some(o.ts));
                for name in names {
                    prop_assert!(after.get(name) >= before.get(name));
                }
            }
        }
    }

    #[test]
    fn frames_use_each_accepted_value_once_within_skew_and_freshness_in_source_time_order(
        policy in policies(), steps in steps(),
    ) {
        let mut aligner = Aligner::new(policy.clone(), &readings()).unwrap();
        // Each observation's value is its index, so a frame names its parts.
        let stream: Vec<(Observation, DateTime<Utc>)> = observations(&steps)
            .into_iter()
            .enumerate()
            .map(|(i, (o, now))| (Observation { value: i as f64, ..o }, now))
            .collect();
        let mut accepted: std::collections::BTreeMap<usize, Observation> = Default::default();
        let mut used = std::collections::BTreeSet::new();
        let mut last_in_frame: [Option<DateTime<Utc>>; 2] = [None, None];
        let mut skew_rejections = 0u64;
        for (o, now) in stream {
            let id = o.value as usize;
            let admission = aligner.admit(o.clone(), now);
            if matches!(admission, Admission::Held | Admission::FrameReady(_)) {
                accepted.insert(id, o);
            }
            prop_assert!(aligner.open_frames() <= MAX_OPEN_FRAMES);
            match admission {
                Admission::Rejected(AlignRejection::Skew) => skew_rejections += 1,
                Admission::FrameReady(frame) => {
                    let parts: Vec<&Observation> = frame.values.iter()
                        .map(|v| accepted.get(&(*v as usize)))
                        .collect::<Option<_>>()
                        .ok_or_else(|| TestCaseError::fail("a frame value that was never accepted"))?;
                    for (position, part) in parts.iter().enumerate() {
                        prop_assert_eq!(part.reading, position, "values in reading order");
                        prop_assert!(used.insert(part.value as usize), "a value used twice");
                        prop_assert!(now - part.received_at <= policy.freshness());
                        prop_assert!(last_in_frame[position] < Some(part.ts), "frames in source-time order");
                        last_in_frame[position] = Some(part.ts);
                    }
                    let newest = parts.iter().map(|p| p.ts).max().unwrap();
                    let oldest = parts.iter().map(|p| p.ts).min().unwrap();
                    prop_assert_eq!(frame.ts, newest);
                    prop_assert!(newest - oldest <= policy.max_skew());
                }
                _ => {}
            }
        }
        // Every accepted required value is in a frame, dropped, superseded or still held.
        let accepted_required = accepted.len() as u64;
        let c = aligner.counters();
        let held_drops = c.skew - skew_rejections;
        prop_assert_eq!(
            accepted_required,
            c.frames * 2 + c.expired + held_drops + c.superseded + aligner.held_values() as u64
        );
    }

    #[test]
    fn replaying_a_stream_into_a_restored_aligner_is_all_stale(
        policy in policies(), steps in steps(),
    ) {
        let mut live = Aligner::new(policy.clone(), &readings()).unwrap();
        let stream = observations(&steps);
        let mut accepted = Vec::new();
        for (o, now) in &stream {
            if !matches!(live.admit(o.clone(), *now), Admission::Rejected(_)) {
                accepted.push(o.clone());
            }
        }
        let mut restored = Aligner::restore(
            policy, &readings(), live.watermarks().clone(), AlignmentCounters::default(),
        ).unwrap();
        let marks = restored.watermarks().clone();
        for o in accepted {
            // Replayed at its receipt time, so only the watermark can refuse it.
            let now = o.received_at;
            prop_assert_eq!(restored.admit(o, now), Admission::Rejected(AlignRejection::Stale));
        }
        prop_assert_eq!(restored.watermarks(), &marks);
        prop_assert_eq!(restored.counters().frames, 0);
    }
}

#[test]
fn durations_are_compared_as_whole_milliseconds() {
    // Sub-millisecond source timestamps (from RFC 3339 payloads) are compared
    // exactly: one microsecond past the tolerance is already too far ahead.
    let mut aligner = aligner();
    let received = t(0);
    let o = Observation {
        reading: A,
        ts: received + TimeDelta::milliseconds(2_000) + TimeDelta::microseconds(1),
        value: 1.0,
        received_at: received,
    };
    assert_eq!(
        aligner.admit(o, received),
        Admission::Rejected(AlignRejection::Future)
    );
}

/// Readings `r0`..`r{n-1}`, all required.
fn required(n: usize) -> Vec<ReadingConfig> {
    (0..n)
        .map(|i| ReadingConfig {
            name: format!("r{i}"),
            topic: format!("plant/r{i}"),
            required: true,
        })
        .collect()
}

fn exact_policy() -> AlignmentPolicy {
    AlignmentPolicy {
        max_skew_ms: 0,
        ..policy()
    }
}

#[test]
fn a_tick_whose_next_reading_arrives_first_still_forms_its_frame() {
    let mut aligner = aligner();
    let aligner_exact = &mut Aligner::new(exact_policy(), &readings()).unwrap();
    for aligner in [&mut aligner, aligner_exact] {
        // Tick 10 of `a`, then tick 20 of `a` before tick 10 of `b`.
        admit_now(aligner, A, 10, 1.0);
        assert_eq!(aligner.admit(obs(A, 20, 20, 3.0), t(20)), Admission::Held);
        assert_eq!(aligner.open_frames(), 2);
        assert_eq!(
            aligner.admit(obs(B, 10, 21, 2.0), t(21)),
            frame(10, &[1.0, 2.0])
        );
        assert_eq!(
            aligner.admit(obs(B, 20, 22, 4.0), t(22)),
            frame(20, &[3.0, 4.0])
        );
        assert_eq!(aligner.counters().superseded, 0);
        assert_eq!(aligner.counters().frames, 2);
        assert_eq!(aligner.held_values(), 0);
    }
}

#[test]
fn open_frames_are_bounded_and_the_oldest_makes_room_as_superseded() {
    let mut aligner = Aligner::new(exact_policy(), &readings()).unwrap();
    let n = MAX_OPEN_FRAMES as i64 + 3;
    for i in 0..n {
        assert_eq!(admit_now(&mut aligner, A, i, i as f64), Admission::Held);
    }
    assert_eq!(aligner.open_frames(), MAX_OPEN_FRAMES);
    assert_eq!(aligner.held_values(), MAX_OPEN_FRAMES);
    assert_eq!(aligner.counters().superseded, 3);
    // The newest open frame completes; the older ones are overtaken.
    assert_eq!(
        aligner.admit(obs(B, n - 1, n, 9.0), t(n)),
        frame(n - 1, &[(n - 1) as f64, 9.0])
    );
    assert_eq!(aligner.open_frames(), 0);
    assert_eq!(aligner.counters().superseded, n as u64 - 1);
}

#[test]
fn a_frame_whose_missing_reading_moved_past_it_is_dropped_for_skew() {
    let mut aligner = Aligner::new(exact_policy(), &readings()).unwrap();
    admit_now(&mut aligner, A, 0, 1.0);
    admit_now(&mut aligner, A, 10, 2.0);
    // `b` at 10: the frame at 0 can never get a `b` now.
    assert_eq!(admit_now(&mut aligner, B, 10, 3.0), frame(10, &[2.0, 3.0]));
    assert_eq!(
        aligner.counters().superseded,
        1,
        "overtaken by the frame at 10"
    );
    admit_now(&mut aligner, A, 20, 1.0);
    assert_eq!(admit_now(&mut aligner, B, 30, 1.0), Admission::Held);
    assert_eq!(
        aligner.counters().skew,
        1,
        "a at 20 can no longer get its b"
    );
    assert_eq!(aligner.held_values(), 1);
}

proptest! {
    #[test]
    fn interleaved_ticks_within_the_open_frame_bound_all_form_their_frames(
        width in 2usize..6,
        ticks in 1usize..60,
        picks in proptest::collection::vec(any::<proptest::sample::Index>(), 400),
        lag in 0usize..MAX_OPEN_FRAMES,
    ) {
        let mut aligner = Aligner::new(exact_policy(), &required(width)).unwrap();
        // Each reading delivers its ticks in order; readings run at most
        // `lag` ticks ahead of the slowest one, in any interleaving.
        let mut next = vec![0usize; width];
        let mut picks = picks.into_iter().cycle();
        let mut frames = Vec::new();
        while next.iter().any(|&n| n < ticks) {
            let slowest = *next.iter().min().unwrap();
            let ready: Vec<usize> = (0..width)
                .filter(|&r| next[r] < ticks && next[r] <= slowest + lag)
                .collect();
            let reading = ready[picks.next().unwrap().index(ready.len())];
            let tick = next[reading] as i64;
            next[reading] += 1;
            let ts = tick * 10;
            let o = obs(reading, ts, ts + 5, (tick * 100 + reading as i64) as f64);
            if let Admission::FrameReady(frame) = aligner.admit(o, t(ts + 5)) {
                frames.push(frame);
            }
        }
        prop_assert_eq!(frames.len(), ticks, "{:?}", aligner.counters());
        for (tick, frame) in frames.iter().enumerate() {
            let expected: Vec<f64> = (0..width).map(|r| (tick * 100 + r) as f64).collect();
            prop_assert_eq!(&frame.values, &expected);
        }
        prop_assert_eq!(aligner.counters().superseded, 0);
        prop_assert_eq!(aligner.held_values(), 0);
    }
}
