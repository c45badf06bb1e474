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
//!
//! This file holds the readings, the configuration and the generator;
//! `faults` holds the fault kinds, their windows and the leak's shape.

mod faults;
#[cfg(test)]
mod tests;

use serde::Serialize;

use super::{DemoError, rng::SplitMix64};

pub use self::faults::{FaultKind, FaultWindow, LEAK_BAR_PER_SECOND, STEP_AMPERES, leak_drop};

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
