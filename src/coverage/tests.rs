use chrono::{DateTime, Utc};
use proptest::prelude::*;

use super::*;
use GapCause::*;

/// Seconds after a fixed origin.
fn t(seconds: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(1_800_000_000 + seconds, 0).unwrap()
}

fn gap(cause: GapCause, from: i64, to: Option<i64>) -> Gap {
    Gap {
        cause,
        from: t(from),
        to: to.map(t),
    }
}

#[test]
fn closed_since_names_each_gap_closed_in_between_once() {
    let mut h = CoverageHistory::fresh(t(0));
    let start = h.clone();
    h.record_frame(t(2));
    let closed: Vec<Gap> = h.closed_since(&start).cloned().collect();
    assert_eq!(closed, vec![gap(Startup, 0, Some(2))]);
    let after_first = h.clone();
    h.open_gap(MqttOutage, t(5));
    assert_eq!(h.closed_since(&after_first).count(), 0, "still open");
    let open = h.clone();
    h.close_gap(MqttOutage, t(9));
    let closed: Vec<Gap> = h.closed_since(&open).cloned().collect();
    assert_eq!(closed, vec![gap(MqttOutage, 5, Some(9))]);
    assert_eq!(h.closed_since(&h.clone()).count(), 0, "nothing new");
}

#[test]
fn a_fresh_history_is_in_its_startup_gap_until_the_first_frame() {
    let mut history = CoverageHistory::fresh(t(0));
    assert_eq!(history.version, 1);
    assert_eq!(history.open(), Some(&gap(Startup, 0, None)));
    assert!(history.record_frame(t(5)));
    assert_eq!(history.version, 2);
    assert_eq!(history.gaps, [gap(Startup, 0, Some(5))]);
    assert_eq!(history.covered_from, Some(t(5)));
    assert!(history.active_causes().is_empty());
}

#[test]
fn later_frames_advance_coverage_without_a_new_version() {
    let mut history = CoverageHistory::fresh(t(0));
    history.record_frame(t(5));
    let version = history.version;
    assert!(!history.record_frame(t(6)));
    assert!(!history.record_frame(t(4)));
    assert_eq!(history.version, version);
    assert_eq!(history.covered_to, Some(t(6)));
}

#[test]
fn an_outage_gap_opens_once_and_closes_once() {
    let mut history = CoverageHistory::fresh(t(0));
    history.record_frame(t(1));
    assert!(history.open_gap(MqttOutage, t(10)));
    let version = history.version;
    assert!(!history.open_gap(MqttOutage, t(11)));
    assert_eq!(history.version, version);
    assert!(history.close_gap(MqttOutage, t(20)));
    assert!(!history.close_gap(MqttOutage, t(30)));
    assert_eq!(history.version, version + 1);
    assert_eq!(history.gaps[1], gap(MqttOutage, 10, Some(20)));
}

#[test]
fn overlapping_causes_hand_the_open_gap_over_instead_of_overlapping() {
    let mut history = CoverageHistory::fresh(t(0));
    history.record_frame(t(1));
    history.open_gap(MqttOutage, t(10));
    assert!(history.open_gap(CheckpointStall, t(15)));
    assert_eq!(
        history.gaps.len(),
        2,
        "the stall starts inside the outage gap"
    );
    assert!(history.close_gap(MqttOutage, t(20)));
    assert_eq!(history.open(), Some(&gap(CheckpointStall, 20, None)));
    assert!(history.close_gap(CheckpointStall, t(25)));
    assert_eq!(
        history.gaps,
        [
            gap(Startup, 0, Some(1)),
            gap(MqttOutage, 10, Some(20)),
            gap(CheckpointStall, 20, Some(25)),
        ]
    );
}

#[test]
fn ending_a_cause_that_does_not_own_the_open_gap_keeps_that_gap_open() {
    let mut history = CoverageHistory::fresh(t(0));
    history.open_gap(MqttOutage, t(1));
    assert!(history.close_gap(MqttOutage, t(2)));
    assert_eq!(history.gaps, [gap(Startup, 0, None)]);
}

