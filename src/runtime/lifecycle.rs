//! The model side's lifecycle as a type: which state a monitor's model is
//! in, and what each state may still do.
//!
//! Only [`Lifecycle::Live`] holds a [`MonitorCore`] that can ingest, fit or
//! export a snapshot. Every other state keeps its core behind [`Retired`],
//! which can be read and can record what still happens around it (a
//! connection change, a silence, a commit that ends a stall) but has no way
//! to score or to be sealed. The two ended states,
//! [`Lifecycle::OwnershipLost`] and [`Lifecycle::Stopped`], keep no core at
//! all. So once a monitor has sealed its last snapshot, been quarantined,
//! lost its ownership or stopped, no code path can score or checkpoint it
//! again: there is nothing to call.
//!
//! The issue's names for these states: running and stalled are `Live`
//! (below), draining is `Drained`, then `Quarantined`, `OwnershipLost` and
//! `Stopped`.
//!
//! ```text
//!   Live ──(input ended, last snapshot sealed)──> Drained
//!    │  ──(a graph node failed uncertainly)─────> Quarantined
//!    └──────────────┬─────────────────────────────────┘
//!                   ├──(halt: a successor committed)──> OwnershipLost
//!                   └──(halt: any other exit reason)──> Stopped
//! ```
//!
//! A live monitor whose checkpoints stopped committing is stalled
//! ([`MonitorCore::is_suspended`]): it still ingests (counting the input
//! without advancing the model) and still seals, because only a committed
//! snapshot ends the stall.

use chrono::{DateTime, Utc};

use super::{ExitReason, MonitorCore, SilenceChange, Step};
use crate::{
    align::Observation,
    config::MonitorConfig,
    coverage::CoverageHistory,
    detector::Phase,
    graph::FailureDiagnostics,
    mqtt::{ConnectionEvent, payload::PayloadRejection},
    snapshot::{ProcessingCounters, RecoveryMetadata},
};

/// Where a monitor's model is in its life, each state with its own data.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
pub enum Lifecycle {
    /// Ingesting, scoring and sealing (stalled included).
    Live(MonitorCore),
    /// Ingestion ended and the last snapshot was sealed: commit reports
    /// still settle, nothing is scored or sealed again.
    Drained(Retired),
    /// A graph node failed uncertainly: no graph call and no snapshot, ever.
    Quarantined {
        core: Retired,
        diagnostics: FailureDiagnostics,
    },
    /// Another worker committed a successor snapshot: this model keeps
    /// nothing and does nothing more.
    OwnershipLost { detail: String },
    /// The monitor ended for any other reason (a graceful stop, a recorded
    /// quarantine, a failure): the model keeps nothing and does nothing more.
    Stopped(ExitReason),
}

impl Lifecycle {
    /// A built or restored core starts live, unless its graph run is
    /// already quarantined.
    pub fn new(core: MonitorCore) -> Self {
        match core.quarantine().cloned() {
            Some(diagnostics) => Self::Quarantined {
                core: Retired(core),
                diagnostics,
            },
            None => Self::Live(core),
        }
    }

    /// The core, only while live: the one way to ingest, fit or seal.
    pub fn live(&mut self) -> Option<&mut MonitorCore> {
        match self {
            Self::Live(core) => Some(core),
            _ => None,
        }
    }

    /// The live core, read-only (a seal reads it).
    pub fn as_live(&self) -> Option<&MonitorCore> {
        match self {
            Self::Live(core) => Some(core),
            _ => None,
        }
    }

