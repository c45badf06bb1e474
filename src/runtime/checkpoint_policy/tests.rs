use super::*;

fn limits() -> CheckpointLimits {
    CheckpointLimits {
        interval_frames: 10,
        max_interval: Duration::from_secs(30),
        timeout: Duration::from_secs(30),
    }
}

fn secs(t0: Instant, s: u64) -> Instant {
    t0 + Duration::from_secs(s)
}

#[test]
fn the_frame_interval_triggers_exactly_at_the_configured_count() {
    let t0 = Instant::now();
    let mut p = CheckpointPolicy::new(limits());
    assert_eq!(p.on_frames(9, t0), None);
    assert_eq!(p.on_frames(1, t0), Some(Trigger::FrameInterval));
    assert_eq!(p.started(t0).0, Some(Trigger::FrameInterval));
    assert_eq!(
        p.on_frames(9, t0),
        None,
        "the count restarts when a checkpoint starts"
    );
}

#[test]
fn the_max_interval_counts_from_the_oldest_uncommitted_change() {
    let t0 = Instant::now();
    let mut p = CheckpointPolicy::new(limits());
    assert_eq!(p.due(secs(t0, 100)), None, "nothing changed");
    p.on_frames(1, secs(t0, 100));
    assert_eq!(p.due(secs(t0, 129)), None);
    assert_eq!(p.due(secs(t0, 130)), Some(Trigger::MaxInterval));
}

#[test]
fn requested_triggers_are_due_at_once_and_the_first_reason_is_kept() {
    let t0 = Instant::now();
    let mut p = CheckpointPolicy::new(limits());
    p.request(Trigger::PhaseChange, t0);
    p.request(Trigger::CoverageChange, t0);
    assert_eq!(p.due(t0), Some(Trigger::PhaseChange));
    assert_eq!(p.started(t0).0, Some(Trigger::PhaseChange));
    assert_eq!(p.due(t0), None);
}

#[test]
fn a_failed_checkpoint_stays_due() {
    let t0 = Instant::now();
    let mut p = CheckpointPolicy::new(limits());
    p.request(Trigger::Shutdown, t0);
    let (trigger, attempt) = p.started(t0);
    p.failed(attempt, trigger, t0);
    assert_eq!(p.due(t0), None, "not before the retry pause ends");
    assert_eq!(p.due(secs(t0, 1)), Some(Trigger::Shutdown));
}

#[test]
fn a_failed_evidence_batch_starts_the_stall_clock_until_any_write_commits() {
    let t0 = Instant::now();
    let mut p = CheckpointPolicy::new(limits());
    p.batch_failed(secs(t0, 10));
    p.batch_failed(secs(t0, 20));
    assert!(!p.stalled(secs(t0, 40)), "the timeout has not passed");
    assert!(p.stalled(secs(t0, 41)), "counted from the first failure");
    p.batch_committed();
    assert!(!p.stalled(secs(t0, 41)), "a committed batch clears it");
    p.batch_failed(secs(t0, 50));
    let (_, attempt) = p.started(secs(t0, 60));
    p.committed(attempt);
    assert!(
        !p.stalled(secs(t0, 100)),
        "a committed checkpoint clears it"
    );
}

#[test]
fn an_idle_monitor_never_stalls() {
    let t0 = Instant::now();
    let mut p = CheckpointPolicy::new(limits());
    p.request(Trigger::BeforeSubscribing, t0);
    let (_, attempt) = p.started(t0);
    p.committed(attempt);
    assert!(!p.stalled(secs(t0, 3600)), "no change waits for a commit");
}

#[test]
fn the_model_stalls_when_a_checkpoint_goes_uncommitted_longer_than_the_timeout() {
    let t0 = Instant::now();
    let mut p = CheckpointPolicy::new(limits());
    p.on_frames(1, secs(t0, 100));
    let due = p.due(secs(t0, 130));
    assert_eq!(due, Some(Trigger::MaxInterval));
    let (trigger, first) = p.started(secs(t0, 130));
    assert!(
        !p.stalled(secs(t0, 160)),
        "a checkpoint in flight, exactly at the limit"
    );
    assert!(
        p.stalled(secs(t0, 161)),
        "still not committed after the timeout"
    );
    p.failed(first, trigger, secs(t0, 161));
    assert!(
        p.stalled(secs(t0, 161)),
        "a failure does not reset the clock"
    );
    let (_, retry) = p.started(secs(t0, 161));
    assert!(
        p.stalled(secs(t0, 162)),
        "a retry does not reset the clock either"
    );
    p.committed(retry);
    assert!(!p.stalled(secs(t0, 200)), "a commit clears it");
}

