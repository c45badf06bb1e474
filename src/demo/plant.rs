//! The simulated plant: pumps whose sensors share a load, drift with the
//! time of day, carry noise, and now and then fail in known ways.
//!
//! Pure and deterministic: a [`PlantConfig`] (seed included) fixes every
//! value of every tick. One tick is one simulated second; the publisher
//! decides how fast ticks pass in wall time.
//!
//! Each machine has one latent load, a slowly wandering first-order
//! autoregressive process, that drives all four readings with different
//! gains: this is the correlation the detector learns. On top come a daily
//! cycle (ambient temperature, demand), independent sensor noise, and for
//! faulty machines one fault that comes back every `fault_period_ticks`:
//! - a stuck sensor: the flow value freezes and stops following the load;
//! - a step: the motor current jumps by a constant offset;
//! - a slow leak: the pressure sinks linearly, faster than drift ever does,
//!   and recovers the same way once sealed.
//!
//! Machine `i` gets fault `i mod 4` in the order stuck, step, leak, none,
//! so every plant with four or more machines has each fault and at least
//! one fault-free machine.

use serde::Serialize;

use super::{DemoError, rng::SplitMix64};

/// Simulated seconds per tick.
pub const TICK_SECONDS: u64 = 1;
/// Length of the simulated day of the drift cycle, in seconds.
pub const DAY_SECONDS: f64 = 86_400.0;
/// Correlation time of the machine load, in seconds.
const LOAD_TIME_CONSTANT_S: f64 = 1.0;
/// The simulated clock starts at 08:00, when demand rises.
const DAY_OFFSET_S: f64 = 8.0 * 3600.0;

/// One sensor of a pump: its level, how it follows the load and the day,
/// and its noise, in the reading's own unit.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ReadingSpec {
    pub name: &'static str,
    pub unit: &'static str,
    pub base: f64,
    /// Change per standard deviation of the load.
    pub load_gain: f64,
    /// Amplitude of the daily cycle.
    pub daily_gain: f64,
    /// Standard deviation of the sensor noise.
    pub noise: f64,
}

/// The readings of every simulated pump, in feature order.
pub const READINGS: [ReadingSpec; 4] = [
    ReadingSpec {
        name: "pressure",
        unit: "bar",
        base: 4.0,
        load_gain: 0.30,
        daily_gain: 0.10,
        noise: 0.03,
    },
    ReadingSpec {
        name: "flow",
        unit: "m3/h",
        base: 120.0,
        load_gain: 10.0,
        daily_gain: 3.0,
        noise: 1.0,
    },
    ReadingSpec {
        name: "current",
        unit: "A",
        base: 35.0,
        load_gain: 3.0,
        daily_gain: 0.8,
        noise: 0.3,
    },
    ReadingSpec {
        name: "temperature",
        unit: "degC",
        base: 45.0,
        load_gain: 0.8,
        daily_gain: 4.0,
        noise: 0.15,
    },
];

const PRESSURE: usize = 0;
const FLOW: usize = 1;
const CURRENT: usize = 2;

/// Offset of the step fault on the current, in amperes (about 7 noise
/// standard deviations, two thirds of a load standard deviation).
pub const STEP_AMPERES: f64 = 5.0;
/// How fast the leak lowers the pressure, in bar per simulated second.
pub const LEAK_BAR_PER_SECOND: f64 = 0.004;

/// What goes wrong on a machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultKind {
    /// The flow sensor repeats its last value.
    StuckSensor,
    /// The motor current jumps by [`STEP_AMPERES`].
    Step,
    /// The pressure sinks by [`LEAK_BAR_PER_SECOND`] for the first half of
    /// the window, then recovers at the same rate once the leak is sealed.
    SlowLeak,
}

impl FaultKind {
    /// The fault of machine `index`: stuck, step, leak, none, repeating.
    pub fn of_machine(index: usize) -> Option<FaultKind> {
        match index % 4 {
            0 => Some(FaultKind::StuckSensor),
            1 => Some(FaultKind::Step),
            2 => Some(FaultKind::SlowLeak),
            _ => None,
        }
    }

    /// The reading the fault acts on.
    pub fn reading(self) -> usize {
        match self {
            FaultKind::StuckSensor => FLOW,
            FaultKind::Step => CURRENT,
            FaultKind::SlowLeak => PRESSURE,
        }
    }

