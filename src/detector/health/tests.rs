//! Health window tests: the kept keys and tallies against a count afresh.

use super::*;

#[test]
fn scores_from_the_calibration_law_show_no_drift_and_shifted_ones_do() {
    let calibration: Vec<f64> = (0..200).map(|i| f64::from(i) / 200.0).collect();
    let mut same = HealthWindow::new(100);
    let mut shifted = HealthWindow::new(100);
    for i in 0..100 {
        same.push(false, f64::from(i) / 100.0 + 0.002);
        shifted.push(i % 2 == 0, f64::from(i) / 100.0 + 0.6);
    }
    let fine = same.assess(&calibration, 0.01, 100);
    let bad = shifted.assess(&calibration, 0.01, 100);
    assert!(fine.score_drift < 0.05 && fine.drift_p_value > 0.5);
    assert!(bad.score_drift > 0.5 && bad.drift_p_value < 1e-6);
    assert_eq!(bad.flag_rate, 0.5);
}

proptest::proptest! {
    #[test]
    fn the_sort_free_distance_is_bit_identical_to_the_merge(
        a in proptest::collection::vec(-20i32..20, 0..60),
        b in proptest::collection::vec(-20i32..20, 0..30),
        scale in proptest::prop_oneof![proptest::strategy::Just(1.0), 0.1f64..3.0],
    ) {
        // Small integers give many ties within and between the samples.
        let a: Vec<f64> = a.into_iter().map(|x| f64::from(x) * scale).collect();
        let mut b: Vec<f64> = b.into_iter().map(|x| f64::from(x) * scale).collect();
        b.sort_unstable_by(f64::total_cmp);
        let mut sorted = a.clone();
        sorted.sort_unstable_by(f64::total_cmp);
        let fast = ks_distance_against_sorted(a.iter().copied(), a.len(), &b);
        proptest::prop_assert_eq!(fast.to_bits(), ks_distance(&sorted, &b).to_bits());
    }
}

proptest::proptest! {
    #[test]
    fn a_window_kept_frame_by_frame_assesses_bit_identically_to_the_merge(
        scores in proptest::collection::vec(-20i32..20, 1..120),
        first in proptest::collection::vec(-20i32..20, 0..30),
        second in proptest::collection::vec(-20i32..20, 0..30),
        capacity in 1usize..40,
        refresh in 1usize..12,
    ) {
        // Two calibrations taken in turn: the kept keys must follow the
        // one they are given, as after a restore or a new fit.
        let calibrations: Vec<Vec<f64>> = [first, second]
            .into_iter()
            .map(|c| {
                let mut c: Vec<f64> = c.into_iter().map(|x| f64::from(x) * 0.5).collect();
                c.sort_unstable_by(f64::total_cmp);
                c
            })
            .collect();
        let mut window = HealthWindow::new(capacity);
        for (i, s) in scores.iter().enumerate() {
            // Every other score placed by the caller among the
            // calibration the next refresh is given, as the detector does.
            let score = f64::from(*s) * 0.5;
            if s % 2 == 0 {
                let next = i.div_ceil(refresh) * refresh;
                let upcoming = &calibrations[(next / refresh / 3) % 2];
                let below = upcoming.partition_point(|c| *c < score);
                window.push_placed(s % 3 == 0, score, upcoming, below);
            } else {
                window.push(s % 3 == 0, score);
            }
            if !window.keys.against.is_empty() {
                // Kept up to date, not rebuilt at the next refresh.
                proptest::prop_assert_eq!(window.keys.keys.len(), window.recent.len());
            }
            if i % refresh == 0 {
                let calibration = &calibrations[(i / refresh / 3) % 2];
                let kept = window.assess(calibration, 0.01, i as u64);
                let mut sorted: Vec<f64> = window.recent.iter().map(|(_, s)| *s).collect();
                sorted.sort_unstable_by(f64::total_cmp);
                let merged = ks_distance(&sorted, calibration);
                proptest::prop_assert_eq!(kept.score_drift.to_bits(), merged.to_bits());
            }
        }
    }
}

#[test]
fn an_empty_window_reports_no_drift() {
    let health = HealthWindow::new(10).assess(&[1.0], 0.05, 0);
    assert_eq!(health.flag_rate, 0.0);
    assert_eq!(health.drift_p_value, 1.0);
}

proptest::proptest! {
    /// Flagged frames and scores that are not finite, counted as frames
    /// enter and leave the window, against counting the window afresh; a
    /// restore (which leaves the tally unknown) at random points.
    #[test]
    fn the_kept_tally_is_the_window_counted_afresh(
        frames in proptest::collection::vec(
            (
                proptest::prelude::any::<bool>(),
                proptest::prop_oneof![
                    6 => -5.0f64..5.0,
                    1 => proptest::strategy::Just(f64::NAN),
                    1 => proptest::strategy::Just(f64::NEG_INFINITY),
                ],
                0u8..10,
            ),
            1..200,
        ),
        capacity in 1usize..30,
    ) {
        let mut window = HealthWindow::new(capacity);
        for (i, &(flagged, score, event)) in frames.iter().enumerate() {
            window.push(flagged, score);
            if event == 0 {
                window.tally = WindowTally::default();
            }
            let fresh = (
                window.recent.iter().filter(|(f, _)| *f).count(),
                window.recent.iter().filter(|(_, s)| !s.is_finite()).count(),
            );
            if let Some(kept) = window.tally.0 {
                proptest::prop_assert_eq!(kept, fresh, "frame {}", i);
            }
            if event < 3 {
                let health = window.assess(&[0.0, 1.0], 0.01, i as u64);
                let rate = fresh.0 as f64 / window.recent.len() as f64;
                proptest::prop_assert_eq!(health.flag_rate.to_bits(), rate.to_bits());
                proptest::prop_assert_eq!(window.tally.0, Some(fresh));
            }
        }
    }
}