#[test]
fn an_outage_dated_before_a_stall_gap_that_closed_covers_the_time_before_it_too() {
    let mut h = CoverageHistory::fresh(t(0));
    h.record_frame(t(7));
    // The stall is noticed at 10 and ends at 11; the MQTT loss, noticed at
    // 12, is dated from the last packet at 8.
    h.open_gap(CheckpointStall, t(10));
    h.close_gap(CheckpointStall, t(11));
    h.open_gap(MqttOutage, t(8));
    assert_eq!(
        h.gaps,
        [
            gap(Startup, 0, Some(7)),
            gap(MqttOutage, 8, Some(10)),
            gap(CheckpointStall, 10, Some(11)),
            gap(MqttOutage, 11, None),
        ]
    );
}

#[test]
fn an_outage_dated_before_an_open_stall_gap_covers_the_time_before_it_too() {
    let mut h = CoverageHistory::fresh(t(0));
    h.record_frame(t(7));
    h.open_gap(CheckpointStall, t(10));
    h.open_gap(MqttOutage, t(8));
    h.close_gap(CheckpointStall, t(11));
    assert_eq!(
        h.gaps,
        [
            gap(Startup, 0, Some(7)),
            gap(MqttOutage, 8, Some(10)),
            gap(CheckpointStall, 10, Some(11)),
            gap(MqttOutage, 11, None),
        ]
    );
}

#[test]
fn a_backdated_outage_never_covers_frames_that_were_processed() {
    let mut h = CoverageHistory::fresh(t(0));
    h.record_frame(t(9));
    h.open_gap(CheckpointStall, t(10));
    h.open_gap(MqttOutage, t(8));
    assert_eq!(h.gaps[1], gap(CheckpointStall, 10, None), "{:?}", h.gaps);
    assert_eq!(h.gaps.len(), 2);
}

#[test]
fn instants_out_of_order_are_clamped_so_gaps_never_overlap_or_invert() {
    let mut history = CoverageHistory::fresh(t(10));
    history.record_frame(t(5)); // a sensor clock behind the worker
    assert_eq!(history.gaps, [gap(Startup, 10, Some(10))]);
    history.open_gap(MqttOutage, t(3));
    history.close_gap(MqttOutage, t(1));
    assert_eq!(history.gaps[1], gap(MqttOutage, 10, Some(10)));
}

#[test]
fn a_restore_opens_a_rollback_gap_from_the_save_time_until_the_first_new_frame() {
    let mut history = CoverageHistory::fresh(t(0));
    history.record_frame(t(1));
    let version = history.version;
    assert!(history.record_restore(t(100), t(160)));
    assert!(history.version > version);
    assert_eq!(history.open(), Some(&gap(RestartRollback, 100, None)));
    let mark = history.last_restore().unwrap();
    assert_eq!(
        (mark.saved_at, mark.restored_at, mark.restores),
        (t(100), t(160), 1)
    );
    assert!(history.record_frame(t(170)));
    assert_eq!(history.gaps[1], gap(RestartRollback, 100, Some(170)));
}

#[test]
fn a_restore_ends_what_the_previous_worker_had_open_at_its_save_time() {
    let mut history = CoverageHistory::fresh(t(0));
    history.record_frame(t(1));
    history.open_gap(MqttOutage, t(50));
    history.open_gap(CheckpointStall, t(60));
    history.record_restore(t(90), t(120));
    assert_eq!(
        history.gaps[1..],
        [
            gap(MqttOutage, 50, Some(90)),
            gap(RestartRollback, 90, None)
        ]
    );
    assert_eq!(history.active_causes(), [RestartRollback]);
    assert!(!history.close_gap(CheckpointStall, t(130)));
}

