//! The aligner's open partial frames: which one an observation joins,
//! opening one (making room when [`MAX_OPEN_FRAMES`] are open), dropping
//! those that can no longer complete, expiring values past freshness, and
//! emitting a complete frame.

use chrono::{DateTime, Utc};

use super::{Aligner, Held, MAX_OPEN_FRAMES};
use crate::align::{AlignRejection, Frame};

/// One partial frame: a slot per required reading, in frame order.
#[derive(Debug, Clone)]
pub(super) struct Partial {
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

    pub(super) fn held(&self) -> usize {
        self.held
    }

    /// Oldest and newest source time held.
    fn span(&self) -> (DateTime<Utc>, DateTime<Utc>) {
        (self.lo, self.hi)
    }

    pub(super) fn put(&mut self, position: usize, held: Held) {
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

impl Aligner {
    /// The open frame an observation of `position` at `ts` joins: one that
    /// lacks this reading and stays within the skew with it, nearest in
    /// source time (the older one on a tie).
    pub(super) fn best_frame(&self, position: usize, ts: DateTime<Utc>) -> Option<usize> {
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
    pub(super) fn could_complete(&self, reading: usize, ts: DateTime<Utc>) -> bool {
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
    pub(super) fn open_frame(&mut self, ts: DateTime<Utc>) -> usize {
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
    pub(super) fn drop_dead(
        &mut self,
        position: usize,
        mark: DateTime<Utc>,
        skew: chrono::TimeDelta,
    ) {
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

    /// Emits the complete frame at `index`. Open frames older than it are
    /// overtaken: a frame of an earlier source time can no longer follow
    /// this one, so their values count as superseded.
    pub(super) fn take_frame(&mut self, index: usize) -> Frame {
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
