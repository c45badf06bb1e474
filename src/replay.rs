//! Offline replay: a CSV file through the same aligner and detector the
//! worker runs, one record per frame. The operator's backtest tool.
//!
//! Each data row becomes one observation per reading column, stamped with
//! the row's time on every clock (source, receipt and processing), so the
//! alignment policy sees a perfectly punctual stream; rows that repeat a
//! timestamp are then rejected as stale exactly as a replayed MQTT message
//! would be. Columns that are not readings (labels, comments) are ignored.
//!
//! Speed: a row that carries every reading column, finite, newer than every
//! row before it, while the aligner holds nothing, can only form the frame of
//! its own values: the aligner would accept each observation, complete the
//! frame on the last required one and end empty, with every watermark at the
//! row's time. Such rows skip the aligner; the last of them is shown to it
//! before any other row, which leaves its watermarks exactly where admitting
//! every row would have (they keep only the newest time per reading). The
//! frames, and so every record, are the same (see the equivalence test).

use std::{
    collections::HashMap,
    io::{self, Read, Write},
};

use chrono::{DateTime, NaiveDateTime, Utc};
use serde::Serialize;

use crate::{
    align::{Admission, AlignError, Aligner, Frame, Observation},
    config::MonitorConfig,
    detector::{AlarmEvent, Detector, DetectorError, Outcome, Phase},
};

/// How to read the CSV file.
#[derive(Debug, Clone)]
pub struct ReplayOptions {
    pub delimiter: u8,
    /// Header of the timestamp column.
    pub time_column: String,
}

impl Default for ReplayOptions {
    fn default() -> Self {
        Self {
            delimiter: b',',
            time_column: "datetime".to_string(),
        }
    }
}

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
        out.write_all(b"{\"row\":")?;
        out.write_all(itoa_u64(self.row, &mut [0; 20]))?;
        out.write_all(b",\"ts\":")?;
        write_ts(out, self.ts)?;
        out.write_all(b",\"phase\":\"")?;
        out.write_all(self.phase.as_str().as_bytes())?;
        out.write_all(b"\",\"score\":")?;
        write_number(out, self.score)?;
        out.write_all(b",\"threshold\":")?;
        write_number(out, self.threshold)?;
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
    let year = ts.year();
    if ts.nanosecond() != 0 || !(0..=9999).contains(&year) {
        return serde_json::to_writer(out, &ts).map_err(io::Error::from);
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

/// Why a replay stopped.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("cannot read the CSV file: {0}")]
    Csv(#[from] csv::Error),
    #[error("the CSV header has no {0:?} column; pass the time column's name (--time-column)")]
    MissingTimeColumn(String),
    #[error(
        "monitor {monitor:?}: the CSV header has no column {reading:?} for a required reading; name the column after the reading"
    )]
    MissingReading { monitor: String, reading: String },
    #[error(
        "row {row}: {value:?} is not a timestamp (use YYYY-MM-DD hh:mm:ss in UTC, RFC 3339 or epoch milliseconds)"
    )]
    BadTimestamp { row: u64, value: String },
    #[error("row {row}, column {column:?}: {value:?} is not a number")]
    BadValue {
        row: u64,
        column: String,
        value: String,
    },
    #[error("monitor {monitor:?}: {source}")]
    Align {
        monitor: String,
        #[source]
        source: AlignError,
    },
    #[error("monitor {monitor:?}: {source}")]
    Detector {
        monitor: String,
        #[source]
        source: DetectorError,
    },
}

