//! The stuck-value channel on its own and inside the detector: calibrated
//! false-alarm rate on quantized Gaussian and heavy-tailed noise, frozen
//! readings found, finite figures on degenerate input, unchanged encoding
//! when absent, and bit-identical restores.

use proptest::prelude::*;

use super::tests::{Rng, frame, restores_bit_identically, student_t3};
use super::*;

fn settings(rate: f64) -> StuckSettings {
    StuckSettings {
        false_alarm_rate: rate,
    }
}

/// One frame of four readings: Gaussian noise quantized to one deviation
/// (repeats are common: about a quarter of frames), Student t3 noise
/// quantized to a fifth of a deviation (occasional repeats), a continuous
/// reading that never repeats, and a quantized reading whose level moves in
/// steps (`Stepping`).
fn noisy_row(rng: &mut Rng, stepping: &mut Stepping) -> Vec<f64> {
    vec![
        (5.0 + rng.normal()).round(),
        (student_t3(rng) * 5.0).round() / 5.0,
        100.0 + rng.normal(),
        stepping.next(rng),
    ]
}

/// A quantized reading (steps of 1, noise deviation 0.3) whose level
/// switches, about every 50 frames, between the middle of a step (it
/// repeats nine times in ten: long runs) and a step's edge (it flips
/// between two values: short runs). Its runs are a mixture of two
/// geometric laws, the case a one-parameter model of repeats gets wrong.
#[derive(Default)]
struct Stepping {
    edge: bool,
}

impl Stepping {
    fn next(&mut self, rng: &mut Rng) -> f64 {
        if rng.uniform() < 0.02 {
            self.edge = !self.edge;
        }
        let level = if self.edge { 0.5 } else { 0.0 };
        (level + 0.3 * rng.normal()).round()
    }
}

/// 300 training and 100 calibration rows of [`noisy_row`].
fn fitting_frames(rng: &mut Rng, stepping: &mut Stepping) -> (Vec<Vec<f64>>, Vec<Vec<f64>>) {
    let mut rows =
        |n: usize| -> Vec<Vec<f64>> { (0..n).map(|_| noisy_row(rng, stepping)).collect() };
    let training = rows(300);
    (training, rows(100))
}

/// Share of `frames` monitored frames the channel flags, for one seed.
fn flag_rate(seed: u64, rate: f64, frames: usize) -> f64 {
    let (mut rng, mut stepping) = (Rng(seed), Stepping::default());
    let (training, calibration) = fitting_frames(&mut rng, &mut stepping);
    let mut channel = StuckChannel::fit(&settings(rate), &training, &calibration);
    let mut flagged = 0usize;
    for _ in 0..frames {
        let surprise = channel.observe(&noisy_row(&mut rng, &mut stepping));
        assert!(surprise.is_finite() && surprise >= 0.0, "{surprise}");
        let p = channel.p_value(surprise);
        assert!(p > 0.0 && p <= 1.0, "{p}");
        flagged += usize::from(channel.flags(surprise));
    }
    flagged as f64 / frames as f64
}

#[test]
fn stuck_channel_keeps_the_calibrated_rate_on_quantized_gaussian_and_t3_noise() {
    // The run p-value is the run's survival function, so each of the four
    // readings is flagged at most rate / 4 of the time when that function
    // is known. It is estimated from 400 frames, and quantized noise makes
    // runs a mixture (the commonest level repeats longer than the average
    // repeat; the stepping reading holds long runs in the middle of a step),
    // which only the non-decreasing continuation estimate keeps in check.
    // The mean over 40 seeds estimates the marginal rate; it must stay
    // within half the target above it. Discreteness makes the test
    // conservative.
    for rate in [0.01, 0.005] {
        let mean = (0..40)
            .map(|seed| flag_rate(7000 + seed, rate, 3000))
            .sum::<f64>()
            / 40.0;
        println!("rate {rate}: mean flag rate {mean}");
        assert!(mean <= 1.5 * rate, "rate {rate}: mean flag rate {mean}");
    }
}

