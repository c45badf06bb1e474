//! Behaviour of the whole detector: phases, degenerate input, calibrated
//! false-alarm rate and snapshot round trips.

use chrono::DateTime;
use proptest::prelude::*;

use super::*;
use crate::align::Frame;

/// A small seeded generator (splitmix64) with Box-Muller normals, so the
/// statistical tests are reproducible without extra dependencies.
pub(super) struct Rng(pub(super) u64);

impl Rng {
    pub(super) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub(super) fn uniform(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }

    pub(super) fn normal(&mut self) -> f64 {
        let (u, v) = (self.uniform(), self.uniform());
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }
}

pub(super) fn frame(i: usize, values: Vec<f64>) -> Frame {
    Frame {
        ts: DateTime::from_timestamp(1_700_000_000 + i as i64, 0).unwrap_or_default(),
        values,
    }
}

/// Correlated Gaussian frames: three readings driven by two latent factors.
fn gaussian_frame(rng: &mut Rng, i: usize) -> Frame {
    let (a, b) = (rng.normal(), rng.normal());
    let noise: Vec<f64> = (0..3).map(|_| 0.3 * rng.normal()).collect();
    frame(
        i,
        vec![
            10.0 + a + noise[0],
            -5.0 + 2.0 * a - b + noise[1],
            100.0 + 0.5 * b + noise[2],
        ],
    )
}

fn settings(training: usize, calibration: usize, rate: f64) -> DetectorSettings {
    DetectorSettings {
        training_frames: training,
        calibration_frames: calibration,
        false_alarm_rate: rate,
        ..DetectorSettings::default()
    }
}

fn scored(outcome: Outcome) -> Scored {
    match outcome {
        Outcome::Scored(s) => *s,
        other => panic!("expected a scored frame, got {other:?}"),
    }
}

#[test]
fn detector_moves_through_training_calibrating_fitting_and_monitoring() {
    let mut rng = Rng(1);
    let mut detector = Detector::new(settings(10, 20, 0.05), 3).unwrap();
    assert_eq!(detector.phase(), Phase::Training);
    let mut i = 0;
    let mut next = |d: &mut Detector| {
        i += 1;
        d.process(&gaussian_frame(&mut rng, i))
    };
    for _ in 0..9 {
        let out = next(&mut detector);
        assert_eq!(
            out,
            Outcome::Buffered {
                phase: Phase::Training,
                phase_changed: false
            }
        );
    }
    let out = next(&mut detector);
    assert_eq!(
        out,
        Outcome::Buffered {
            phase: Phase::Calibrating,
            phase_changed: true
        }
    );
    for _ in 0..19 {
        assert!(!next(&mut detector).fit_due());
    }
    let out = next(&mut detector);
    assert!(out.fit_due());
    assert_eq!(detector.phase(), Phase::Fitting);
    assert_eq!(detector.buffered_frames(), (10, 20));
    assert!(detector.threshold().is_none());
    detector.fit().unwrap();
    assert_eq!(detector.phase(), Phase::Monitoring);
    assert_eq!(detector.buffered_frames(), (0, 0));
    assert!(detector.threshold().is_some());
    let s = scored(next(&mut detector));
    assert!(s.score.is_finite() && s.p_value > 0.0 && s.p_value <= 1.0);
}

#[test]
fn fit_outside_the_fitting_phase_is_refused() {
    let mut detector = Detector::new(settings(10, 20, 0.05), 3).unwrap();
    assert!(matches!(
        detector.fit(),
        Err(DetectorError::NotReadyToFit(Phase::Training))
    ));
}

#[test]
fn a_frame_offered_while_the_fit_is_due_runs_the_fit_and_is_scored() {
    let mut rng = Rng(2);
    let mut detector = Detector::new(settings(10, 20, 0.05), 3).unwrap();
    for i in 0..30 {
        detector.process(&gaussian_frame(&mut rng, i));
    }
    assert_eq!(detector.phase(), Phase::Fitting);
    scored(detector.process(&gaussian_frame(&mut rng, 30)));
    assert_eq!(detector.phase(), Phase::Monitoring);
}

#[test]
fn an_interrupted_fit_restarts_from_the_snapshot_and_reaches_the_identical_model() {
    let mut rng = Rng(3);
    let mut detector = Detector::new(settings(40, 40, 0.05), 3).unwrap();
    for i in 0..80 {
        detector.process(&gaussian_frame(&mut rng, i));
    }
    assert_eq!(detector.phase(), Phase::Fitting);
    let snapshot = rmp_serde::to_vec(&detector).unwrap();
    detector.fit().unwrap();
    let mut restored: Detector = rmp_serde::from_slice(&snapshot).unwrap();
    assert_eq!(restored.phase(), Phase::Fitting);
    restored.fit().unwrap();
    assert_eq!(restored, detector);
}

