//! One replay record and its JSON form, written without serde's per-field
//! dispatch (`radar detect --json` writes one per frame).

use std::io::{self, Write};

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::detector::{AlarmEvent, Phase};

/// What the detector made of one frame.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReplayRecord {
    /// 1-based data row (after the header) whose values completed the frame.
    pub row: u64,
    pub ts: DateTime<Utc>,
    /// The detector's phase after this frame.
    pub phase: Phase,
    /// `None` until monitoring.
    pub score: Option<f64>,
    pub threshold: Option<f64>,
    pub p_value: Option<f64>,
    pub flagged: bool,
    pub alarm_open: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alarm_event: Option<AlarmEvent>,
    /// Per required reading, present on flagged frames.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub contributions: Option<Vec<f64>>,
}

impl ReplayRecord {
    /// Writes the record as one JSON object, byte for byte what
    /// `serde_json::to_writer` writes, without its per-field dispatch and
    /// chrono's formatter: `radar detect --json` writes one per frame.
    pub fn write_json(&self, out: &mut impl Write) -> io::Result<()> {
        self.write_json_with(out, &mut JsonNumbers::default())
    }

    /// [`ReplayRecord::write_json`], with the text of numbers that repeat
    /// from record to record kept in `numbers`: write a replay's records
    /// with one.
    pub fn write_json_with(
        &self,
        out: &mut impl Write,
        numbers: &mut JsonNumbers,
    ) -> io::Result<()> {
        out.write_all(b"{\"row\":")?;
        out.write_all(itoa_u64(self.row, &mut [0; 20]))?;
        out.write_all(b",\"ts\":")?;
        write_ts(out, self.ts)?;
        out.write_all(b",\"phase\":\"")?;
        out.write_all(self.phase.as_str().as_bytes())?;
        out.write_all(b"\",\"score\":")?;
        write_number(out, self.score)?;
        out.write_all(b",\"threshold\":")?;
        numbers.write(out, self.threshold)?;
        out.write_all(b",\"p_value\":")?;
        numbers.write(out, self.p_value)?;
        out.write_all(if self.flagged {
            b",\"flagged\":true"
        } else {
            b",\"flagged\":false"
        })?;
        out.write_all(if self.alarm_open {
            b",\"alarm_open\":true"
        } else {
            b",\"alarm_open\":false"
        })?;
        if let Some(event) = &self.alarm_event {
            out.write_all(b",\"alarm_event\":")?;
            serde_json::to_writer(&mut *out, event)?;
        }
        if let Some(contributions) = &self.contributions {
            out.write_all(b",\"contributions\":")?;
            serde_json::to_writer(&mut *out, contributions)?;
        }
        out.write_all(b"}")
    }
}

/// The JSON text of the numbers that repeat from record to record, by
/// their bits: from the fit on a replay's threshold is one number, and its
/// p-values are conformal ranks, a few hundred values at most, so each is
/// formatted once instead of on every row (formatting a float was a twentieth
/// of `radar detect`'s time). Scores are all different and not kept.
///
/// Direct-mapped: a value's slot is fixed by its bits, a slot keeps the last
/// value written through it, and text is only reused for the very same bits,
/// so what is written is always what [`write_number`] writes.
#[derive(Debug)]
pub struct JsonNumbers {
    slots: Vec<CachedNumber>,
}

/// Slots of [`JsonNumbers`]; a power of two, 20 KiB in all.
const NUMBER_SLOTS: usize = 512;
/// Text kept per slot: serde_json's shortest round-trip form of a finite f64
/// is at most 24 bytes (`-2.2250738585072014e-308`); anything longer would
/// be written without the cache.
const NUMBER_TEXT: usize = 24;

#[derive(Debug, Clone, Copy)]
struct CachedNumber {
    bits: u64,
    /// 0: the slot is empty.
    len: u8,
    text: [u8; NUMBER_TEXT],
}

impl Default for JsonNumbers {
    fn default() -> Self {
        let empty = CachedNumber {
            bits: 0,
            len: 0,
            text: [0; NUMBER_TEXT],
        };
        Self {
            slots: vec![empty; NUMBER_SLOTS],
        }
    }
}

impl JsonNumbers {
    /// [`write_number`] of `value`, from the cache when the same bits were
    /// written through its slot last.
    fn write(&mut self, out: &mut impl Write, value: Option<f64>) -> io::Result<()> {
        let v = match value {
            Some(v) if v.is_finite() => v,
            _ => return write_number(out, value),
        };
        let bits = v.to_bits();
        // Fibonacci hashing: the top bits of the product mix every bit.
        let index =
            (bits.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - NUMBER_SLOTS.ilog2())) as usize;
        let slot = &mut self.slots[index];
        if slot.len != 0 && slot.bits == bits {
            return out.write_all(&slot.text[..usize::from(slot.len)]);
        }
        let mut text = [0u8; NUMBER_TEXT];
        let mut rest: &mut [u8] = &mut text;
        if write_number(&mut rest, value).is_err() {
            // Longer than a slot holds (not expected): written uncached.
            return write_number(out, value);
        }
        let len = NUMBER_TEXT - rest.len();
        *slot = CachedNumber {
            bits,
            len: len as u8,
            text,
        };
        out.write_all(&text[..len])
    }
}

fn itoa_u64(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[i..];
        }
    }
}

/// serde_json's rendering of an `Option<f64>`: shortest round-trip digits,
/// `null` for `None` and for non-finite values.
fn write_number(out: &mut impl Write, value: Option<f64>) -> io::Result<()> {
    use serde_json::ser::{CompactFormatter, Formatter};
    match value {
        Some(v) if v.is_finite() => CompactFormatter.write_f64(out, v),
        _ => out.write_all(b"null"),
    }
}

/// chrono's serde form of a UTC time (`2020-03-09T10:14:33Z`), written
/// directly for whole seconds in years 0 to 9999; anything else goes
/// through chrono itself.
fn write_ts(out: &mut impl Write, ts: DateTime<Utc>) -> io::Result<()> {
    use chrono::{Datelike, Timelike};
    // The naive UTC time's fields: `DateTime`'s own go through an offset.
    let ts = ts.naive_utc();
    let year = ts.year();
    if ts.nanosecond() != 0 || !(0..=9999).contains(&year) {
        return serde_json::to_writer(out, &ts.and_utc()).map_err(io::Error::from);
    }
    let two = |n: u32| [b'0' + (n / 10) as u8, b'0' + (n % 10) as u8];
    let y = year as u32;
    let mut text = *b"\"0000-00-00T00:00:00Z\"";
    text[1..3].copy_from_slice(&two(y / 100));
    text[3..5].copy_from_slice(&two(y % 100));
    text[6..8].copy_from_slice(&two(ts.month()));
    text[9..11].copy_from_slice(&two(ts.day()));
    text[12..14].copy_from_slice(&two(ts.hour()));
    text[15..17].copy_from_slice(&two(ts.minute()));
    text[18..20].copy_from_slice(&two(ts.second()));
    out.write_all(&text)
}