#[test]
fn a_frozen_reading_is_flagged_within_a_few_frames_and_cleared_when_it_moves() {
    let (mut rng, mut stepping) = (Rng(3), Stepping::default());
    let (training, calibration) = fitting_frames(&mut rng, &mut stepping);
    for reading in 0..3 {
        let mut channel = StuckChannel::fit(&settings(0.005), &training, &calibration);
        // Break any run the calibration frames left.
        channel.observe(&[f64::MAX; 4]);
        let frozen = noisy_row(&mut rng, &mut stepping)[reading];
        let mut first_flag = None;
        for i in 0..40 {
            let mut row = noisy_row(&mut rng, &mut stepping);
            row[reading] = frozen;
            let surprise = channel.observe(&row);
            if channel.flags(surprise) && first_flag.is_none() {
                first_flag = Some(i);
            }
        }
        // The continuous reading needs three repeats (p about 1/400, q 1/2);
        // the coarse one, repeating a quarter of the time, about ten.
        let first = first_flag.unwrap_or(usize::MAX);
        println!("reading {reading}: first flagged at frame {first}");
        assert!(
            first < 20,
            "reading {reading} frozen for 40 frames: {first_flag:?}"
        );
        let mut row = noisy_row(&mut rng, &mut stepping);
        row[reading] = frozen + 1.0;
        let surprise = channel.observe(&row);
        assert!(!channel.flags(surprise), "moved, still flagged: {surprise}");
    }
}

#[test]
fn a_reading_constant_while_fitting_is_not_watched_and_degenerate_input_stays_finite() {
    let constant = vec![vec![2.0, 7.0]; 400];
    let mut channel = StuckChannel::fit(&settings(0.01), &constant[..300], &constant[300..]);
    for _ in 0..100_000 {
        let surprise = channel.observe(&[2.0, 7.0]);
        assert!(!channel.flags(surprise), "{surprise}");
    }
    // Two frames, extreme values, a single reading.
    let two = [vec![1.0], vec![f64::MAX]];
    let mut channel = StuckChannel::fit(&settings(0.5), &two[..1], &two[1..]);
    for v in [f64::MAX, f64::MAX, -f64::MAX, 0.0, -0.0, 0.0] {
        let surprise = channel.observe(&[v]);
        assert!(surprise.is_finite() && surprise >= 0.0, "{surprise}");
        assert!(channel.p_value(surprise) > 0.0);
    }
    assert!(channel.threshold.is_finite() && channel.threshold > 0.0);
}

fn stuck_detector_settings() -> DetectorSettings {
    DetectorSettings {
        training_frames: 300,
        calibration_frames: 100,
        false_alarm_rate: 0.01,
        stuck: Some(settings(0.005)),
        ..DetectorSettings::default()
    }
}

/// Frame `i` of three correlated readings, the third frozen from frame 450.
fn frozen_frame(rng: &mut Rng, i: usize, frozen_from: usize) -> crate::align::Frame {
    let a = rng.normal();
    let third = if i >= frozen_from {
        3.25
    } else {
        (3.0 + a + 0.5 * rng.normal()).round() / 4.0
    };
    frame(i, vec![10.0 + a + 0.3 * rng.normal(), 2.0 * a, third])
}

#[test]
fn a_detector_with_the_stuck_channel_opens_an_alarm_on_a_frozen_reading() {
    let mut rng = Rng(11);
    let mut detector = Detector::new(stuck_detector_settings(), 3).unwrap();
    let (mut normal_flags, mut opened) = (0usize, None);
    for i in 0..700 {
        if let Outcome::Scored(s) = detector.process_and_fit(&frozen_frame(&mut rng, i, 600)) {
            assert_eq!(s.flagged, s.alarm_ratio() > 1.0, "{s:?}");
            let (surprise, threshold) = s.stuck.expect("the stuck channel reports");
            assert!(surprise.is_finite() && threshold.is_finite());
            // Bonferroni over the two channels: once the run's p-value is
            // below any conformal p-value (at least 1/101), it decides.
            let p_stuck = ((-surprise).exp() * 3.0).min(1.0);
            if p_stuck < 1.0 / 101.0 {
                assert_eq!(s.p_value, 2.0 * p_stuck, "{s:?}");
            }
            if i < 600 {
                normal_flags += usize::from(s.flagged);
            } else if s.alarm_open && opened.is_none() {
                opened = Some(i);
            }
        }
    }
    // 300 monitored normal frames, flagged at most 1.5% by the two
    // channels; a frozen quantized reading opens an alarm within a few
    // dozen frames.
    assert!(
        normal_flags <= 12,
        "{normal_flags} of 200 normal frames flagged"
    );
    assert!(
        opened.is_some_and(|i| i < 640),
        "frozen from frame 600, alarm opened at {opened:?}"
    );
}

