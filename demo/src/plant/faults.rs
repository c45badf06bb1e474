//! The faults of the simulated plant: which machine gets which fault, where
//! each fault window sits in its period, and how a leak lowers the pressure.

use serde::Serialize;

use super::{CURRENT, FLOW, PRESSURE, Plant, TICK_SECONDS};

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
    pub(super) fn offsets(self) -> (u64, u64) {
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
    /// Index into [`READINGS`](super::READINGS).
    pub reading: usize,
    pub start_tick: u64,
    pub end_tick: u64,
}

impl FaultWindow {
    pub fn contains(&self, tick: u64) -> bool {
        (self.start_tick..self.end_tick).contains(&tick)
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

impl Plant {
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
}
