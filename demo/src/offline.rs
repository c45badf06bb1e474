//! The plant replayed through the same aligner and detector the worker
//! runs, without a broker or a database: the demo's expectations (alarms
//! inside fault windows, none on the fault-free machine) checked in
//! simulated time, and a quick preview of what a live demo will show.

use chrono::{DateTime, TimeDelta, Utc};
use radar::{
    align::{Admission, Aligner, Observation},
    detector::{AlarmEvent, Detector, Outcome},
};
use serde::Serialize;

use super::{DemoError, FaultWindow, Plant, PlantConfig, monitors::monitor_configs};

/// Simulated time of tick 0 in offline runs: 2026-01-01 08:00 UTC.
const EPOCH_SECONDS: i64 = 1_767_254_400;

/// One alarm a monitor raised, in ticks.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OfflineAlarm {
    pub machine: usize,
    pub opened_tick: u64,
    /// `None` while still open at the end of the run.
    pub closed_tick: Option<u64>,
    pub peak_score: f64,
}

/// What every monitor of the plant did over an offline run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OfflineRun {
    pub ticks: u64,
    pub windows: Vec<FaultWindow>,
    pub alarms: Vec<OfflineAlarm>,
    /// Per machine: frames scored by a fitted detector, and how many of
    /// them were flagged.
    pub monitored_frames: Vec<u64>,
    pub flagged_frames: Vec<u64>,
}

impl OfflineRun {
    /// The alarms of one machine.
    pub fn alarms_of(&self, machine: usize) -> impl Iterator<Item = &OfflineAlarm> {
        self.alarms.iter().filter(move |a| a.machine == machine)
    }
}

/// The timestamp offline runs give to `tick`.
pub fn tick_time(tick: u64) -> DateTime<Utc> {
    let start = DateTime::from_timestamp(EPOCH_SECONDS, 0).unwrap_or_default();
    start + TimeDelta::seconds(tick as i64 * super::plant::TICK_SECONDS as i64)
}

fn time_tick(ts: DateTime<Utc>) -> u64 {
    let seconds = (ts - tick_time(0)).num_seconds().max(0) as u64;
    seconds / super::plant::TICK_SECONDS
}

/// Generates `ticks` ticks of the plant and feeds every machine's readings
/// through its demo monitor's aligner and detector, as if each sample
/// arrived on time over MQTT.
pub fn run_offline(config: PlantConfig, ticks: u64) -> Result<OfflineRun, DemoError> {
    let mut plant = Plant::new(config)?;
    let monitors = monitor_configs(&plant)?;
    let mut aligners = Vec::with_capacity(monitors.len());
    let mut detectors = Vec::with_capacity(monitors.len());
    for monitor in &monitors {
        let offline = |e: String| DemoError::Offline {
            monitor: monitor.name.clone(),
            reason: e,
        };
        aligners.push(
            Aligner::new(monitor.alignment.clone(), &monitor.readings)
                .map_err(|e| offline(e.to_string()))?,
        );
        detectors.push(
            Detector::new(monitor.detector.clone(), monitor.readings.len())
                .map_err(|e| offline(e.to_string()))?,
        );
    }
    let machines = monitors.len();
    let mut run = OfflineRun {
        ticks,
        windows: plant.fault_windows(ticks),
        alarms: Vec::new(),
        monitored_frames: vec![0; machines],
        flagged_frames: vec![0; machines],
    };
    let mut open: Vec<Option<usize>> = vec![None; machines];
    for tick in 0..ticks {
        let ts = tick_time(tick);
        for sample in plant.step() {
            let observation = Observation {
                reading: sample.reading,
                ts,
                value: sample.value,
                received_at: ts,
            };
            let Admission::FrameReady(frame) = aligners[sample.machine].admit(observation, ts)
            else {
                continue;
            };
            let Outcome::Scored(scored) = detectors[sample.machine].process_and_fit(&frame) else {
                continue;
            };
            let machine = sample.machine;
            run.monitored_frames[machine] += 1;
            run.flagged_frames[machine] += u64::from(scored.flagged);
            match scored.alarm_event {
                Some(AlarmEvent::Opened { ts, peak_score, .. }) => {
                    open[machine] = Some(run.alarms.len());
                    run.alarms.push(OfflineAlarm {
                        machine,
                        opened_tick: time_tick(ts),
                        closed_tick: None,
                        peak_score,
                    });
                }
                Some(AlarmEvent::Closed { ts, peak_score, .. }) => {
                    if let Some(alarm) = open[machine].take().and_then(|i| run.alarms.get_mut(i)) {
                        alarm.closed_tick = Some(time_tick(ts));
                        alarm.peak_score = peak_score;
                    }
                }
                None => {}
            }
        }
    }
    Ok(run)
}
