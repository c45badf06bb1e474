//! Gap totals by cause: how many gaps and how much uncovered time.

use chrono::TimeDelta;
use serde::{Deserialize, Serialize};

use super::GapCause;

/// Count and summed length of the gaps of one cause.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GapTotal {
    pub gaps: u64,
    pub millis: u64,
}

impl GapTotal {
    pub fn seconds(&self) -> f64 {
        self.millis as f64 / 1_000.0
    }
}

/// Gap totals for every cause. Sums saturate instead of wrapping.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct GapTotals {
    pub startup: GapTotal,
    pub mqtt_outage: GapTotal,
    pub restart_rollback: GapTotal,
    pub checkpoint_stall: GapTotal,
    pub no_data: GapTotal,
}

impl GapTotals {
    pub fn get(&self, cause: GapCause) -> GapTotal {
        match cause {
            GapCause::Startup => self.startup,
            GapCause::MqttOutage => self.mqtt_outage,
            GapCause::RestartRollback => self.restart_rollback,
            GapCause::CheckpointStall => self.checkpoint_stall,
            GapCause::NoData => self.no_data,
        }
    }

    /// Number of gaps over every cause.
    pub fn gaps(&self) -> u64 {
        GapCause::ALL
            .iter()
            .fold(0u64, |sum, &c| sum.saturating_add(self.get(c).gaps))
    }

    /// Uncovered seconds over every cause.
    pub fn seconds(&self) -> f64 {
        GapCause::ALL.iter().map(|&c| self.get(c).seconds()).sum()
    }

    /// Adds one gap of `length` (negative lengths count as zero).
    pub(super) fn add(&mut self, cause: GapCause, length: TimeDelta) {
        let total = self.slot(cause);
        let millis = u64::try_from(length.num_milliseconds()).unwrap_or(0);
        total.gaps = total.gaps.saturating_add(1);
        total.millis = total.millis.saturating_add(millis);
    }

    /// The sum of two totals.
    pub(super) fn merged(mut self, other: &GapTotals) -> GapTotals {
        for cause in GapCause::ALL {
            let theirs = other.get(cause);
            let ours = self.slot(cause);
            ours.gaps = ours.gaps.saturating_add(theirs.gaps);
            ours.millis = ours.millis.saturating_add(theirs.millis);
        }
        self
    }

    fn slot(&mut self, cause: GapCause) -> &mut GapTotal {
        match cause {
            GapCause::Startup => &mut self.startup,
            GapCause::MqttOutage => &mut self.mqtt_outage,
            GapCause::RestartRollback => &mut self.restart_rollback,
            GapCause::CheckpointStall => &mut self.checkpoint_stall,
            GapCause::NoData => &mut self.no_data,
        }
    }
}
