//! The aligner: a pure state machine that admits observations one at a time
//! and combines the required readings into frames.
//!
//! Admission checks run in a fixed order so each discarded observation has
//! exactly one reason: unknown reading, too old, stale (watermark), future,
//! then skew against the partial frame. `TooOld` comes before the watermark
//! on purpose: a source time older than the maximum age could never be used,
//! whether or not it was seen before, and naming it `too_old` points the
//! operator at the sensor's clock or unit (a timestamp of 0, a day-old
//! reading) instead of hiding it among replays. A re-delivered message
//! within the maximum age is still `stale`, so the watermark keeps replays
//! from advancing a restored detector either way.
//!
//! Two clocks meet here. Source timestamps (`Observation::ts`) come from the
//! sensors; `received_at` and `now` are this worker's clock, where `now` is
//! the processing time (receipt plus time spent queued). Future tolerance
//! compares the source time with receipt; maximum age compares it with
//! processing time; freshness is measured from a held value's receipt to
//! processing time; skew compares source timestamps only.

use chrono::{DateTime, Utc};

use super::{AlignRejection, AlignmentCounters, AlignmentPolicy, Frame, Observation, Watermarks};
use crate::config::ReadingConfig;

/// What happened to one observation.
#[derive(Debug, Clone, PartialEq)]
pub enum Admission {
    /// Discarded, and counted under this reason. Watermarks are unchanged.
    Rejected(AlignRejection),
    /// Accepted into the partial frame; other required readings are missing.
    Held,
    /// Accepted for an optional reading: watermarked, never part of a frame.
    Recorded,
    /// Accepted, and it completed a frame. The partial frame is now empty,
    /// so every required reading needs a newer observation for the next one.
    FrameReady(Frame),
}

/// Why an aligner could not be built from a monitor's readings.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AlignError {
    #[error(
        "the monitor has no required reading, so no frame could ever form; mark at least one reading `required = true`"
    )]
    NoRequiredReading,
    #[error("reading {0:?} appears twice; give each reading a unique name")]
    DuplicateReading(String),
    #[error(
        "the snapshot has a watermark for reading {0:?}, which the monitor does not have; the snapshot does not belong to this configuration"
    )]
    UnknownWatermark(String),
}

/// A value waiting in the partial frame.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Held {
    ts: DateTime<Utc>,
    value: f64,
    received_at: DateTime<Utc>,
}

/// One reading of the monitor, by its index in the monitor's list.
#[derive(Debug, Clone)]
struct Slot {
    name: String,
    /// Position in the frame; `None` for optional readings.
    position: Option<usize>,
}

/// Alignment state of one monitor: watermarks, the partial frame and the
/// counters. Only watermarks and counters are meant to be persisted; the
/// partial frame is deliberately lost on restart.
#[derive(Debug, Clone)]
pub struct Aligner {
    policy: AlignmentPolicy,
    slots: Vec<Slot>,
    /// One entry per required reading, in frame order.
    partial: Vec<Option<Held>>,
    watermarks: Watermarks,
    counters: AlignmentCounters,
}

impl Aligner {
    /// A fresh aligner. `readings` is the monitor's list: an observation's
    /// `reading` is an index into it, and frames hold the required readings
    /// in this order.
    pub fn new(policy: AlignmentPolicy, readings: &[ReadingConfig]) -> Result<Self, AlignError> {
        Self::restore(
            policy,
            readings,
            Watermarks::default(),
            AlignmentCounters::default(),
        )
    }

    /// An aligner resumed from a snapshot: watermarks and counters as saved,
    /// the partial frame empty (values that were waiting before the restart
    /// are not persisted, so each required reading must deliver a newer
    /// observation). Fails if a watermark names a reading the monitor lacks.
    pub fn restore(
        policy: AlignmentPolicy,
        readings: &[ReadingConfig],
        watermarks: Watermarks,
        counters: AlignmentCounters,
    ) -> Result<Self, AlignError> {
        let mut slots: Vec<Slot> = Vec::with_capacity(readings.len());
        let mut required = 0;
        for reading in readings {
            if slots.iter().any(|s| s.name == reading.name) {
                return Err(AlignError::DuplicateReading(reading.name.clone()));
            }
            let position = reading.required.then(|| {
                required += 1;
                required - 1
            });
            slots.push(Slot {
                name: reading.name.clone(),
                position,
            });
        }
        if required == 0 {
            return Err(AlignError::NoRequiredReading);
        }
        if let Some(unknown) = watermarks
            .readings()
            .find(|name| !slots.iter().any(|s| s.name == *name))
        {
            return Err(AlignError::UnknownWatermark(unknown.to_owned()));
        }
        Ok(Self {
            policy,
            slots,
            partial: vec![None; required],
            watermarks,
            counters,
        })
    }