    /// What can be read of the model in any state that still holds it.
    pub fn facts(&self) -> Option<Facts<'_>> {
        match self {
            Self::Live(core) => Some(Facts(core)),
            Self::Drained(core) | Self::Quarantined { core, .. } => Some(Facts(&core.0)),
            Self::OwnershipLost { .. } | Self::Stopped(_) => None,
        }
    }

    /// Whether the monitor ended (ownership lost or stopped): the model
    /// keeps nothing, not even a view.
    pub fn has_ended(&self) -> bool {
        matches!(self, Self::OwnershipLost { .. } | Self::Stopped(_))
    }

    /// Why the model seals nothing in this state; `None` while live.
    pub fn why_not_live(&self) -> Option<&'static str> {
        match self {
            Self::Live(_) => None,
            Self::Drained(_) => Some("the monitor sealed its last snapshot"),
            Self::Quarantined { .. } => {
                Some("the monitor is quarantined; it never exports a snapshot again")
            }
            Self::OwnershipLost { .. } => {
                Some("the monitor's ownership was lost to another worker")
            }
            Self::Stopped(_) => Some("the monitor is stopped"),
        }
    }

    /// Why the graph run is quarantined, while it is.
    pub fn quarantine(&self) -> Option<&FailureDiagnostics> {
        match self {
            Self::Quarantined { diagnostics, .. } => Some(diagnostics),
            _ => None,
        }
    }

    /// Offers one observation while live; `None` in every other state.
    /// A step that quarantines the graph run leaves the monitor
    /// quarantined (the step still carries the diagnostics to report).
    pub fn ingest(
        &mut self,
        parsed: Result<Observation, PayloadRejection>,
        now: DateTime<Utc>,
    ) -> Option<Step> {
        let step = self.live()?.ingest(parsed, now);
        if let Some(diagnostics) = &step.quarantined {
            self.quarantine_with(diagnostics.clone());
        }
        Some(step)
    }

    /// Input ended and the last snapshot was sealed: live -> drained.
    /// Returns whether the monitor was live.
    pub fn drain(&mut self) -> bool {
        self.retire(Self::Drained)
    }

    /// A terminal state from the monitor: the core is dropped. A lost
    /// ownership is a state of its own; every other reason stops.
    pub fn halt(&mut self, reason: ExitReason) {
        *self = match reason {
            ExitReason::OwnershipLost { detail } => Self::OwnershipLost { detail },
            other => Self::Stopped(other),
        };
    }

    /// Records a connection change in the coverage history (any state that
    /// holds the model); returns whether the history changed.
    pub fn record_connection(&mut self, event: &ConnectionEvent) -> bool {
        self.kept_mut()
            .is_some_and(|core| core.record_connection(event))
    }

    /// Opens or closes the `no_data` gap; returns whether the history changed.
    pub fn record_silence(&mut self, change: &SilenceChange) -> bool {
        self.kept_mut()
            .is_some_and(|core| core.record_silence(change))
    }

    /// A checkpoint committed: ends a stall; returns whether one ended.
    pub fn resume(&mut self, now: DateTime<Utc>) -> bool {
        self.kept_mut().is_some_and(|core| core.resume(now))
    }

    /// See [`MonitorCore::continue_alarms_after`].
    pub fn continue_alarms_after(&mut self, seq: u64) {
        if let Some(core) = self.kept_mut() {
            core.continue_alarms_after(seq);
        }
    }

    fn quarantine_with(&mut self, diagnostics: FailureDiagnostics) {
        self.retire(|core| Self::Quarantined { core, diagnostics });
    }

    /// Moves a live core into the state `to` builds; nothing otherwise.
    fn retire(&mut self, to: impl FnOnce(Retired) -> Self) -> bool {
        if !matches!(self, Self::Live(_)) {
            return false;
        }
        let Self::Live(core) = std::mem::replace(self, Self::Stopped(ExitReason::Stopped)) else {
            return false;
        };
        *self = to(Retired(core));
        true
    }

    /// The core for the bookkeeping every state that holds it may do. Kept
    /// private: callers reach it only through the methods above, which
    /// neither score nor export.
    fn kept_mut(&mut self) -> Option<&mut MonitorCore> {
        match self {
            Self::Live(core) => Some(core),
            Self::Drained(core) | Self::Quarantined { core, .. } => Some(&mut core.0),
            Self::OwnershipLost { .. } | Self::Stopped(_) => None,
        }
    }
}

/// A core that left the live state. It offers nothing: reads go through
/// [`Facts`], the remaining bookkeeping through [`Lifecycle`].
#[derive(Debug)]
pub struct Retired(MonitorCore);

/// A read-only view of a model, in whatever state: what the view, the
/// metrics and the logs need, and nothing that could export it.
#[derive(Debug, Clone, Copy)]
pub struct Facts<'a>(&'a MonitorCore);

impl<'a> From<&'a MonitorCore> for Facts<'a> {
    fn from(core: &'a MonitorCore) -> Self {
        Self(core)
    }
}

impl<'a> Facts<'a> {
    pub fn config(&self) -> &'a MonitorConfig {
        self.0.config()
    }

    pub fn phase(&self) -> Phase {
        self.0.phase()
    }

    pub fn processed(&self) -> u64 {
        self.0.processed()
    }

    /// Training and calibration frames the built-in detector holds; none
    /// for a graph run.
    pub fn buffered_frames(&self) -> (usize, usize) {
        self.0.detector().map_or((0, 0), |d| d.buffered_frames())
    }

    pub fn is_suspended(&self) -> bool {
        self.0.is_suspended()
    }

    pub fn coverage(&self) -> &'a CoverageHistory {
        self.0.coverage()
    }

    pub fn recovery(&self) -> &'a RecoveryMetadata {
        self.0.recovery()
    }

    pub fn counters(&self) -> &'a ProcessingCounters {
        self.0.counters()
    }

    /// Values waiting in a partial frame.
    pub fn held_values(&self) -> usize {
        self.0.aligner().held_values()
    }
}

#[cfg(test)]
mod tests;
