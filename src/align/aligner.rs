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

/// The most partial frames open at once: enough for readings of a few
/// consecutive ticks to interleave, few enough that memory stays bounded
/// (this many times the required readings) whatever the stream does.
pub const MAX_OPEN_FRAMES: usize = 8;

/// One partial frame: a slot per required reading, in frame order.
#[derive(Debug, Clone)]
struct Partial {
    /// Source time of the value that opened it: what later values are
    /// matched against.
    anchor: DateTime<Utc>,
    /// Oldest and newest source time held, kept up to date so matching an
    /// observation does not walk every slot of every open frame.
    lo: DateTime<Utc>,
    hi: DateTime<Utc>,
    held: usize,
    slots: Vec<Option<Held>>,
}

impl Partial {
    fn values(&self) -> impl Iterator<Item = &Held> {
        self.slots.iter().flatten()
    }

    fn held(&self) -> usize {
        self.held
    }

    /// Oldest and newest source time held.
    fn span(&self) -> (DateTime<Utc>, DateTime<Utc>) {
        (self.lo, self.hi)
    }

    fn put(&mut self, position: usize, held: Held) {
        if self.held == 0 {
            (self.lo, self.hi) = (held.ts, held.ts);
        } else {
            self.lo = self.lo.min(held.ts);
            self.hi = self.hi.max(held.ts);
        }
        if self.slots[position].replace(held).is_none() {
            self.held += 1;
        }
    }

    /// After values were removed: recount and recompute the span.
    fn refresh(&mut self) {
        let mut held = 0;
        let mut span: Option<(DateTime<Utc>, DateTime<Utc>)> = None;
        for h in self.slots.iter().flatten() {
            held += 1;
            span = Some(span.map_or((h.ts, h.ts), |(lo, hi)| (lo.min(h.ts), hi.max(h.ts))));
        }
        self.held = held;
        if let Some((lo, hi)) = span {
            (self.lo, self.hi) = (lo, hi);
        }
    }
}

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
            width: required,
            open: Vec::new(),
            spare: Vec::new(),
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

    /// The open frame an observation of `position` at `ts` joins: one that
    /// lacks this reading and stays within the skew with it, nearest in
    /// source time (the older one on a tie).
    fn best_frame(&self, position: usize, ts: DateTime<Utc>) -> Option<usize> {
        let skew = self.policy.max_skew();
        self.open
            .iter()
            .enumerate()
            .filter(|(_, p)| p.slots[position].is_none())
            .filter(|(_, p)| {
                let (lo, hi) = p.span();
                hi.max(ts) - lo.min(ts) <= skew
            })
            .min_by_key(|(_, p)| (p.anchor - ts).abs())
            .map(|(index, _)| index)
    }

    /// Whether a frame opened at `ts` by `reading` could still complete:
    /// every other required reading's next value (above its watermark)
    /// could still lie within the skew of `ts`.
    fn could_complete(&self, reading: usize, ts: DateTime<Utc>) -> bool {
        let Some(limit) = ts.checked_add_signed(self.policy.max_skew()) else {
            return true;
        };
        self.slots
            .iter()
            .enumerate()
            .filter(|(i, slot)| *i != reading && slot.position.is_some())
            .all(|(_, slot)| {
                self.watermarks
                    .get(&slot.name)
                    .is_none_or(|mark| mark < limit)
            })
    }

    /// Opens a partial frame anchored at `ts`, in anchor order, first
    /// making room by dropping the oldest when [`MAX_OPEN_FRAMES`] are open.
    /// Returns its index.
    fn open_frame(&mut self, ts: DateTime<Utc>) -> usize {
        if self.open.len() >= MAX_OPEN_FRAMES {
            let oldest = self.open.remove(0);
            self.discard(oldest, Discard::Superseded);
        }
        let mut slots = self.spare.pop().unwrap_or_default();
        slots.clear();
        slots.resize(self.width, None);
        let index = self.open.partition_point(|p| p.anchor <= ts);
        self.open.insert(
            index,
            Partial {
                anchor: ts,
                lo: ts,
                hi: ts,
                held: 0,
                slots,
            },
        );
        index
    }

    /// Drops the open frames still missing the reading at `position` that
    /// its new watermark `mark` has made impossible: any later value of it
    /// lies above `mark`, further than the skew from their oldest value.
    fn drop_dead(&mut self, position: usize, mark: DateTime<Utc>, skew: chrono::TimeDelta) {
        let mut i = 0;
        while i < self.open.len() {
            let p = &self.open[i];
            let dead = p.slots[position].is_none()
                && p.span()
                    .0
                    .checked_add_signed(skew)
                    .is_some_and(|limit| mark >= limit);
            if dead {
                let partial = self.open.remove(i);
                self.discard(partial, Discard::Skew);
            } else {
                i += 1;
            }
        }
    }

    /// Counts a partial frame's values under `how` and keeps its storage.
    fn discard(&mut self, partial: Partial, how: Discard) {
        let held = partial.held() as u64;
        match how {
            Discard::Superseded => {
                self.counters.superseded = self.counters.superseded.saturating_add(held);
            }
            Discard::Skew => {
                for _ in 0..held {
                    self.counters.count(AlignRejection::Skew);
                }
            }
        }
        self.spare.push(partial.slots);
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
        for partial in &mut self.open {
            let before = expired;
            for entry in &mut partial.slots {
                if entry.is_some_and(|held| held.received_at < cutoff) {
                    *entry = None;
                    expired += 1;
                }
            }
            if expired > before {
                partial.refresh();
            }
        }
        if expired > 0 {
            let mut i = 0;
            while i < self.open.len() {
                if self.open[i].held() == 0 {
                    let empty = self.open.remove(i);
                    self.spare.push(empty.slots);
                } else {
                    i += 1;
                }
            }
        }
        for _ in 0..expired {
            self.counters.count(AlignRejection::Expired);
        }
        expired
    }

    /// Empties every partial frame, keeping watermarks, and returns how many
    /// held values were discarded (not counted as rejections). For a rollback
    /// inside a running process; [`Aligner::restore`] starts empty anyway.
    pub fn reset_partial(&mut self) -> usize {
        let held = self.held_values();
        for partial in self.open.drain(..) {
            self.spare.push(partial.slots);
        }
        held
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
        self.counters.accepted = self.counters.accepted.saturating_add(1);
    }

    /// Emits the complete frame at `index`. Open frames older than it are
    /// overtaken: a frame of an earlier source time can no longer follow
    /// this one, so their values count as superseded.
    fn take_frame(&mut self, index: usize) -> Frame {
        let complete = self.open.remove(index);
        let older: Vec<Partial> = self.open.drain(..index).collect();
        for partial in older {
            self.discard(partial, Discard::Superseded);
        }
        let ts = complete
            .values()
            .map(|h| h.ts)
            .max()
            .unwrap_or(complete.anchor);
        let values = complete.values().map(|h| h.value).collect();
        self.spare.push(complete.slots);
        self.counters.frames = self.counters.frames.saturating_add(1);
        Frame { ts, values }
    }
}

/// How a partial frame that will not complete is counted.
#[derive(Debug, Clone, Copy)]
enum Discard {
    Superseded,
    Skew,
}

#[cfg(test)]
mod tests;
