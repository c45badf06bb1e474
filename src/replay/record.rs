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
        numbers.write_threshold(out, self.threshold)?;
        out.write_all(b",\"p_value\":")?;
        write_number(out, self.p_value)?;
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

/// The JSON text of the last threshold written: from the fit on, a
/// replay's threshold is one number, so it is formatted once, not per row.
#[derive(Debug, Default)]
pub struct JsonNumbers {
    /// The threshold's bits and its text, as `write_number` writes it.
    threshold: Option<(u64, Vec<u8>)>,
}

impl JsonNumbers {
    fn write_threshold(&mut self, out: &mut impl Write, value: Option<f64>) -> io::Result<()> {
        let Some(v) = value else {
            return write_number(out, None);
        };
        match &self.threshold {
            Some((bits, text)) if *bits == v.to_bits() => out.write_all(text),
            _ => {
                let mut text = Vec::with_capacity(24);
                write_number(&mut text, Some(v))?;
                out.write_all(&text)?;
                self.threshold = Some((v.to_bits(), text));
                Ok(())
            }
        }
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
