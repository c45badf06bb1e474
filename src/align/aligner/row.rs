//! Admitting a whole row at once: observations of distinct readings that
//! share one source time, receipt and processing time, and together carry
//! every required reading.
//!
//! When nothing is held and the row is newer than every watermark,
//! [`Aligner::admit`] on each of its observations, in any order, would
//! accept every one (none is too old, stale, from the future or out of
//! skew, and nothing held can expire), complete the frame of the row's own
//! values on the last required one and end with nothing held, each of the
//! row's readings watermarked at its time. [`Aligner::admit_row`] reaches
//! that state directly, without a partial frame or a watermark lookup by
//! name, and otherwise leaves everything untouched for `admit`.

use chrono::{DateTime, Utc};

use super::Aligner;
use crate::align::Frame;

/// A row of observations that share their clocks.
#[derive(Debug, Clone, Copy)]
pub struct Row<'a> {
    /// The monitor's index of each value's reading.
    pub readings: &'a [usize],
    pub values: &'a [f64],
    /// Source time of every value.
    pub ts: DateTime<Utc>,
    /// Receipt time of every value (this worker's clock).
    pub received_at: DateTime<Utc>,
}

/// The frame a row completed, and how many of its values were of optional
/// readings (accepted, but in no frame).
#[derive(Debug, Clone, PartialEq)]
pub struct RowFrame {
    pub frame: Frame,
    pub optional: usize,
}

impl Aligner {
    /// Admits `row` at processing time `now` as [`Aligner::admit`] would
    /// admit its observations one by one, when that is sure to complete the
    /// row's own frame; `None`, with nothing changed, otherwise (admit the
    /// observations one by one then).
    pub fn admit_row(&mut self, row: Row<'_>, now: DateTime<Utc>) -> Option<RowFrame> {
        let mask = self.row_mask(row)?;
        let newest = self.newest.is_none_or(|mark| mark < row.ts);
        if !(newest && self.open.is_empty() && self.punctual(row, now)) {
            return None;
        }
        let mut values = std::mem::take(&mut self.spare_frame);
        values.clear();
        values.resize(self.width, 0.0);
        let mut optional = 0;
        for (&reading, &value) in row.readings.iter().zip(row.values) {
            match self.slots[reading].position {
                Some(position) => values[position] = value,
                None => optional += 1,
            }
        }
        self.watermark_row(row, mask);
        let counters = &mut self.counters;
        counters.accepted = counters.accepted.saturating_add(row.readings.len() as u64);
        counters.frames = counters.frames.saturating_add(1);
        Some(RowFrame {
            frame: Frame { ts: row.ts, values },
            optional,
        })
    }

    /// Takes back the storage of a frame the caller is done with: the next
    /// row's frame reuses it instead of allocating.
    pub fn recycle(&mut self, frame: Frame) {
        self.spare_frame = frame.values;
    }

    /// Whether no observation of `row` is too old, from the future, or
    /// would expire before the row's last one: always so for a row stamped
    /// `now` on every clock (the limits are never negative), the common case
    /// of a replay, checked without date arithmetic.
    fn punctual(&self, row: Row<'_>, now: DateTime<Utc>) -> bool {
        if row.ts == now && row.received_at == now {
            return true;
        }
        now - row.ts <= self.policy.max_age()
            && row.ts - row.received_at <= self.policy.future_tolerance()
            && now
                .checked_sub_signed(self.policy.freshness())
                .is_none_or(|cutoff| row.received_at >= cutoff)
    }

    /// The row's readings as a bit set, if they are distinct known readings
    /// with a value each and include every required one.
    fn row_mask(&self, row: Row<'_>) -> Option<u128> {
        if row.readings.len() != row.values.len() || self.slots.len() > 128 {
            return None;
        }
        let mut mask = 0u128;
        let mut required = 0;
        for &reading in row.readings {
            let slot = self.slots.get(reading)?;
            let bit = 1u128 << reading;
            if mask & bit != 0 {
                return None;
            }
            mask |= bit;
            required += usize::from(slot.position.is_some());
        }
        (required == self.width).then_some(mask)
    }

    /// Raises the watermark of each of the row's readings to its time
    /// (newer than all of them). Once every reading has one, the map's
    /// order is `by_name` and no name is looked up.
    fn watermark_row(&mut self, row: Row<'_>, mask: u128) {
        self.newest = Some(row.ts);
        if self.watermarks.0.len() == self.slots.len() {
            for (mark, &slot) in self.watermarks.0.values_mut().zip(&self.by_name) {
                if mask & (1u128 << slot) != 0 {
                    *mark = row.ts;
                }
            }
        } else {
            for &reading in row.readings {
                self.watermarks.advance(&self.slots[reading].name, row.ts);
            }
        }
    }
}