    /// Where the fault sits in each fault period: (start, end) in ticks after
    /// the period starts. Staggered so the alarms of a demo arrive one by one.
    fn offsets(self) -> (u64, u64) {
        match self {
            FaultKind::SlowLeak => (50, 650),
            FaultKind::StuckSensor => (120, 360),
            FaultKind::Step => (160, 400),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            FaultKind::StuckSensor => "stuck_sensor",
            FaultKind::Step => "step",
            FaultKind::SlowLeak => "slow_leak",
        }
    }
}

/// One occurrence of a fault: active from `start_tick` (included) to
/// `end_tick` (excluded), then repaired.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct FaultWindow {
    pub machine: usize,
    pub kind: FaultKind,
    /// Index into [`READINGS`].
    pub reading: usize,
    pub start_tick: u64,
    pub end_tick: u64,
}

impl FaultWindow {
    pub fn contains(&self, tick: u64) -> bool {
        (self.start_tick..self.end_tick).contains(&tick)
    }
}

/// Everything that decides a plant's values.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlantConfig {
    pub seed: u64,
    pub machines: usize,
    /// Topics are `<topic_prefix>/pump-<n>/<reading>`. Part of each
    /// monitor's fingerprint: keep it stable between runs that should
    /// restore each other's snapshots.
    pub topic_prefix: String,
    /// Ticks before the first fault period: the monitors' training and
    /// calibration must fit in here, so faults hit fitted detectors.
    pub warmup_ticks: u64,
    /// Faults repeat with this period (ticks).
    pub fault_period_ticks: u64,
}

impl Default for PlantConfig {
    fn default() -> Self {
        Self {
            seed: 2026,
            machines: 4,
            topic_prefix: "radar-demo".to_string(),
            warmup_ticks: 400,
            fault_period_ticks: 1800,
        }
    }
}

/// How far the leak of `window` has lowered the pressure at `tick`: down
/// for half the window, back up for the other half, so the process is
/// normal again when the window ends (an instant repair would be a second,
/// opposite step that the monitor rightly flags long after the window).
pub fn leak_drop(window: &FaultWindow, tick: u64) -> f64 {
    let since_start = tick.saturating_sub(window.start_tick);
    let until_end = window.end_tick.saturating_sub(tick);
    LEAK_BAR_PER_SECOND * (since_start.min(until_end) * TICK_SECONDS) as f64
}

/// One reading's value at one tick.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Sample {
    pub machine: usize,
    /// Index into [`READINGS`].
    pub reading: usize,
    pub value: f64,
}

/// One simulated pump.
#[derive(Debug, Clone)]
pub struct Machine {
    pub index: usize,
    pub name: String,
    pub fault: Option<FaultKind>,
    topics: Vec<String>,
    rng: SplitMix64,
    /// The latent load, in standard deviations.
    load: f64,
    /// The frozen value while the sensor is stuck.
    stuck_at: Option<f64>,
}

impl Machine {
    /// The MQTT topic of each reading, in [`READINGS`] order.
    pub fn topics(&self) -> &[String] {
        &self.topics
    }
}

/// The whole plant and its simulated clock.
#[derive(Debug, Clone)]
pub struct Plant {
    config: PlantConfig,
    machines: Vec<Machine>,
    /// The next tick to generate.
    tick: u64,
}

impl Plant {
    pub fn new(config: PlantConfig) -> Result<Self, DemoError> {
        if config.machines == 0 {
            return Err(DemoError::Config(
                "the plant needs at least one machine (--monitors 1 or more)".into(),
            ));
        }
        let prefix = config.topic_prefix.trim_end_matches('/');
        if prefix.is_empty() || prefix.contains(['+', '#', '\0']) || prefix.starts_with('$') {
            return Err(DemoError::Config(format!(
                "topic prefix {:?} must be a plain MQTT topic (no wildcards, not a $ system topic)",
                config.topic_prefix
            )));
        }
        let (_, last_end) = FaultKind::SlowLeak.offsets();
        if config.fault_period_ticks <= last_end {
            return Err(DemoError::Config(format!(
                "fault period of {} ticks is too short: faults need more than {last_end}",
                config.fault_period_ticks
            )));
        }
        let machines = (0..config.machines)
            .map(|index| {
                let name = format!("pump-{}", index + 1);
                Machine {
                    index,
                    fault: FaultKind::of_machine(index),
                    topics: READINGS
                        .iter()
                        .map(|r| format!("{prefix}/{name}/{}", r.name))
                        .collect(),
                    name,
                    // Each machine draws from its own stream, so adding a
                    // machine does not change the others.
                    rng: SplitMix64::new(
                        config
                            .seed
                            .wrapping_add((index as u64 + 1).wrapping_mul(0xA076_1D64_78BD_642F)),
                    ),
                    load: 0.0,
                    stuck_at: None,
                }
            })
            .collect();
        Ok(Self {
            config,
            machines,
            tick: 0,
        })
    }