/// A replay in progress: an iterator of records, one per frame.
pub struct Replay<R: Read> {
    reader: csv::Reader<R>,
    record: csv::ByteRecord,
    time_index: usize,
    /// (reading index in the monitor, column index in the CSV).
    columns: Vec<(usize, usize)>,
    /// Per reading, its position in a frame (required readings only).
    positions: Vec<Option<usize>>,
    column_names: Vec<String>,
    aligner: Aligner,
    detector: Detector,
    monitor: String,
    row: u64,
    /// This row's value per entry of `columns` (`None`: empty or not finite).
    values: Vec<Option<f64>>,
    /// The newest row time seen; a row must be newer for the fast path.
    newest: Option<DateTime<Utc>>,
    /// The last fast-path row (time, `values`), not yet shown to the aligner.
    unsynced: Option<(DateTime<Utc>, Vec<Option<f64>>)>,
    frame: Frame,
    /// Off only in tests, to compare against the aligner on every row.
    fast_path: bool,
}

/// Starts replaying `reader` (CSV with a header row) through `config`.
pub fn replay<R: Read>(
    config: &MonitorConfig,
    reader: R,
    options: &ReplayOptions,
) -> Result<Replay<R>, ReplayError> {
    // Only the header is trimmed by the reader; cells are trimmed as they
    // are parsed, which spares a pass over every record.
    let mut reader = csv::ReaderBuilder::new()
        .delimiter(options.delimiter)
        .trim(csv::Trim::Headers)
        .from_reader(reader);
    let header: HashMap<String, usize> = reader
        .headers()?
        .iter()
        .enumerate()
        .map(|(i, name)| (name.to_string(), i))
        .collect();
    let time_index = *header
        .get(&options.time_column)
        .ok_or_else(|| ReplayError::MissingTimeColumn(options.time_column.clone()))?;
    let mut columns = Vec::new();
    for (i, reading) in config.readings.iter().enumerate() {
        match header.get(&reading.name) {
            Some(&column) => columns.push((i, column)),
            None if reading.required => {
                return Err(ReplayError::MissingReading {
                    monitor: config.name.clone(),
                    reading: reading.name.clone(),
                });
            }
            None => {}
        }
    }
    let aligner = Aligner::new(config.alignment.clone(), &config.readings).map_err(|source| {
        ReplayError::Align {
            monitor: config.name.clone(),
            source,
        }
    })?;
    let names: Vec<String> = config.required_readings().map(|r| r.name.clone()).collect();
    let width = names.len();
    let detector = Detector::for_readings(config.detector.clone(), &names).map_err(|source| {
        ReplayError::Detector {
            monitor: config.name.clone(),
            source,
        }
    })?;
    let mut required = 0;
    let positions = config
        .readings
        .iter()
        .map(|r| {
            r.required.then(|| {
                required += 1;
                required - 1
            })
        })
        .collect();
    Ok(Replay {
        reader,
        record: csv::ByteRecord::new(),
        time_index,
        column_names: config.readings.iter().map(|r| r.name.clone()).collect(),
        values: vec![None; columns.len()],
        columns,
        positions,
        aligner,
        detector,
        monitor: config.name.clone(),
        row: 0,
        newest: None,
        unsynced: None,
        frame: Frame {
            ts: DateTime::UNIX_EPOCH,
            values: vec![0.0; width],
        },
        fast_path: true,
    })
}

impl<R: Read> Replay<R> {
    /// The detector as it stands after the records read so far.
    pub fn detector(&self) -> &Detector {
        &self.detector
    }

