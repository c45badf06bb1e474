//! Reading the cells of a CSV row: trimmed bytes, numbers and timestamps.

use std::io::Read;

use chrono::{DateTime, NaiveDateTime, Utc};
use csv::{ByteRecord, StringRecord};

/// The current CSV row. A row that is UTF-8 throughout (checked once, for the
/// whole row, by csv) is kept as text, so its numbers parse without a UTF-8
/// check per cell (those checks were a twentieth of `radar detect`'s time);
/// any other row stays bytes and each cell is checked as it is read.
#[derive(Debug, Default)]
pub(super) enum Row {
    /// No row yet (or one being read): every cell is absent. Unlike an
    /// empty record it allocates nothing, so reading a row allocates nothing.
    #[default]
    Unread,
    Text(StringRecord),
    Bytes(ByteRecord),
}

impl Row {
    /// Reads the next record into this row, reusing its memory; false at the
    /// end of the file.
    pub(super) fn read<R: Read>(&mut self, reader: &mut csv::Reader<R>) -> csv::Result<bool> {
        let mut bytes = match std::mem::take(self) {
            Row::Unread => ByteRecord::new(),
            Row::Text(text) => text.into_byte_record(),
            Row::Bytes(bytes) => bytes,
        };
        let read = reader.read_byte_record(&mut bytes);
        *self = match StringRecord::from_byte_record(bytes) {
            Ok(text) => Row::Text(text),
            Err(e) => Row::Bytes(e.into_byte_record()),
        };
        read
    }

    /// A cell's bytes without surrounding ASCII whitespace ("" when absent).
    pub(super) fn cell(&self, index: usize) -> &[u8] {
        match self {
            Row::Text(text) => text.get(index).unwrap_or_default().as_bytes().trim_ascii(),
            Row::Bytes(bytes) => bytes.get(index).unwrap_or_default().trim_ascii(),
            Row::Unread => b"",
        }
    }

    /// The number in a cell: `None` when the cell is empty or absent,
    /// `Some(None)` when it is not a number.
    pub(super) fn number(&self, index: usize) -> Option<Option<f64>> {
        match self {
            Row::Text(text) => {
                let raw = text.get(index).unwrap_or_default().trim_ascii();
                (!raw.is_empty()).then(|| raw.parse().ok())
            }
            Row::Bytes(_) | Row::Unread => {
                let raw = self.cell(index);
                (!raw.is_empty()).then(|| parse_f64(raw))
            }
        }
    }
}

fn parse_f64(raw: &[u8]) -> Option<f64> {
    std::str::from_utf8(raw).ok()?.parse().ok()
}

/// [`parse_timestamp_bytes`] with the date of the last `YYYY-MM-DD
/// hh:mm:ss` timestamp kept by its text: the rows of one day share it, so
/// the calendar check runs once a day instead of once a row (it was a
/// twentieth of the reading thread's time). Only the time of day is read
/// for a row of the kept date, by the same digits and checks.
#[derive(Debug, Default)]
pub(super) struct Timestamps {
    date: Option<([u8; 10], chrono::NaiveDate)>,
}

impl Timestamps {
    pub(super) fn parse(&mut self, raw: &[u8]) -> Option<DateTime<Utc>> {
        let Some((day, [h0, h1, i0, i1, s0, s1])) = common_form(raw) else {
            return parse_timestamp_bytes(raw);
        };
        let date = match &self.date {
            Some((text, date)) if text == day => *date,
            _ => {
                // The common form: read by the date and time's digits.
                let ts = parse_timestamp_bytes(raw)?;
                self.date = Some((*day, ts.date_naive()));
                return Some(ts);
            }
        };
        let n = |a: u8, b: u8| u32::from(a - b'0') * 10 + u32::from(b - b'0');
        date.and_hms_opt(n(h0, h1), n(i0, i1), n(s0, s1))
            .map(|t| t.and_utc())
    }
}

/// A timestamp of the `YYYY-MM-DD hh:mm:ss` form that
/// [`parse_timestamp_bytes`] reads directly: its date text and the six
/// digits of its time.
fn common_form(raw: &[u8]) -> Option<(&[u8; 10], [u8; 6])> {
    let (day, rest) = raw.split_first_chunk::<10>()?;
    let &[y0, y1, y2, y3, b'-', m0, m1, b'-', d0, d1] = day else {
        return None;
    };
    let &[b' ', h0, h1, b':', i0, i1, b':', s0, s1] = rest else {
        return None;
    };
    let time = [h0, h1, i0, i1, s0, s1];
    let date = [y0, y1, y2, y3, m0, m1, d0, d1];
    (date.iter().all(|d| d.is_ascii_digit()) && time.iter().all(u8::is_ascii_digit))
        .then_some((day, time))
}

/// `parse_timestamp` on bytes, with the common `YYYY-MM-DD hh:mm:ss` form
/// read directly (chrono's format parser dominated replay time).
pub(super) fn parse_timestamp_bytes(raw: &[u8]) -> Option<DateTime<Utc>> {
    if let [
        y0,
        y1,
        y2,
        y3,
        b'-',
        m0,
        m1,
        b'-',
        d0,
        d1,
        b' ',
        h0,
        h1,
        b':',
        i0,
        i1,
        b':',
        s0,
        s1,
    ] = raw
    {
        let digits = [y0, y1, y2, y3, m0, m1, d0, d1, h0, h1, i0, i1, s0, s1];
        if digits.iter().all(|d| d.is_ascii_digit()) {
            let n = |a: &u8, b: &u8| u32::from(a - b'0') * 10 + u32::from(b - b'0');
            let year = n(y0, y1) * 100 + n(y2, y3);
            return chrono::NaiveDate::from_ymd_opt(year as i32, n(m0, m1), n(d0, d1))
                .and_then(|d| d.and_hms_opt(n(h0, h1), n(i0, i1), n(s0, s1)))
                .map(|t| t.and_utc());
        }
    }
    parse_timestamp(std::str::from_utf8(raw).ok()?)
}

/// `YYYY-MM-DD hh:mm:ss[.fff]` (UTC), RFC 3339, or integer epoch milliseconds.
pub fn parse_timestamp(text: &str) -> Option<DateTime<Utc>> {
    if let Ok(ms) = text.parse::<i64>() {
        return DateTime::from_timestamp_millis(ms);
    }
    if let Ok(ts) = DateTime::parse_from_rfc3339(text) {
        return Some(ts.with_timezone(&Utc));
    }
    NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S%.f")
        .ok()
        .map(|naive| naive.and_utc())
}
