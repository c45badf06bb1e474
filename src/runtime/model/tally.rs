//! What the metrics were told of the core's counters, and the aggregated
//! `timestamp_unit` log line.

use std::{collections::BTreeMap, time::Duration, time::Instant};

use super::{Clock, Effects, ModelRuntime};
use crate::{
    snapshot::ProcessingCounters,
    telemetry::{MonitorTelemetry, RejectReason, events},
};

/// At most one `timestamp_unit` log line per monitor this often; the
/// rejections are counted in the metrics every batch regardless.
pub(super) const UNIT_WARNING_EVERY: Duration = Duration::from_secs(60);

/// The part of the model's processing counters the metrics have been told,
/// so each batch records only the difference, once per batch instead of
/// once per message. Diffing the counters (rather than tallying each step)
/// also catches values whose fate is decided later than their arrival:
/// superseded, expired or pushed out of a partial frame.
#[derive(Debug, Default)]
pub(super) struct Tally {
    received: u64,
    accepted: u64,
    frames: u64,
    rejected: BTreeMap<String, u64>,
}

impl Tally {
    /// Starts from `counters` (restored ones were reported by an earlier
    /// process, so this one's metrics start at zero).
    pub(super) fn from(counters: &ProcessingCounters) -> Self {
        Self {
            received: counters.observations_received,
            accepted: counters.observations_accepted,
            frames: counters.frames,
            rejected: counters.observations_rejected.clone(),
        }
    }

    pub(super) fn flush(&mut self, counters: &ProcessingCounters, m: &MonitorTelemetry) {
        let step = |told: &mut u64, now: u64| now.saturating_sub(std::mem::replace(told, now));
        let received = step(&mut self.received, counters.observations_received);
        if received > 0 {
            m.emit(events::ObservationsReceived { count: received });
        }
        let accepted = step(&mut self.accepted, counters.observations_accepted);
        if accepted > 0 {
            m.emit(events::ObservationsAccepted { count: accepted });
        }
        for (label, &now) in &counters.observations_rejected {
            let told = match self.rejected.get_mut(label) {
                Some(told) => told,
                None => self.rejected.entry(label.clone()).or_default(),
            };
            let count = step(told, now);
            if count > 0
                && let Some(&reason) = RejectReason::ALL.iter().find(|r| r.as_str() == label)
            {
                m.emit(events::ObservationsRejected { reason, count });
            }
        }
        let frames = step(&mut self.frames, counters.frames);
        if frames > 0 {
            m.emit(events::FramesEmitted { count: frames });
        }
    }
}

/// `timestamp_unit` rejections not yet logged, for one aggregated line.
#[derive(Debug, Default)]
pub(super) struct UnitMismatches {
    /// The reading and the unit of the first rejection since the last line.
    pub(super) first: Option<(usize, Option<&'static str>)>,
    pub(super) count: u64,
    logged_at: Option<Instant>,
}

impl<E: Effects, C: Clock> ModelRuntime<E, C> {
    /// Reports what the core's counters gained since the last report.
    pub(super) fn flush_tally(&mut self) {
        if let Some(facts) = self.lifecycle.facts() {
            self.tally.flush(facts.counters(), &self.metrics);
        }
    }

    /// One line for the `timestamp_unit` rejections since the last one, at
    /// most every [`UNIT_WARNING_EVERY`].
    pub(super) fn log_unit_mismatches(&mut self) {
        let now = self.clock.now();
        let m = &mut self.unit_mismatches;
        let Some((reading, looks_like)) = m.first else {
            return;
        };
        if m.logged_at
            .is_some_and(|at| now.saturating_duration_since(at) < UNIT_WARNING_EVERY)
        {
            return;
        }
        let Some(facts) = self.lifecycle.facts() else {
            return;
        };
        let name = facts
            .config()
            .readings
            .get(reading)
            .map_or("?", |r| r.name.as_str());
        self.metrics.emit(events::TimestampUnitMismatch {
            reading: name,
            configured: self.format.unit().as_str(),
            looks_like,
            count: m.count,
        });
        *m = UnitMismatches {
            logged_at: Some(now),
            ..UnitMismatches::default()
        };
    }
}