    /// Feeds the next row; returns the record of the frame it completed.
    fn next_row(&mut self) -> Result<Option<Option<ReplayRecord>>, ReplayError> {
        if !self.reader.read_byte_record(&mut self.record)? {
            return Ok(None);
        }
        self.row += 1;
        let row = self.row;
        let raw_ts = cell(&self.record, self.time_index);
        let ts = parse_timestamp_bytes(raw_ts).ok_or_else(|| ReplayError::BadTimestamp {
            row,
            value: String::from_utf8_lossy(raw_ts).into_owned(),
        })?;
        let mut bad = None;
        for (i, &(reading, column)) in self.columns.iter().enumerate() {
            let raw = cell(&self.record, column);
            self.values[i] = if raw.is_empty() {
                // A missing value is a reading that did not report this second.
                None
            } else {
                match parse_f64(raw) {
                    // The worker's payload parser refuses non-finite values too.
                    Some(v) => Some(v).filter(|v| v.is_finite()),
                    None => {
                        bad = Some((i, reading, column));
                        break;
                    }
                }
            };
        }
        let fast = self.fast_path
            && bad.is_none()
            && self.newest.is_none_or(|n| ts > n)
            && self.values.iter().all(Option::is_some)
            && (self.unsynced.is_some() || self.aligner.held_values() == 0);
        self.newest = Some(self.newest.map_or(ts, |n| n.max(ts)));
        let completed = if fast {
            self.frame.ts = ts;
            for (&(reading, _), value) in self.columns.iter().zip(&self.values) {
                if let (Some(position), Some(value)) = (self.positions[reading], value) {
                    self.frame.values[position] = *value;
                }
            }
            match &mut self.unsynced {
                Some((last_ts, last)) => {
                    *last_ts = ts;
                    last.clone_from(&self.values);
                }
                None => self.unsynced = Some((ts, self.values.clone())),
            }
            true
        } else {
            self.sync();
            let admitted = bad.map_or(self.columns.len(), |(i, _, _)| i);
            let mut completed = false;
            for i in 0..admitted {
                if let Some(frame) = self.admit(i, ts, self.values[i]) {
                    self.frame = frame;
                    completed = true;
                }
            }
            completed
        };
        if let Some((_, reading, column)) = bad {
            return Err(ReplayError::BadValue {
                row,
                column: self.column_names[reading].clone(),
                value: String::from_utf8_lossy(cell(&self.record, column)).into_owned(),
            });
        }
        if !completed {
            return Ok(Some(None));
        }
        let outcome = self.detector.process(&self.frame);
        if outcome.fit_due() {
            // The worker checkpoints here, then fits; the numbers are the same.
            self.detector
                .fit()
                .map_err(|source| ReplayError::Detector {
                    monitor: self.monitor.clone(),
                    source,
                })?;
        }
        let phase = self.detector.phase();
        let ts = self.frame.ts;
        let record = match outcome {
            Outcome::Scored(s) => ReplayRecord {
                row,
                ts,
                phase,
                score: Some(s.score),
                threshold: Some(s.threshold),
                p_value: Some(s.p_value),
                flagged: s.flagged,
                alarm_open: s.alarm_open,
                alarm_event: s.alarm_event,
                contributions: s.evidence.map(|e| e.contributions),
            },
            Outcome::Buffered { .. } | Outcome::Rejected(_) => ReplayRecord {
                row,
                ts,
                phase,
                score: None,
                threshold: self.detector.threshold(),
                p_value: None,
                flagged: false,
                alarm_open: self.detector.alarm_open(),
                alarm_event: None,
                contributions: None,
            },
        };
        Ok(Some(Some(record)))
    }

    /// Offers entry `i` of `columns` at `ts` to the aligner.
    fn admit(&mut self, i: usize, ts: DateTime<Utc>, value: Option<f64>) -> Option<Frame> {
        let value = value?;
        let observation = Observation {
            reading: self.columns[i].0,
            ts,
            value,
            received_at: ts,
        };
        match self.aligner.admit(observation, ts) {
            Admission::FrameReady(frame) => Some(frame),
            _ => None,
        }
    }

    /// Shows the aligner the last fast-path row, whose frame was already
    /// scored: its watermarks then stand where they would have.
    fn sync(&mut self) {
        if let Some((ts, values)) = self.unsynced.take() {
            for (i, value) in values.into_iter().enumerate() {
                self.admit(i, ts, value);
            }
        }
    }
}

/// A cell's bytes without surrounding ASCII whitespace ("" when absent).
fn cell(record: &csv::ByteRecord, index: usize) -> &[u8] {
    record.get(index).unwrap_or_default().trim_ascii()
}

fn parse_f64(raw: &[u8]) -> Option<f64> {
    std::str::from_utf8(raw).ok()?.parse().ok()
}

