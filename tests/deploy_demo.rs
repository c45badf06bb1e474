//! The demo's plant, checked end to end without a worker: the generated
//! streams go through the worker's own aligner and detector (offline), and
//! through the embedded broker to a real MQTT subscriber.

use std::time::Duration;

use radar::demo::{
    FaultKind, OfflineRun, Plant, PlantConfig, PublishOptions, READINGS, publish_plant,
    run_offline, start_embedded_broker,
};

/// After a fault window ends the repair itself is a change the monitor may
/// still see (a stuck sensor jumping back, a step removed) until the levels
/// settle; alarms may open up to this many ticks after the window.
const REPAIR_SETTLE_TICKS: u64 = 300;

fn describe(run: &OfflineRun) -> String {
    let mut text = String::new();
    for w in &run.windows {
        text.push_str(&format!(
            "window machine {} {:?} [{}, {})\n",
            w.machine, w.kind, w.start_tick, w.end_tick
        ));
    }
    for a in &run.alarms {
        text.push_str(&format!(
            "alarm machine {} opened {} closed {:?} peak {:.1}\n",
            a.machine, a.opened_tick, a.closed_tick, a.peak_score
        ));
    }
    for (m, (n, f)) in run
        .monitored_frames
        .iter()
        .zip(&run.flagged_frames)
        .enumerate()
    {
        text.push_str(&format!(
            "machine {m}: {f} of {n} monitored frames flagged\n"
        ));
    }
    text
}

fn check_alarms_match_faults(run: &OfflineRun) {
    let report = describe(run);
    for window in &run.windows {
        let first = run
            .alarms_of(window.machine)
            .map(|a| a.opened_tick)
            .filter(|&t| window.contains(t))
            .min();
        assert!(
            first.is_some(),
            "no alarm inside {:?} on machine {}:\n{report}",
            window.kind,
            window.machine
        );
    }
    for alarm in &run.alarms {
        let explained = run.windows.iter().any(|w| {
            w.machine == alarm.machine
                && (w.start_tick..w.end_tick + REPAIR_SETTLE_TICKS).contains(&alarm.opened_tick)
        });
        assert!(explained, "alarm outside every fault window:\n{report}");
    }
}

#[test]
fn offline_the_demo_monitors_alarm_inside_every_fault_window_and_never_on_the_clean_pump() {
    // The demo's test run: 20 wall seconds at speed 50.
    let run = run_offline(PlantConfig::default(), 1000).unwrap();
    println!("{}", describe(&run));
    assert_eq!(run.windows.len(), 3);
    check_alarms_match_faults(&run);
    assert_eq!(run.alarms_of(3).count(), 0, "{}", describe(&run));
}

#[test]
fn offline_over_half_a_simulated_day_the_clean_pumps_never_alarm_and_faults_are_caught() {
    for seed in [1, 3] {
        let run = run_offline(
            PlantConfig {
                seed,
                machines: 8,
                ..PlantConfig::default()
            },
            43_200,
        )
        .unwrap();
        let report = describe(&run);
        for clean in [3, 7] {
            assert_eq!(run.alarms_of(clean).count(), 0, "seed {seed}:\n{report}");
        }
        let caught = run
            .windows
            .iter()
            .filter(|w| run.alarms_of(w.machine).any(|a| w.contains(a.opened_tick)))
            .count();
        assert!(
            caught * 10 >= run.windows.len() * 9,
            "seed {seed}: only {caught} of {} fault windows raised an alarm",
            run.windows.len()
        );
        let explained = run
            .alarms
            .iter()
            .filter(|a| {
                run.windows.iter().any(|w| {
                    w.machine == a.machine
                        && (w.start_tick..w.end_tick + REPAIR_SETTLE_TICKS).contains(&a.opened_tick)
                })
            })
            .count();
        assert!(
            explained * 10 >= run.alarms.len() * 9,
            "seed {seed}: {explained} of {} alarms are explained by a fault",
            run.alarms.len()
        );
    }
}