    /// Admits one observation at processing time `now` (this worker's clock).
    pub fn admit(&mut self, obs: Observation, now: DateTime<Utc>) -> Admission {
        let reading = obs.reading;
        let Some(position) = self.slots.get(reading).map(|slot| slot.position) else {
            return self.reject(AlignRejection::UnknownReading);
        };
        if now - obs.ts > self.policy.max_age() {
            return self.reject(AlignRejection::TooOld);
        }
        if self.watermarks.is_stale(&self.slots[reading].name, obs.ts) {
            return self.reject(AlignRejection::Stale);
        }
        if obs.ts - obs.received_at > self.policy.future_tolerance() {
            return self.reject(AlignRejection::Future);
        }
        let Some(position) = position else {
            self.accept(reading, obs.ts);
            return Admission::Recorded;
        };
        self.expire(now);
        let newest_held = self.partial.iter().flatten().map(|h| h.ts).max();
        if newest_held.is_some_and(|newest| newest - obs.ts > self.policy.max_skew()) {
            // Every later frame holds a value at least as new as `newest`,
            // so this one can never be part of a frame.
            return self.reject(AlignRejection::Skew);
        }
        self.accept(reading, obs.ts);
        let held = Held {
            ts: obs.ts,
            value: obs.value,
            received_at: obs.received_at,
        };
        if self.partial[position].replace(held).is_some() {
            self.counters.superseded = self.counters.superseded.saturating_add(1);
        }
        self.drop_skewed(newest_held.map_or(obs.ts, |n| n.max(obs.ts)));
        self.take_frame()
            .map_or(Admission::Held, Admission::FrameReady)
    }

    /// Drops held values that waited longer than the freshness limit by
    /// `now`, counting each as `expired`. `admit` calls this itself; calling
    /// it from a timer only makes the counter more timely.
    pub fn expire(&mut self, now: DateTime<Utc>) -> usize {
        // One cutoff and plain comparisons: this runs for every observation
        // over every held value, and a per-entry date difference dominated
        // the model step of wide monitors. No cutoff: nothing can be older.
        let Some(cutoff) = now.checked_sub_signed(self.policy.freshness()) else {
            return 0;
        };
        let mut expired = 0;
        for entry in &mut self.partial {
            if entry.is_some_and(|held| held.received_at < cutoff) {
                *entry = None;
                expired += 1;
            }
        }
        for _ in 0..expired {
            self.counters.count(AlignRejection::Expired);
        }
        expired
    }

    /// Empties the partial frame, keeping watermarks, and returns how many
    /// held values were discarded (not counted as rejections). For a rollback
    /// inside a running process; [`Aligner::restore`] starts empty anyway.
    pub fn reset_partial(&mut self) -> usize {
        let held = self.held_values();
        self.partial.fill(None);
        held
    }

    /// Values currently waiting in the partial frame.
    pub fn held_values(&self) -> usize {
        self.partial.iter().flatten().count()
    }

    pub fn watermarks(&self) -> &Watermarks {
        &self.watermarks
    }

    pub fn counters(&self) -> &AlignmentCounters {
        &self.counters
    }

    pub fn policy(&self) -> &AlignmentPolicy {
        &self.policy
    }

    fn reject(&mut self, reason: AlignRejection) -> Admission {
        self.counters.count(reason);
        Admission::Rejected(reason)
    }

    /// `reading` must be a valid index (checked by `admit`).
    fn accept(&mut self, reading: usize, ts: DateTime<Utc>) {
        self.watermarks.advance(&self.slots[reading].name, ts);
        self.counters.accepted = self.counters.accepted.saturating_add(1);
    }

    /// Drops the held values further behind `newest` than the maximum skew.
    fn drop_skewed(&mut self, newest: DateTime<Utc>) {
        let Some(cutoff) = newest.checked_sub_signed(self.policy.max_skew()) else {
            return;
        };
        for entry in &mut self.partial {
            if entry.is_some_and(|held| held.ts < cutoff) {
                *entry = None;
                self.counters.count(AlignRejection::Skew);
            }
        }
    }

    /// The complete frame, if every required reading holds a value.
    fn take_frame(&mut self) -> Option<Frame> {
        if self.partial.iter().any(Option::is_none) {
            return None;
        }
        let held: Vec<Held> = self.partial.iter_mut().filter_map(Option::take).collect();
        let ts = held.iter().map(|h| h.ts).max()?;
        self.counters.frames = self.counters.frames.saturating_add(1);
        Some(Frame {
            ts,
            values: held.iter().map(|h| h.value).collect(),
        })
    }
}

#[cfg(test)]
mod tests;