#[test]
fn non_finite_and_wrong_width_frames_are_rejected_in_every_phase_without_changing_state() {
    let mut rng = Rng(4);
    let mut detector = Detector::new(settings(10, 20, 0.05), 3).unwrap();
    for i in 0..40 {
        for bad in [
            vec![f64::NAN, 1.0, 2.0],
            vec![1.0, f64::INFINITY, 2.0],
            vec![1.0, 2.0, f64::NEG_INFINITY],
            vec![1.0, 2.0],
        ] {
            let before = detector.clone();
            let out = detector.process(&frame(i, bad));
            assert!(matches!(out, Outcome::Rejected(_)), "{out:?}");
            assert_eq!(detector, before);
        }
        detector.process_and_fit(&gaussian_frame(&mut rng, i));
    }
    assert_eq!(
        detector.process(&frame(99, vec![f64::NAN, 0.0, 0.0])),
        Outcome::Rejected(Rejection::NonFinite { reading: 0 })
    );
}

#[test]
fn constant_and_collinear_sensors_give_finite_scores_and_see_a_broken_relation() {
    let mut rng = Rng(5);
    let mut detector = Detector::new(settings(30, 20, 0.05), 4).unwrap();
    for i in 0..50 {
        let x = rng.normal();
        detector.process_and_fit(&frame(i, vec![7.0, x, 2.0 * x, rng.normal()]));
    }
    assert_eq!(detector.phase(), Phase::Monitoring);
    let model = detector.model().unwrap();
    assert_eq!(model.scaler.source[0], ScaleSource::ConstantInTraining);
    let normal = scored(detector.process(&frame(50, vec![7.0, 0.5, 1.0, 0.0])));
    let broken = scored(detector.process(&frame(51, vec![7.0, 0.5, -1.0, 0.0])));
    let moved = scored(detector.process(&frame(52, vec![1e300, 0.5, 1.0, 0.0])));
    for s in [&normal, &broken, &moved] {
        assert!(s.score.is_finite() && s.p_value.is_finite());
    }
    assert!(!normal.flagged);
    assert!(broken.flagged && moved.flagged);
    let evidence = moved.evidence.unwrap();
    assert_eq!(evidence.contributions.len(), 4);
    assert!(evidence.contributions.iter().all(|c| c.is_finite()));
    let top = evidence
        .contributions
        .iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .map(|(j, _)| j);
    assert_eq!(top, Some(0));
}

