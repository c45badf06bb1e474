//! The plant replayed through the worker's own runtime core
//! ([`MonitorCore`]: alignment, detector, fit, alarm rows), without a
//! broker or a database: the demo's expectations (alarms inside fault
//! windows, none on the fault-free machine) checked in simulated time, and
//! a quick preview of what a live demo will show.
//!
//! Each machine's monitor gets a fresh core, as a worker starting it with
//! no snapshot would; every sample is ingested as if it arrived on time
//! over MQTT, the static fit runs when the core says it is due, as the
//! model actor runs it, and the run reads its scored frames and alarms from
//! what each step returns. So an offline run is the worker's arithmetic by
//! construction (issue #19), with no loop of its own to drift from it.
//! What the runtime adds around the core (checkpoints, the periodic expiry
//! of partial frames, silence and connection gaps) has nothing to act on
//! here: every tick delivers every reading with one timestamp.

use chrono::{DateTime, TimeDelta, Utc};
use radar::{
    align::Observation,
    config::MonitorConfig,
    runtime::{MonitorCore, Step, no_snapshot},
    store::AlarmRecord,
};
use serde::Serialize;

use super::{
    DemoError, FaultWindow, Plant, PlantConfig, database::in_memory_id, monitors::monitor_configs,
};

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

    /// What one step of `machine`'s core scored and the alarm rows it
    /// would commit.
    fn record(&mut self, machine: usize, open: &mut Option<usize>, step: Step) {
        if let Some(verdict) = step.verdict {
            self.monitored_frames[machine] += 1;
            self.flagged_frames[machine] += u64::from(verdict.flagged);
        }
        for alarm in step.results.alarms {
            self.record_alarm(machine, open, alarm);
        }
    }

    /// An alarm row as the worker writes it: opened, or closed as a whole
    /// row (the open row it closes gets its close and final peak).
    fn record_alarm(&mut self, machine: usize, open: &mut Option<usize>, alarm: AlarmRecord) {
        let closed_tick = alarm.closed_at.map(time_tick);
        if closed_tick.is_some()
            && let Some(row) = open.take().and_then(|i| self.alarms.get_mut(i))
        {
            row.closed_tick = closed_tick;
            row.peak_score = alarm.peak_score;
            return;
        }
        if closed_tick.is_none() {
            *open = Some(self.alarms.len());
        }
        self.alarms.push(OfflineAlarm {
            machine,
            opened_tick: time_tick(alarm.opened_at),
            closed_tick,
            peak_score: alarm.peak_score,
        });
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

/// One machine's monitor: the worker's core, and the index in
/// [`OfflineRun::alarms`] of its alarm still open.
struct MachineRun {
    core: MonitorCore,
    open: Option<usize>,
}

impl MachineRun {
    /// A fresh core under the id the in-memory demo gives this monitor.
    fn start(monitor: MonitorConfig) -> Result<Self, DemoError> {
        let name = monitor.name.clone();
        let core = MonitorCore::fresh(in_memory_id(&name), monitor, tick_time(0))
            .map_err(|e| offline_error(&name, e))?;
        Ok(Self { core, open: None })
    }

    /// Ingests one reading received on time; runs the fit once it is due,
    /// through the core's "checkpoint, then fit" step (an offline run keeps
    /// no snapshot).
    fn ingest(&mut self, observation: Observation) -> Result<Step, DemoError> {
        let now = observation.received_at;
        let step = self.core.ingest(Ok(observation), now);
        self.core
            .fit_when_due(&step, no_snapshot)
            .map_err(|e| offline_error(&self.core.config().name, e))?;
        Ok(step)
    }
}

fn offline_error(monitor: &str, error: impl ToString) -> DemoError {
    DemoError::Offline {
        monitor: monitor.to_string(),
        reason: error.to_string(),
    }
}

/// Generates `ticks` ticks of the plant and feeds every machine's readings
/// to a fresh [`MonitorCore`] of its demo monitor, as if each sample
/// arrived on time over MQTT.
pub fn run_offline(config: PlantConfig, ticks: u64) -> Result<OfflineRun, DemoError> {
    let mut plant = Plant::new(config)?;
    let mut machines = monitor_configs(&plant)?
        .into_iter()
        .map(MachineRun::start)
        .collect::<Result<Vec<_>, _>>()?;
    let mut run = OfflineRun {
        ticks,
        windows: plant.fault_windows(ticks),
        alarms: Vec::new(),
        monitored_frames: vec![0; machines.len()],
        flagged_frames: vec![0; machines.len()],
    };
    for tick in 0..ticks {
        let ts = tick_time(tick);
        for sample in plant.step() {
            let machine = sample.machine;
            let Some(monitor) = machines.get_mut(machine) else {
                continue;
            };
            let step = monitor.ingest(Observation {
                reading: sample.reading,
                ts,
                value: sample.value,
                received_at: ts,
            })?;
            run.record(machine, &mut monitor.open, step);
        }
    }
    Ok(run)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CALIBRATION_FRAMES, TRAINING_FRAMES};

    fn empty_run() -> OfflineRun {
        OfflineRun {
            ticks: 0,
            windows: Vec::new(),
            alarms: Vec::new(),
            monitored_frames: vec![0],
            flagged_frames: vec![0],
        }
    }

    fn row(opened: u64, closed: Option<u64>, peak_score: f64) -> AlarmRecord {
        AlarmRecord {
            alarm_seq: 1,
            opened_at: tick_time(opened),
            closed_at: closed.map(tick_time),
            peak_score,
        }
    }

    #[test]
    fn every_tick_after_the_warmup_is_a_frame_the_fitted_core_scores() {
        let ticks = 600;
        let run = run_offline(PlantConfig::default(), ticks).unwrap();
        let warmup = (TRAINING_FRAMES + CALIBRATION_FRAMES) as u64;
        assert!(!run.monitored_frames.is_empty());
        for (machine, scored) in run.monitored_frames.iter().enumerate() {
            assert_eq!(*scored, ticks - warmup, "machine {machine}");
            assert!(run.flagged_frames[machine] <= *scored);
        }
    }

    #[test]
    fn the_core_fits_on_the_last_calibration_frame_as_the_model_actor_does() {
        let mut plant = Plant::new(PlantConfig::default()).unwrap();
        let monitor = monitor_configs(&plant).unwrap().remove(0);
        let mut machine = MachineRun::start(monitor).unwrap();
        let warmup = (TRAINING_FRAMES + CALIBRATION_FRAMES) as u64;
        for tick in 0..warmup {
            for sample in plant.step().into_iter().filter(|s| s.machine == 0) {
                machine
                    .ingest(Observation {
                        reading: sample.reading,
                        ts: tick_time(tick),
                        value: sample.value,
                        received_at: tick_time(tick),
                    })
                    .unwrap();
            }
        }
        // Without the fit the detector would wait in `Fitting` for the
        // next frame, as a live monitor never does.
        assert_eq!(machine.core.phase(), radar::detector::Phase::Monitoring);
        assert_eq!(machine.core.processed(), warmup);
    }

    #[test]
    fn a_closing_row_closes_the_open_alarm_with_its_final_peak() {
        let mut run = empty_run();
        let mut open = None;
        run.record_alarm(0, &mut open, row(10, None, 5.0));
        assert_eq!(open, Some(0));
        run.record_alarm(0, &mut open, row(10, Some(30), 9.0));
        assert_eq!(open, None);
        assert_eq!(
            run.alarms,
            vec![OfflineAlarm {
                machine: 0,
                opened_tick: 10,
                closed_tick: Some(30),
                peak_score: 9.0,
            }]
        );
    }

    #[test]
    fn a_closing_row_with_no_open_alarm_is_kept_as_a_whole_alarm() {
        let mut run = empty_run();
        let mut open = None;
        run.record_alarm(0, &mut open, row(10, Some(30), 9.0));
        assert_eq!(open, None);
        assert_eq!(run.alarms.len(), 1);
        assert_eq!(run.alarms[0].opened_tick, 10);
        assert_eq!(run.alarms[0].closed_tick, Some(30));
    }
}