    pub fn config(&self) -> &PlantConfig {
        &self.config
    }

    pub fn machines(&self) -> &[Machine] {
        &self.machines
    }

    /// The tick [`Plant::step`] generates next.
    pub fn next_tick(&self) -> u64 {
        self.tick
    }

    /// Every fault window that starts before `until_tick`, ordered by start.
    pub fn fault_windows(&self, until_tick: u64) -> Vec<FaultWindow> {
        let mut windows: Vec<FaultWindow> = self
            .machines
            .iter()
            .filter_map(|m| m.fault.map(|kind| (m.index, kind)))
            .flat_map(|(machine, kind)| {
                let (start, end) = kind.offsets();
                let period = self.config.fault_period_ticks;
                let first = self.config.warmup_ticks;
                (0..)
                    .map(move |cycle| FaultWindow {
                        machine,
                        kind,
                        reading: kind.reading(),
                        start_tick: first + cycle * period + start,
                        end_tick: first + cycle * period + end,
                    })
                    .take_while(move |w| w.start_tick < until_tick)
            })
            .collect();
        windows.sort_by_key(|w| (w.start_tick, w.machine));
        windows
    }

    /// The fault active on `machine` at `tick`, if any.
    pub fn active_fault(&self, machine: usize, tick: u64) -> Option<FaultWindow> {
        let kind = self.machines.get(machine)?.fault?;
        let period = self.config.fault_period_ticks;
        let since = tick.checked_sub(self.config.warmup_ticks)?;
        let cycle_start = tick - since % period;
        let (start, end) = kind.offsets();
        let window = FaultWindow {
            machine,
            kind,
            reading: kind.reading(),
            start_tick: cycle_start + start,
            end_tick: cycle_start + end,
        };
        window.contains(tick).then_some(window)
    }

    /// Generates the current tick (one sample per machine and reading, in
    /// machine then reading order) and advances the clock.
    pub fn step(&mut self) -> Vec<Sample> {
        let tick = self.tick;
        let seconds = (tick * TICK_SECONDS) as f64;
        let daily = (std::f64::consts::TAU * (seconds + DAY_OFFSET_S) / DAY_SECONDS).sin();
        let phi = (-(TICK_SECONDS as f64) / LOAD_TIME_CONSTANT_S).exp();
        let innovation = (1.0 - phi * phi).sqrt();
        let faults: Vec<Option<FaultWindow>> = (0..self.machines.len())
            .map(|m| self.active_fault(m, tick))
            .collect();
        let mut samples = Vec::with_capacity(self.machines.len() * READINGS.len());
        for (machine, fault) in self.machines.iter_mut().zip(faults) {
            machine.load = phi * machine.load + innovation * machine.rng.normal();
            // Every draw happens whatever the fault, so a faulty machine's
            // values differ from its fault-free twin only inside the window.
            let clean: Vec<f64> = READINGS
                .iter()
                .map(|spec| {
                    spec.base
                        + spec.load_gain * machine.load
                        + spec.daily_gain * daily
                        + spec.noise * machine.rng.normal()
                })
                .collect();
            if fault.is_none() {
                machine.stuck_at = None;
            }
            for (reading, clean_value) in clean.into_iter().enumerate() {
                let value = match fault {
                    Some(w) if w.reading == reading => match w.kind {
                        FaultKind::StuckSensor => *machine.stuck_at.get_or_insert(clean_value),
                        FaultKind::Step => clean_value + STEP_AMPERES,
                        FaultKind::SlowLeak => clean_value - leak_drop(&w, tick),
                    },
                    _ => clean_value,
                };
                samples.push(Sample {
                    machine: machine.index,
                    reading,
                    value,
                });
            }
        }
        self.tick += 1;
        samples
    }

    /// The MQTT topic of a sample (`None` for a sample of another plant).
    pub fn topic(&self, sample: &Sample) -> Option<&str> {
        self.machines
            .get(sample.machine)?
            .topics
            .get(sample.reading)
            .map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
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
                let window = windows.iter().find(|w| {
                    w.machine == fs.machine && w.reading == fs.reading && w.contains(tick)
                });
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
}