#[test]
fn fewer_training_frames_than_readings_is_refused_with_the_field_named() {
    let err = Detector::new(settings(3, 100, 0.05), 5).unwrap_err();
    match err {
        DetectorError::Settings(errors) => {
            assert_eq!(errors.fields(), vec!["detector.training_frames"])
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn all_constant_training_still_scores_every_frame_finitely() {
    let mut detector = Detector::new(settings(5, 20, 0.05), 2).unwrap();
    for i in 0..25 {
        detector.process_and_fit(&frame(i, vec![1.0, 2.0]));
    }
    let same = scored(detector.process(&frame(25, vec![1.0, 2.0])));
    let moved = scored(detector.process(&frame(26, vec![1.5, 2.0])));
    assert_eq!(same.score, 0.0);
    assert!(!same.flagged);
    assert!(moved.score.is_finite() && moved.flagged);
}

#[test]
fn flagged_frames_open_an_alarm_with_evidence_and_normal_frames_close_it() {
    let mut rng = Rng(6);
    let mut s = settings(100, 100, 0.05);
    s.alarm = AlarmRule {
        open_k: 2,
        open_n: 3,
        close_m: 4,
    };
    let mut detector = Detector::new(s, 3).unwrap();
    for i in 0..200 {
        detector.process_and_fit(&gaussian_frame(&mut rng, i));
    }
    let fault = |i| frame(i, vec![30.0, -5.0, 100.0]);
    let first = scored(detector.process(&fault(200)));
    assert!(first.flagged && !first.alarm_open && first.alarm_event.is_none());
    let evidence = first.evidence.unwrap();
    assert_eq!(evidence.threshold, first.threshold);
    assert!(evidence.score > evidence.threshold && evidence.alarm_seq.is_none());
    let second = scored(detector.process(&fault(201)));
    assert!(second.alarm_open);
    assert!(matches!(
        second.alarm_event,
        Some(AlarmEvent::Opened { seq: 1, .. })
    ));
    assert_eq!(second.evidence.unwrap().alarm_seq, Some(1));
    let mut closed_at = None;
    for i in 202..240 {
        let s = scored(detector.process(&frame(i, vec![10.0, -5.0, 100.0])));
        if let Some(AlarmEvent::Closed {
            seq, peak_score, ..
        }) = s.alarm_event
        {
            assert_eq!(seq, 1);
            assert!(peak_score >= second.score);
            closed_at = Some(i);
            break;
        }
    }
    assert_eq!(closed_at, Some(205));
    assert!(!detector.alarm_open());
}

#[test]
fn calibrated_false_alarm_rate_on_gaussian_data_is_within_a_point_and_a_half_of_the_target() {
    // With n calibration scores the false-alarm rate, conditional on the
    // calibration draw, has a standard deviation of about sqrt(a(1 - a)/n):
    // 0.0049 for n = 2000 and a = 0.05. 0.015 is three of those; the 20,000
    // test frames add only 0.0015 of binomial noise.
    let rate = 0.05;
    let mut rng = Rng(7);
    let mut detector = Detector::new(settings(500, 2000, rate), 3).unwrap();
    let mut flagged = 0usize;
    let mut p_below = 0usize;
    let test_frames = 20_000;
    for i in 0..2500 + test_frames {
        if let Outcome::Scored(s) = detector.process_and_fit(&gaussian_frame(&mut rng, i)) {
            flagged += usize::from(s.flagged);
            p_below += usize::from(s.p_value <= rate);
        }
    }
    let observed = flagged as f64 / test_frames as f64;
    assert!(
        (observed - rate).abs() < 0.015,
        "observed false-alarm rate {observed}"
    );
    // A p-value at or below the rate is the same event as a flag, up to ties.
    assert!((p_below as f64 / test_frames as f64 - observed).abs() < 0.002);
    let health = detector.health().unwrap();
    assert!((health.flag_rate - rate).abs() < 0.03);
    assert!(health.drift_p_value > 1e-3, "{health:?}");
}

#[test]
fn model_health_reports_drift_when_the_process_shifts() {
    let mut rng = Rng(8);
    let mut s = settings(200, 200, 0.05);
    s.health_window = 200;
    s.health_refresh_frames = 50;
    let mut detector = Detector::new(s, 3).unwrap();
    for i in 0..600 {
        let mut f = gaussian_frame(&mut rng, i);
        if i >= 400 {
            f.values[2] += 2.0;
        }
        detector.process_and_fit(&f);
    }
    let health = detector.health().unwrap();
    assert_eq!(health.at_frame, 200);
    assert!(
        health.flag_rate > 0.5 && health.drift_p_value < 1e-6,
        "{health:?}"
    );
}

/// Student's t with 3 degrees of freedom, scaled to unit variance: tails
/// far heavier than the normal law's (finite variance, infinite kurtosis).
pub(super) fn student_t3(rng: &mut Rng) -> f64 {
    let chi2: f64 = (0..3).map(|_| rng.normal().powi(2)).sum();
    rng.normal() / (chi2 / 3.0).sqrt() / 3.0f64.sqrt()
}

fn tracking_settings(
    training: usize,
    calibration: usize,
    rate: f64,
    hold: bool,
) -> DetectorSettings {
    DetectorSettings {
        level_tracking: Some(LevelTracking {
            weight: 0.05,
            clip: 0.5,
        }),
        hold_level_during_alarm: hold,
        feature_smoothing: 0.5,
        ..settings(training, calibration, rate)
    }
}

#[test]
fn calibrated_false_alarm_rate_with_held_tracked_levels_on_heavy_tailed_noise_is_within_two_points()
{
    // Heavy tails and the moving level make the scores non-Gaussian and
    // serially dependent; the conformal threshold needs neither. Tolerance:
    // three conditional standard deviations (0.015 at a = 0.05, n = 2000)
    // plus half a point for the dependence between neighbouring frames.
    let rate = 0.05;
    for (seed, heavy) in [(11, true), (12, false)] {
        let mut rng = Rng(seed);
        let mut detector = Detector::new(tracking_settings(500, 2000, rate, true), 3).unwrap();
        let (mut flagged, mut scored) = (0usize, 0usize);
        for i in 0..2500 + 20_000 {
            let mut f = gaussian_frame(&mut rng, i);
            if heavy {
                for v in &mut f.values {
                    *v += student_t3(&mut rng);
                }
            }
            if let Outcome::Scored(s) = detector.process_and_fit(&f) {
                assert!(s.score.is_finite() && s.p_value.is_finite());
                flagged += usize::from(s.flagged);
                scored += 1;
            }
        }
        let observed = flagged as f64 / scored as f64;
        assert!(
            (observed - rate).abs() < 0.02,
            "heavy tails {heavy}: observed false-alarm rate {observed}"
        );
    }
}

#[test]
fn a_held_level_keeps_a_sustained_step_alarmed_that_a_following_level_absorbs() {
    let run = |hold: bool| {
        let mut rng = Rng(21);
        let mut s = tracking_settings(300, 200, 0.01, hold);
        s.alarm = AlarmRule {
            open_k: 3,
            open_n: 5,
            close_m: 10,
        };
        let mut detector = Detector::new(s, 3).unwrap();
        let mut open_during_step = 0;
        for i in 0..1500 {
            let mut f = gaussian_frame(&mut rng, i);
            if (700..1100).contains(&i) {
                f.values[2] += 2.0;
            }
            detector.process_and_fit(&f);
            if (700..1100).contains(&i) {
                open_during_step += usize::from(detector.alarm_open());
            }
        }
        open_during_step
    };
    let (held, followed) = (run(true), run(false));
    assert!(
        held > 380,
        "held level: alarm open on {held} of 400 step frames"
    );
    assert!(followed < 300, "followed level: {followed} of 400");
}

fn stream(seed: u64, len: usize) -> Vec<Frame> {
    let mut rng = Rng(seed);
    (0..len)
        .map(|i| {
            let mut f = gaussian_frame(&mut rng, i);
            if i > 70 && i < 85 {
                f.values[2] += 5.0;
            }
            match rng.next_u64() % 40 {
                0 => f.values[1] = f64::NAN,
                1 => f.values[0] += 8.0,
                2 => f.values.truncate(2),
                _ => {}
            }
            f
        })
        .collect()
}

fn snapshot_settings() -> DetectorSettings {
    DetectorSettings {
        training_frames: 25,
        calibration_frames: 20,
        false_alarm_rate: 0.1,
        alarm: AlarmRule {
            open_k: 2,
            open_n: 3,
            close_m: 3,
        },
        score_smoothing: 0.3,
        level_tracking: Some(LevelTracking {
            weight: 0.05,
            clip: 2.0,
        }),
        hold_level_during_alarm: true,
        health_window: 10,
        health_refresh_frames: 7,
        ..DetectorSettings::default()
    }
}

/// Runs `frames` through a detector from `make` (each frame by `step`),
/// and through one restored from a snapshot of a second taken after `cut`
/// frames (named, as snapshots are written, and positional): the restored
/// detector equals the one it was taken from, and from there every outcome
/// (score and p-value bit for bit) and the final detector are the
/// original's.
pub(super) fn restores_bit_identically(
    make: impl Fn() -> Detector,
    step: impl Fn(&mut Detector, &Frame) -> Outcome,
    frames: &[Frame],
    cut: usize,
) -> Result<(), TestCaseError> {
    let mut original = make();
    let expected: Vec<Outcome> = frames.iter().map(|f| step(&mut original, f)).collect();
    let mut first = make();
    for f in &frames[..cut] {
        step(&mut first, f);
    }
    let positional: Detector = rmp_serde::from_slice(&rmp_serde::to_vec(&first).unwrap()).unwrap();
    prop_assert_eq!(&positional, &first);
    let bytes = rmp_serde::to_vec_named(&first).unwrap();
    let mut restored: Detector = rmp_serde::from_slice(&bytes).unwrap();
    prop_assert_eq!(&restored, &first);
    for (f, want) in frames[cut..].iter().zip(&expected[cut..]) {
        let got = step(&mut restored, f);
        if let (Outcome::Scored(g), Outcome::Scored(w)) = (&got, want) {
            prop_assert_eq!(g.score.to_bits(), w.score.to_bits());
            prop_assert_eq!(g.p_value.to_bits(), w.p_value.to_bits());
        }
        prop_assert_eq!(&got, want);
    }
    prop_assert_eq!(restored, original);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn a_detector_restored_from_a_snapshot_at_any_frame_scores_bit_identically(
        seed in any::<u64>(),
        cut in 0usize..120,
        runtime_fits in any::<bool>(),
    ) {
        let frames = stream(seed, 120);
        let step = |d: &mut Detector, f: &Frame| {
            let out = d.process(f);
            if runtime_fits && out.fit_due() {
                d.fit().unwrap();
            }
            out
        };
        let make = || Detector::new(snapshot_settings(), 3).unwrap();
        restores_bit_identically(make, step, &frames, cut)?;
    }
}

#[test]
fn the_shipped_skab_monitor_file_is_valid() {
    let text = include_str!("../../config/monitors/skab.toml");
    let config = crate::config::MonitorConfig::from_toml(text).unwrap();
    assert_eq!(config.required_readings().count(), 8);
    let names: Vec<String> = config.required_readings().map(|r| r.name.clone()).collect();
    Detector::for_readings(config.detector.clone(), &names).unwrap();
}