/// `parse_timestamp` on bytes, with the common `YYYY-MM-DD hh:mm:ss` form
/// read directly (chrono's format parser dominated replay time).
fn parse_timestamp_bytes(raw: &[u8]) -> Option<DateTime<Utc>> {
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

impl<R: Read> Iterator for Replay<R> {
    type Item = Result<ReplayRecord, ReplayError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            match self.next_row() {
                Ok(None) => return None,
                Ok(Some(None)) => continue,
                Ok(Some(Some(record))) => return Some(Ok(record)),
                Err(e) => return Some(Err(e)),
            }
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    const MONITOR: &str = r#"
name = "tiny"
[[readings]]
name = "a"
topic = "t/a"
[[readings]]
name = "b"
topic = "t/b"
[[readings]]
name = "c"
topic = "t/c"
required = false
[alignment]
freshness_ms = 5000
max_age_ms = 30000
future_tolerance_ms = 2000
max_skew_ms = 1000
[detector]
training_frames = 20
calibration_frames = 19
false_alarm_rate = 0.05
[detector.alarm]
open_k = 1
open_n = 1
close_m = 1
"#;

    fn csv_text(rows: usize) -> String {
        let mut text = String::from("time;a;label;b\r\n");
        for i in 0..rows {
            let x = i as f64;
            let a = if i == rows - 1 { 50.0 } else { (x * 0.7).sin() };
            text.push_str(&format!(
                "{};{a};{};{}\r\n",
                1_700_000_000_000i64 + 1000 * i as i64,
                i % 2,
                (x * 1.3).cos()
            ));
        }
        text
    }

    fn options() -> ReplayOptions {
        ReplayOptions {
            delimiter: b';',
            time_column: "time".to_string(),
        }
    }

    #[test]
    fn every_row_becomes_a_frame_through_training_calibration_and_monitoring() {
        let config = MonitorConfig::from_toml(MONITOR).unwrap();
        let text = csv_text(45);
        let records: Vec<ReplayRecord> = replay(&config, text.as_bytes(), &options())
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(records.len(), 45);
        assert_eq!(records[0].phase, Phase::Training);
        assert_eq!(records[19].phase, Phase::Calibrating);
        // The last calibration frame triggers the fit.
        assert_eq!(records[38].phase, Phase::Monitoring);
        assert!(records[38].score.is_none());
        assert!(records[39].score.is_some());
        let last = &records[44];
        assert!(last.flagged && last.alarm_open);
        assert_eq!(last.contributions.as_ref().map(Vec::len), Some(2));
        assert_eq!(last.row, 45);
    }

    #[test]
    fn a_repeated_timestamp_is_stale_and_forms_no_frame() {
        let config = MonitorConfig::from_toml(MONITOR).unwrap();
        let text = "time;a;b\n1000;1;2\n1000;3;4\n2000;5;6\n";
        let rows: Vec<u64> = replay(&config, text.as_bytes(), &options())
            .unwrap()
            .map(|r| r.unwrap().row)
            .collect();
        assert_eq!(rows, vec![1, 3]);
    }

    #[test]
    fn missing_columns_and_bad_cells_name_what_is_wrong() {
        let config = MonitorConfig::from_toml(MONITOR).unwrap();
        let err = replay(&config, "time;a\n1;2\n".as_bytes(), &options())
            .err()
            .unwrap();
        assert!(err.to_string().contains("\"b\""), "{err}");
        let mut bad = replay(&config, "time;a;b\n1000;x;2\n".as_bytes(), &options()).unwrap();
        let err = bad.next().unwrap().unwrap_err();
        assert!(err.to_string().contains("row 1, column \"a\""), "{err}");
        let err = replay(&config, "when;a;b\n".as_bytes(), &options())
            .err()
            .unwrap();
        assert!(err.to_string().contains("--time-column"), "{err}");
    }

    /// A CSV with everything the aligner must handle: empty and non-finite
    /// cells, repeated and backward timestamps, rows of the optional
    /// reading only, long gaps.
    fn messy_csv(seed: u64, rows: usize) -> String {
        let mut state = seed;
        let mut next = move || {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1);
            (state >> 33) as u32
        };
        let mut text = String::from("time;a;label;b;c\n");
        let mut t: i64 = 1_700_000_000_000;
        for i in 0..rows {
            t += match next() % 20 {
                0 => 0,
                1 => -3000,
                2 => 60_000,
                3 => 500,
                _ => 1000,
            };
            let x = i as f64;
            let mut cell = |v: f64| match next() % 25 {
                0 => String::new(),
                1 => "NaN".to_string(),
                2 => "inf".to_string(),
                _ => v.to_string(),
            };
            let (a, b, c) = (cell((x * 0.7).sin()), cell((x * 1.3).cos()), cell(x));
            text.push_str(&format!("{t};{a};{};{b};{c}\n", i % 2));
        }
        text
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

        #[test]
        fn skipping_the_aligner_for_punctual_complete_rows_changes_no_record(
            seed in proptest::prelude::any::<u64>(),
        ) {
            let config = MonitorConfig::from_toml(MONITOR).unwrap();
            let text = messy_csv(seed, 300);
            let run = |fast: bool| {
                let mut replay = replay(&config, text.as_bytes(), &options()).unwrap();
                replay.fast_path = fast;
                let records: Vec<ReplayRecord> =
                    replay.by_ref().collect::<Result<_, _>>().unwrap();
                replay.sync();
                (records, replay.detector.clone(), replay.aligner.watermarks().clone())
            };
            let (fast, slow) = (run(true), run(false));
            proptest::prop_assert_eq!(fast, slow);
        }

        #[test]
        fn json_records_are_written_exactly_as_serde_json_writes_them(
            row in proptest::prelude::any::<u64>(),
            secs in -62_000_000_000i64..300_000_000_000,
            nanos in proptest::prop_oneof![proptest::strategy::Just(0u32), 0u32..2_000_000_000],
            score in proptest::option::of(proptest::num::f64::ANY),
            threshold in proptest::option::of(proptest::num::f64::ANY),
            flags in 0u8..4,
            contributions in proptest::option::of(proptest::collection::vec(proptest::num::f64::ANY, 0..4)),
            event in proptest::prelude::any::<bool>(),
        ) {
            let Some(ts) = DateTime::from_timestamp(secs, nanos) else { return Ok(()) };
            let record = ReplayRecord {
                row,
                ts,
                phase: Phase::Monitoring,
                score,
                threshold,
                p_value: score.map(|s| s / 7.0),
                flagged: flags & 1 == 1,
                alarm_open: flags & 2 == 2,
                alarm_event: event.then_some(AlarmEvent::Opened { seq: 3, ts, peak_score: 1.5 }),
                contributions,
            };
            let mut ours = Vec::new();
            record.write_json(&mut ours).unwrap();
            proptest::prop_assert_eq!(
                String::from_utf8(ours).unwrap(),
                serde_json::to_string(&record).unwrap()
            );
        }
    }

    #[test]
    fn timestamps_are_read_in_three_forms() {
        let want = DateTime::from_timestamp(1_583_748_873, 0);
        assert_eq!(parse_timestamp("2020-03-09 10:14:33"), want);
        assert_eq!(parse_timestamp("2020-03-09T11:14:33+01:00"), want);
        assert_eq!(parse_timestamp("1583748873000"), want);
        assert_eq!(parse_timestamp("yesterday"), None);
        assert_eq!(parse_timestamp_bytes(b"2020-03-09 10:14:33"), want);
        assert_eq!(
            parse_timestamp_bytes(b"2020-03-09 10:14:33.5"),
            parse_timestamp("2020-03-09 10:14:33.5")
        );
        assert_eq!(parse_timestamp_bytes(b"2020-02-30 10:14:33"), None);
        assert_eq!(parse_timestamp_bytes(b"2020-03-09 24:00:00"), None);
        assert_eq!(parse_timestamp_bytes(b"1583748873000"), want);
    }
}
