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

mod cells;
mod record;
#[cfg(test)]
mod tests;

use std::{collections::HashMap, io::Read};

use chrono::{DateTime, Utc};

use crate::{
    align::{Admission, AlignError, Aligner, Frame, Observation},
    config::MonitorConfig,
    detector::{Detector, DetectorError, Outcome},
};

pub use cells::parse_timestamp;
use cells::{cell, parse_f64, parse_timestamp_bytes};
pub use record::ReplayRecord;

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
        let Some((row, ts)) = self.read_row()? else {
            return Ok(None);
        };
        let bad = self.parse_values();
        let fast = self.fast_path
            && bad.is_none()
            && self.newest.is_none_or(|n| ts > n)
            && self.values.iter().all(Option::is_some)
            && (self.unsynced.is_some() || self.aligner.held_values() == 0);
        self.newest = Some(self.newest.map_or(ts, |n| n.max(ts)));
        let completed = if fast {
            self.complete_fast_frame(ts);
            true
        } else {
            self.align_row(ts, bad)
        };
        if let Some((_, reading, column)) = bad {
            return Err(self.bad_value(row, reading, column));
        }
        if !completed {
            return Ok(Some(None));
        }
        Ok(Some(Some(self.score_frame(row)?)))
    }

    /// Reads the next CSV record and parses its timestamp; `None` at the end
    /// of the file. Counts the row even when its timestamp is bad.
    fn read_row(&mut self) -> Result<Option<(u64, DateTime<Utc>)>, ReplayError> {
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
        Ok(Some((row, ts)))
    }

    /// Parses the row's reading cells into `values`, stopping at the first
    /// cell that is not a number; returns that cell as (entry of `columns`,
    /// reading, CSV column).
    fn parse_values(&mut self) -> Option<(usize, usize, usize)> {
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
        bad
    }

    /// The fast path: the row's values are its own frame; the row is kept
    /// to show the aligner later (see `sync`).
    fn complete_fast_frame(&mut self, ts: DateTime<Utc>) {
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
    }

    /// Offers the row's values before the bad cell (all of them when none is
    /// bad) to the aligner; true when one of them completed a frame.
    fn align_row(&mut self, ts: DateTime<Utc>, bad: Option<(usize, usize, usize)>) -> bool {
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
    }

    /// The error for a cell of the current record that is not a number.
    fn bad_value(&self, row: u64, reading: usize, column: usize) -> ReplayError {
        ReplayError::BadValue {
            row,
            column: self.column_names[reading].clone(),
            value: String::from_utf8_lossy(cell(&self.record, column)).into_owned(),
        }
    }

    /// Scores the completed frame, fits when the detector asks to, and
    /// returns the frame's record.
    fn score_frame(&mut self, row: u64) -> Result<ReplayRecord, ReplayError> {
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
        Ok(self.record_of(row, outcome))
    }

    /// The record of the current frame's `outcome`, with the detector's
    /// state after it.
    fn record_of(&self, row: u64, outcome: Outcome) -> ReplayRecord {
        let phase = self.detector.phase();
        let ts = self.frame.ts;
        match outcome {
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
        }
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