#[test]
fn without_the_stuck_channel_nothing_is_encoded_for_it() {
    let settings = DetectorSettings::default();
    let json = serde_json::to_string(&settings).unwrap();
    assert!(!json.contains("stuck"), "{json}");
    let mut detector = Detector::new(settings, 1).unwrap();
    for i in 0..400 {
        detector.process_and_fit(&frame(i, vec![i as f64 * 0.5]));
    }
    let named = rmp_serde::to_vec_named(&detector).unwrap();
    assert!(!named.windows(5).any(|w| w == b"stuck"));
    let parsed: DetectorSettings = toml::from_str(
        "training_frames = 300\ncalibration_frames = 100\nfalse_alarm_rate = 0.01\n[stuck]\nfalse_alarm_rate = 0.005",
    )
    .unwrap();
    assert_eq!(parsed.stuck, Some(self::settings(0.005)));
    let bad = DetectorSettings {
        stuck: Some(self::settings(1.0)),
        ..DetectorSettings::default()
    };
    let fields: Vec<String> = bad
        .validate("detector", 1)
        .into_iter()
        .map(|e| e.field)
        .collect();
    assert_eq!(fields, vec!["detector.stuck.false_alarm_rate"]);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Any finite input, with values from a small alphabet so that runs of
    /// every length occur: the surprise is finite and non-negative, its
    /// p-value a probability above 0, and the run's surprise never falls
    /// while the run grows.
    #[test]
    fn the_surprise_is_finite_and_grows_with_the_run_on_any_input(
        fitting in proptest::collection::vec(proptest::collection::vec(0u8..3, 2), 2..120),
        monitored in proptest::collection::vec(proptest::collection::vec(0u8..3, 2), 1..200),
        scale in proptest::num::f64::NORMAL,
        rate in 0.0001f64..0.5,
    ) {
        let row = |r: &Vec<u8>| -> Vec<f64> { r.iter().map(|&v| f64::from(v) * scale).collect() };
        let fitting: Vec<Vec<f64>> = fitting.iter().map(row).collect();
        let (training, calibration) = fitting.split_at(fitting.len() / 2);
        let mut channel = StuckChannel::fit(&settings(rate), training, calibration);
        prop_assert!(channel.threshold.is_finite() && channel.threshold > 0.0);
        let mut previous: Option<(Vec<f64>, f64)> = None;
        for values in monitored.iter().map(row) {
            let surprise = channel.observe(&values);
            prop_assert!(surprise.is_finite() && surprise >= 0.0, "{}", surprise);
            let p = channel.p_value(surprise);
            prop_assert!(p > 0.0 && p <= 1.0, "{}", p);
            if let Some((last, before)) = &previous
                && *last == values
            {
                prop_assert!(surprise >= *before, "{} after {}", surprise, before);
            }
            previous = Some((values, surprise));
        }
    }

    #[test]
    fn a_detector_with_the_stuck_channel_restores_bit_identically_at_any_frame(
        seed in any::<u64>(),
        cut in 0usize..480,
    ) {
        let mut rng = Rng(seed);
        let frames: Vec<_> = (0..480).map(|i| frozen_frame(&mut rng, i, 440)).collect();
        let make = || Detector::new(stuck_detector_settings(), 3).unwrap();
        restores_bit_identically(make, Detector::process_and_fit, &frames, cut)?;
    }
}
