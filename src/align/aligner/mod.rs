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
//! Values that share a source time (within `max_skew_ms`) form their frame
//! even when readings of consecutive ticks interleave across topics (tick
//! k+1 of one topic arriving before tick k of another): the aligner keeps
//! up to [`MAX_OPEN_FRAMES`] partial frames, and an observation joins the
//! open frame nearest its source time that lacks its reading and stays
//! within the skew, or opens a new one. A partial frame ends as a frame, or
//! its values are counted: `expired` (freshness), `skew` (a missing reading's
//! watermark passed the point where any later value could fit), or
//! `superseded` (a newer frame completed first, or the oldest frame made room
//! for a new one). Open frames are never persisted: a restore starts empty.
//!
//! Two clocks meet here. Source timestamps (`Observation::ts`) come from the
//! sensors; `received_at` and `now` are this worker's clock, where `now` is
//! the processing time (receipt plus time spent queued). Future tolerance
//! compares the source time with receipt; maximum age compares it with
//! processing time; freshness is measured from a held value's receipt to
//! processing time; skew compares source timestamps only.
//!
//! This file holds construction and the admission order; `partial` keeps
//! the open partial frames (matching, opening, dropping, expiring and
//! emitting them).

mod partial;
mod row;
#[cfg(test)]
mod tests;

use chrono::{DateTime, Utc};

use self::partial::Partial;
pub use self::row::{Row, RowFrame};
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

/// The most partial frames open at once: enough for readings of a few
/// consecutive ticks to interleave, few enough that memory stays bounded
/// (this many times the required readings) whatever the stream does.
pub const MAX_OPEN_FRAMES: usize = 8;

/// Alignment state of one monitor: watermarks, the open partial frames and
/// the counters. Only watermarks and counters are meant to be persisted;
/// partial frames are deliberately lost on restart.
#[derive(Debug, Clone)]
pub struct Aligner {
    policy: AlignmentPolicy,
    slots: Vec<Slot>,
    /// Number of required readings: the width of a frame.
    width: usize,
    /// Open partial frames, oldest anchor first; at most [`MAX_OPEN_FRAMES`].
    open: Vec<Partial>,
    /// Emptied slot vectors, reused so opening a frame does not allocate.
    spare: Vec<Vec<Option<Held>>>,
    watermarks: Watermarks,
    counters: AlignmentCounters,
    /// Slot indices in the order of their names: the order of
    /// `watermarks` once every reading has one (see `row`).
    by_name: Vec<usize>,
    /// The highest watermark of any reading.
    newest: Option<DateTime<Utc>>,
    /// A used frame's values, handed back for the next row's frame.
    spare_frame: Vec<f64>,
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
        let mut by_name: Vec<usize> = (0..slots.len()).collect();
        by_name.sort_by(|&x, &y| slots[x].name.cmp(&slots[y].name));
        Ok(Self {
            by_name,
            newest: watermarks.0.values().max().copied(),
            policy,
            slots,
            width: required,
            open: Vec::new(),
            spare: Vec::new(),
            spare_frame: Vec::new(),
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
        let skew = self.policy.max_skew();
        let target = self.best_frame(position, obs.ts);
        if target.is_none() && !self.could_complete(reading, obs.ts) {
            // Another required reading's watermark is already past the
            // point where a value could fit with this one, so a frame
            // opened by it could never complete.
            return self.reject(AlignRejection::Skew);
        }
        self.accept(reading, obs.ts);
        let held = Held {
            ts: obs.ts,
            value: obs.value,
            received_at: obs.received_at,
        };
        let index = match target {
            Some(index) => index,
            None => self.open_frame(obs.ts),
        };
        self.open[index].put(position, held);
        if self.open[index].held() == self.width {
            return Admission::FrameReady(self.take_frame(index));
        }
        self.drop_dead(position, obs.ts, skew);
        Admission::Held
    }

    /// Values currently waiting in partial frames.
    pub fn held_values(&self) -> usize {
        self.open.iter().map(Partial::held).sum()
    }

    /// Partial frames currently open (at most [`MAX_OPEN_FRAMES`]).
    pub fn open_frames(&self) -> usize {
        self.open.len()
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
        self.newest = self.newest.max(Some(ts));
        self.counters.accepted = self.counters.accepted.saturating_add(1);
    }
}