/// With the defaults (maximum interval = timeout = 30 s) a change that
/// waited out the maximum interval must not count as a stalled write:
/// the checkpoint it triggers has the whole timeout to commit.
#[test]
fn a_change_that_waited_the_maximum_interval_is_not_a_stall() {
    let t0 = Instant::now();
    let mut p = CheckpointPolicy::new(limits());
    p.on_frames(1, t0);
    assert_eq!(p.due(secs(t0, 31)), Some(Trigger::MaxInterval));
    assert!(!p.stalled(secs(t0, 31)), "nothing has been written yet");
    let (_, attempt) = p.started(secs(t0, 31));
    assert!(!p.stalled(secs(t0, 32)), "the write has just started");
    p.committed(attempt);
    assert!(!p.stalled(secs(t0, 3600)));
}

#[test]
fn the_commit_of_an_older_attempt_leaves_the_newer_ones_clock() {
    let t0 = Instant::now();
    let mut p = CheckpointPolicy::new(limits());
    p.on_frames(1, t0);
    let (_, first) = p.started(t0);
    p.on_frames(1, secs(t0, 5));
    let (_, second) = p.started(secs(t0, 10));
    p.committed(first);
    assert_eq!(p.waiting(secs(t0, 12)), Duration::from_secs(2));
    p.committed(second);
    assert_eq!(p.waiting(secs(t0, 12)), Duration::ZERO);
}

#[test]
fn a_later_commit_settles_an_earlier_coalesced_attempt() {
    let t0 = Instant::now();
    let mut p = CheckpointPolicy::new(limits());
    let (_, replaced) = p.started(t0);
    let (_, newer) = p.started(secs(t0, 1));
    p.committed(newer);
    assert!(
        !p.stalled(secs(t0, 100)),
        "{replaced:?} was overtaken by a later commit"
    );
}

#[test]
fn a_failure_after_a_commit_restarts_the_due_clock_from_the_failed_changes() {
    let t0 = Instant::now();
    let mut p = CheckpointPolicy::new(limits());
    p.on_frames(1, secs(t0, 10));
    let (trigger, attempt) = p.started(secs(t0, 40));
    p.failed(attempt, trigger, secs(t0, 40));
    assert_eq!(p.due(secs(t0, 41)), Some(Trigger::MaxInterval));
}

/// During an outage a checkpoint is due again only after pauses that
/// double up to the timeout, not on every batch of frames.
#[test]
fn failed_checkpoints_are_retried_after_doubling_pauses_not_on_every_batch() {
    let t0 = Instant::now();
    let mut p = CheckpointPolicy::new(CheckpointLimits {
        interval_frames: 10,
        max_interval: Duration::from_secs(1),
        timeout: Duration::from_secs(5),
    });
    let mut starts = Vec::new();
    // 10 frames per second for 30 s, a batch every 100 ms; every write fails.
    for tick in 0..300u64 {
        let at = t0 + Duration::from_millis(100 * tick);
        p.on_frames(1, at);
        if p.due(at).is_some() {
            let (trigger, attempt) = p.started(at);
            starts.push(tick / 10);
            p.failed(attempt, trigger, at);
        }
    }
    assert_eq!(starts, [0, 1, 3, 7, 12, 17, 22, 27]);
    let (_, attempt) = p.started(secs(t0, 30));
    p.committed(attempt);
    p.on_frames(10, secs(t0, 30));
    assert!(p.due(secs(t0, 30)).is_some(), "a commit ends the pause");
}

#[test]
fn a_policy_is_quiet_only_once_every_change_has_committed() {
    let t0 = Instant::now();
    let mut p = CheckpointPolicy::new(limits());
    assert!(p.quiet(), "a new policy has nothing to do");
    p.on_frames(1, t0);
    assert!(!p.quiet(), "the max interval can fall due");
    let (_, attempt) = p.started(t0);
    assert!(
        !p.quiet(),
        "the stall clock runs while the write is in flight"
    );
    p.committed(attempt);
    assert!(p.quiet());
    p.batch_failed(t0);
    assert!(!p.quiet(), "a failed batch can stall the model");
    p.batch_committed();
    assert!(p.quiet());
}

