use super::*;

fn plant(seed: u64) -> Plant {
    Plant::new(PlantConfig {
        seed,
        ..PlantConfig::default()
    })
    .unwrap()
}

fn run(plant: &mut Plant, ticks: u64) -> Vec<Vec<Sample>> {
    (0..ticks).map(|_| plant.step()).collect()
}

/// Values of one machine's reading over a run.
fn series(ticks: &[Vec<Sample>], machine: usize, reading: usize) -> Vec<f64> {
    ticks
        .iter()
        .map(|t| t[machine * READINGS.len() + reading].value)
        .collect()
}

fn correlation(a: &[f64], b: &[f64]) -> f64 {
    let n = a.len() as f64;
    let (ma, mb) = (a.iter().sum::<f64>() / n, b.iter().sum::<f64>() / n);
    let cov: f64 = a.iter().zip(b).map(|(x, y)| (x - ma) * (y - mb)).sum();
    let va: f64 = a.iter().map(|x| (x - ma).powi(2)).sum();
    let vb: f64 = b.iter().map(|y| (y - mb).powi(2)).sum();
    cov / (va * vb).sqrt()
}

#[test]
fn one_seed_gives_the_same_plant_and_another_seed_another() {
    let a = run(&mut plant(1), 300);
    let b = run(&mut plant(1), 300);
    let c = run(&mut plant(2), 300);
    assert_eq!(a, b);
    assert_ne!(a, c);
}

#[test]
fn adding_machines_leaves_the_existing_machines_unchanged() {
    let mut small = plant(3);
    let mut large = Plant::new(PlantConfig {
        seed: 3,
        machines: 9,
        ..PlantConfig::default()
    })
    .unwrap();
    for _ in 0..200 {
        let s = small.step();
        let l = large.step();
        assert_eq!(s[..], l[..s.len()]);
    }
}

#[test]
fn readings_of_one_machine_move_together_and_not_with_other_machines() {
    let ticks = run(&mut plant(4), 300);
    // Machine 3 is fault-free; within it pressure and flow share the load.
    let within = correlation(&series(&ticks, 3, 0), &series(&ticks, 3, 1));
    let across = correlation(&series(&ticks, 3, 0), &series(&ticks, 0, 0));
    assert!(within > 0.9, "within one machine: {within}");
    assert!(across.abs() < 0.5, "across machines: {across}");
}

#[test]
fn the_daily_cycle_moves_the_temperature_over_a_simulated_day() {
    let mut p = plant(5);
    let ticks = run(&mut p, DAY_SECONDS as u64);
    let temperature = series(&ticks, 3, 3);
    // Hourly means smooth out load and noise and leave the daily cycle.
    let hourly: Vec<f64> = temperature
        .chunks(3600)
        .map(|h| h.iter().sum::<f64>() / h.len() as f64)
        .collect();
    let max = hourly.iter().cloned().fold(f64::MIN, f64::max);
    let min = hourly.iter().cloned().fold(f64::MAX, f64::min);
    let swing = max - min;
    let expected = 2.0 * READINGS[3].daily_gain;
    assert!(
        (swing - expected).abs() < 0.15 * expected,
        "daily swing {swing}, expected about {expected}"
    );
}

#[test]
fn each_fault_acts_only_inside_its_window_and_only_on_its_reading() {
    let config = PlantConfig {
        seed: 6,
        ..PlantConfig::default()
    };
    let horizon = config.warmup_ticks + 2 * config.fault_period_ticks;
    let mut faulty = Plant::new(config.clone()).unwrap();
    let windows = faulty.fault_windows(horizon);
    assert_eq!(windows.len(), 6, "three faults in each of two periods");
    // The same machines without faults: draws are identical, so any
    // difference is the fault.
    let mut twin = Plant::new(config).unwrap();
    for machine in &mut twin.machines {
        machine.fault = None;
    }
    for tick in 0..horizon {
        let f = faulty.step();
        let t = twin.step();
        for (fs, ts) in f.iter().zip(&t) {
            let window = windows
                .iter()
                .find(|w| w.machine == fs.machine && w.reading == fs.reading && w.contains(tick));
            match window {
                None => assert_eq!(fs, ts, "tick {tick}: a value changed outside any window"),
                Some(w) => match w.kind {
                    FaultKind::Step => {
                        assert!((fs.value - ts.value - STEP_AMPERES).abs() < 1e-9)
                    }
                    FaultKind::SlowLeak => {
                        let drop = leak_drop(w, tick);
                        let half = (w.end_tick - w.start_tick) / 2;
                        if tick - w.start_tick == half {
                            assert!((drop - LEAK_BAR_PER_SECOND * half as f64).abs() < 1e-9);
                        }
                        assert!((ts.value - fs.value - drop).abs() < 1e-9, "tick {tick}")
                    }
                    FaultKind::StuckSensor => {}
                },
            }
        }
    }
}

#[test]
fn a_stuck_sensor_repeats_one_value_for_its_whole_window() {
    let mut p = plant(7);
    let window = p
        .fault_windows(5000)
        .into_iter()
        .find(|w| w.kind == FaultKind::StuckSensor)
        .unwrap();
    let ticks = run(&mut p, window.end_tick + 1);
    let flow = series(&ticks, window.machine, window.reading);
    let inside = &flow[window.start_tick as usize..window.end_tick as usize];
    assert!(inside.iter().all(|v| *v == inside[0]));
    assert_ne!(flow[window.start_tick as usize - 1], inside[0]);
    assert_ne!(flow[window.end_tick as usize], inside[0]);
}

#[test]
fn the_fault_free_machine_has_no_windows_and_every_fault_appears() {
    let p = Plant::new(PlantConfig::default()).unwrap();
    let windows = p.fault_windows(10_000);
    assert!(windows.iter().all(|w| w.machine != 3));
    for kind in [FaultKind::StuckSensor, FaultKind::Step, FaultKind::SlowLeak] {
        assert!(windows.iter().any(|w| w.kind == kind));
    }
    assert!(
        windows
            .iter()
            .all(|w| w.start_tick >= PlantConfig::default().warmup_ticks)
    );
}

#[test]
fn bad_plant_configurations_are_refused_with_a_reason() {
    for config in [
        PlantConfig {
            machines: 0,
            ..PlantConfig::default()
        },
        PlantConfig {
            topic_prefix: "plant/+".into(),
            ..PlantConfig::default()
        },
        PlantConfig {
            fault_period_ticks: 100,
            ..PlantConfig::default()
        },
    ] {
        let err = Plant::new(config).unwrap_err();
        assert!(matches!(err, DemoError::Config(_)), "{err}");
    }
}