#[test]
fn a_restore_before_the_first_frame_stays_in_the_startup_gap() {
    let mut history = CoverageHistory::fresh(t(0));
    history.open_gap(MqttOutage, t(2));
    history.record_restore(t(5), t(9));
    assert_eq!(history.gaps, [gap(Startup, 0, None)]);
    assert_eq!(history.active_causes(), [Startup]);
    assert_eq!(history.last_restore().unwrap().restores, 1);
}

#[test]
fn repeated_restores_before_a_frame_keep_one_rollback_gap_and_count_each_restore() {
    let mut history = CoverageHistory::fresh(t(0));
    history.record_frame(t(1));
    history.record_restore(t(10), t(20));
    history.record_restore(t(10), t(40));
    assert_eq!(history.gaps[1..], [gap(RestartRollback, 10, None)]);
    assert_eq!(history.last_restore().unwrap().restores, 2);
}

#[test]
fn totals_sum_gap_seconds_by_cause_with_the_open_gap_up_to_now() {
    let mut history = CoverageHistory::fresh(t(0));
    history.record_frame(t(4));
    history.open_gap(MqttOutage, t(10));
    history.close_gap(MqttOutage, t(13));
    history.open_gap(MqttOutage, t(20));
    let totals = history.totals(t(22));
    assert_eq!(
        totals.get(Startup),
        GapTotal {
            gaps: 1,
            millis: 4_000
        }
    );
    assert_eq!(
        totals.get(MqttOutage),
        GapTotal {
            gaps: 2,
            millis: 5_000
        }
    );
    assert_eq!(totals.gaps(), 3);
    assert_eq!(totals.seconds(), 9.0);
}

#[test]
fn covered_stretches_are_the_frame_span_minus_the_gaps() {
    let mut history = CoverageHistory::fresh(t(0));
    history.record_frame(t(4));
    history.open_gap(MqttOutage, t(10));
    history.close_gap(MqttOutage, t(13));
    history.record_frame(t(30));
    assert_eq!(history.covered_stretches(), [(t(4), t(10)), (t(13), t(30))]);
}

#[test]
fn the_gap_list_stays_bounded_and_the_totals_stay_exact() {
    let mut history = CoverageHistory::fresh(t(0));
    history.record_frame(t(1));
    let flaps = MAX_GAPS as i64 + 10;
    for i in 0..flaps {
        history.open_gap(MqttOutage, t(10 * i + 2));
        history.close_gap(MqttOutage, t(10 * i + 3));
    }
    assert_eq!(history.gaps.len(), MAX_GAPS);
    assert_eq!(history.dropped().gaps(), 11);
    let totals = history.totals(t(100_000));
    assert_eq!(totals.get(MqttOutage).gaps, flaps as u64);
    assert_eq!(totals.get(MqttOutage).millis, flaps as u64 * 1_000);
    assert_eq!(totals.get(Startup).millis, 1_000);
    assert_eq!(history.dropped_before(), Some(t(10 * 9 + 3)));
}

#[test]
fn the_history_survives_a_serde_roundtrip_unchanged() {
    let mut history = CoverageHistory::fresh(t(0));
    history.record_frame(t(1));
    history.open_gap(MqttOutage, t(5));
    history.open_gap(CheckpointStall, t(6));
    history.record_restore(t(7), t(8));
    let bytes = rmp_serde::to_vec_named(&history).unwrap();
    assert_eq!(
        rmp_serde::from_slice::<CoverageHistory>(&bytes).unwrap(),
        history
    );
    let json = serde_json::to_value(&history).unwrap();
    assert_eq!(
        serde_json::from_value::<CoverageHistory>(json).unwrap(),
        history
    );
}

#[test]
fn cause_labels_match_their_serde_names() {
    for cause in GapCause::ALL {
        let json = serde_json::to_string(&cause).unwrap();
        assert_eq!(json, format!("\"{}\"", cause.as_str()));
    }
}