/// One step of the property tests' random histories: a frame, a request,
/// a started checkpoint, the newest attempt committed or failed, or a
/// failed evidence batch.
fn apply(
    p: &mut CheckpointPolicy,
    attempts: &mut Vec<(Option<Trigger>, Attempt)>,
    kind: u8,
    at: Instant,
) {
    match kind {
        0 => {
            p.on_frames(1, at);
        }
        1 => {
            p.request(Trigger::CoverageChange, at);
        }
        2 => attempts.push(p.started(at)),
        3 => {
            if let Some((_, attempt)) = attempts.pop() {
                p.committed(attempt);
            }
        }
        4 => {
            if let Some((trigger, attempt)) = attempts.pop() {
                p.failed(attempt, trigger, at);
            }
        }
        _ => p.batch_failed(at),
    }
}

proptest::proptest! {
    /// Whatever happened before: before the policy's next deadline, time
    /// passing alone changes neither what is due nor whether the model
    /// stalls (what a model that skips its ticks until then relies on).
    #[test]
    fn nothing_falls_due_before_the_next_deadline(
        steps in proptest::collection::vec((0u8..6, 0u64..40), 1..40),
        fractions in proptest::collection::vec(0u32..1000, 1..10),
    ) {
        let t0 = Instant::now();
        let mut p = CheckpointPolicy::new(limits());
        let mut now = 0u64;
        let mut attempts = Vec::new();
        for (kind, advance) in steps {
            now += advance;
            let at = secs(t0, now);
            apply(&mut p, &mut attempts, kind, at);
            let Some(deadline) = p.next_deadline() else { continue };
            proptest::prop_assert!(p.pending.is_none() && !p.quiet());
            if deadline <= at {
                // Passed: the caller ticks at once.
                continue;
            }
            let mut q = p.clone();
            let (due_now, stalled_now) = (q.due(at), q.stalled(at));
            proptest::prop_assert_eq!(due_now, None);
            for f in &fractions {
                let before = at + (deadline - at).mul_f64(f64::from(*f) / 1000.0);
                if before >= deadline {
                    continue;
                }
                let mut q = p.clone();
                proptest::prop_assert_eq!(q.due(before), None);
                proptest::prop_assert_eq!(q.stalled(before), stalled_now);
            }
            // And the deadline is not later than needed.
            let mut q = p.clone();
            let changed = q.due(deadline).is_some() || q.stalled(deadline) != stalled_now;
            proptest::prop_assert!(changed, "nothing changed at the deadline");
        }
    }

    /// Whatever happened before: once the policy is quiet, no amount of
    /// time passing makes a checkpoint due or the model stalled.
    #[test]
    fn a_quiet_policy_stays_idle_whatever_the_clock_says(
        steps in proptest::collection::vec((0u8..6, 0u64..40), 1..40),
        later in proptest::collection::vec(0u64..100_000, 1..10),
    ) {
        let t0 = Instant::now();
        let mut p = CheckpointPolicy::new(limits());
        let mut now = 0u64;
        let mut attempts = Vec::new();
        for (kind, advance) in steps {
            now += advance;
            let at = secs(t0, now);
            apply(&mut p, &mut attempts, kind, at);
            if p.quiet() {
                for after in &later {
                    let mut q = p.clone();
                    let at = secs(t0, now + after);
                    proptest::prop_assert_eq!(q.due(at), None);
                    proptest::prop_assert!(!q.stalled(at));
                }
            }
        }
    }

    /// Whatever the mix of frames, requests and ticks: while every
    /// checkpoint commits within the timeout of its start, the model
    /// never stalls; and once one has been outstanding longer, it does.
    #[test]
    fn stalls_exactly_when_a_started_checkpoint_outlives_the_timeout(
        steps in proptest::collection::vec((0u8..4, 0u64..20, 0u64..50), 1..60)
    ) {
        let t0 = Instant::now();
        let mut p = CheckpointPolicy::new(limits());
        let mut now = 0u64;
        let mut in_flight: Option<(Attempt, u64, u64)> = None;
        for (kind, advance, commit_after) in steps {
            now += advance;
            let at = secs(t0, now);
            if let Some((attempt, started, after)) = in_flight
                && now >= started + after
            {
                p.committed(attempt);
                in_flight = None;
            }
            match kind {
                0 => { p.on_frames(1, at); }
                1 => { p.request(Trigger::CoverageChange, at); }
                _ => {}
            }
            if in_flight.is_none() && p.due(at).is_some() {
                let (_, attempt) = p.started(at);
                in_flight = Some((attempt, now, commit_after));
            }
            let expect = in_flight
                .is_some_and(|(_, started, _)| now - started > limits().timeout.as_secs());
            proptest::prop_assert_eq!(p.stalled(at), expect);
        }
    }
}