#[derive(Debug, Clone)]
enum Op {
    Open(GapCause, i64),
    Close(GapCause, i64),
    Frame(i64),
    Restore(i64, i64),
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    let cause = proptest::sample::select(GapCause::ALL.to_vec());
    let op = prop_oneof![
        3 => (cause.clone(), -5i64..30).prop_map(|(c, d)| Op::Open(c, d)),
        3 => (cause, -5i64..30).prop_map(|(c, d)| Op::Close(c, d)),
        3 => (-5i64..30).prop_map(Op::Frame),
        1 => (-30i64..5, 0i64..30).prop_map(|(s, n)| Op::Restore(s, n)),
    ];
    proptest::collection::vec(op, 0..400)
}

fn check_invariants(history: &CoverageHistory) -> Result<(), TestCaseError> {
    prop_assert!(history.gaps.len() <= MAX_GAPS);
    for gap in &history.gaps {
        prop_assert!(gap.to.is_none_or(|to| to >= gap.from));
    }
    for pair in history.gaps.windows(2) {
        let end = pair[0]
            .to
            .ok_or_else(|| TestCaseError::fail("open gap before the last"))?;
        prop_assert!(end <= pair[1].from, "overlap: {:?}", pair);
    }
    let open = history.open();
    prop_assert_eq!(open.is_some(), !history.active_causes().is_empty());
    if let Some(gap) = open {
        prop_assert_eq!(Some(&gap.cause), history.active_causes().first());
    }
    let mut causes = history.active_causes().to_vec();
    causes.sort();
    causes.dedup();
    prop_assert_eq!(causes.len(), history.active_causes().len());
    Ok(())
}

proptest! {
    #[test]
    fn the_version_rises_exactly_on_reported_changes_and_gaps_never_overlap(ops in ops()) {
        let mut history = CoverageHistory::fresh(t(0));
        // A clock that mostly moves forward, with small steps back.
        let mut clock = 0;
        for op in ops {
            let before = history.clone();
            let changed = match op {
                Op::Open(cause, d) => { clock += d; history.open_gap(cause, t(clock)) }
                Op::Close(cause, d) => { clock += d; history.close_gap(cause, t(clock)) }
                Op::Frame(d) => { clock += d; history.record_frame(t(clock)) }
                Op::Restore(back, d) => { clock += d; history.record_restore(t(clock + back), t(clock)) }
            };
            if changed {
                prop_assert!(history.version > before.version);
            } else {
                prop_assert_eq!(history.version, before.version);
                prop_assert_eq!(&history.gaps, &before.gaps);
                prop_assert_eq!(history.active_causes(), before.active_causes());
            }
            // Totals never lose a gap, whether kept or dropped.
            prop_assert!(history.totals(t(clock)).gaps() >= before.totals(t(clock)).gaps());
            check_invariants(&history)?;
        }
    }

    #[test]
    fn a_closed_gap_is_never_reopened_or_moved(ops in ops()) {
        let mut history = CoverageHistory::fresh(t(0));
        let mut clock = 0;
        for op in ops {
            let closed: Vec<Gap> = history.gaps.iter().filter(|g| g.to.is_some()).cloned().collect();
            let dropped = history.dropped().gaps() as usize;
            match op {
                Op::Open(cause, d) => { clock += d; history.open_gap(cause, t(clock)); }
                Op::Close(cause, d) => { clock += d; history.close_gap(cause, t(clock)); }
                Op::Frame(d) => { clock += d; history.record_frame(t(clock)); }
                Op::Restore(back, d) => { clock += d; history.record_restore(t(clock + back), t(clock)); }
            }
            let shift = history.dropped().gaps() as usize - dropped;
            // Every closed gap is still there, unchanged and in order (a
            // backdated outage may add a closed gap in front of the newest).
            let mut kept = history.gaps.iter();
            for gap in &closed[shift.min(closed.len())..] {
                prop_assert!(kept.any(|g| g == gap), "{:?} moved: {:?}", gap, history.gaps);
            }
        }
    }
}
