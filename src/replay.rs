//! Offline replay: a CSV file through the same aligner and detector the
//! worker runs, one record per frame. The operator's backtest tool.
//!
//! Each data row becomes one observation per reading column, stamped with
//! the row's time on every clock (source, receipt and processing), so the
//! alignment policy sees a perfectly punctual stream; rows that repeat a
//! timestamp are then rejected as stale exactly as a replayed MQTT message
//! would be. Columns that are not readings (labels, comments) are ignored.

use std::{collections::HashMap, io::Read};

use chrono::{DateTime, NaiveDateTime, Utc};
use serde::Serialize;

use crate::{
    align::{Admission, AlignError, Aligner, Observation},
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
    record: csv::StringRecord,
    time_index: usize,
    /// (reading index in the monitor, column index in the CSV).
    columns: Vec<(usize, usize)>,
    column_names: Vec<String>,
    aligner: Aligner,
    detector: Detector,
    monitor: String,
    row: u64,
}

/// Starts replaying `reader` (CSV with a header row) through `config`.
pub fn replay<R: Read>(
    config: &MonitorConfig,
    reader: R,
    options: &ReplayOptions,
) -> Result<Replay<R>, ReplayError> {
    let mut reader = csv::ReaderBuilder::new()
        .delimiter(options.delimiter)
        .trim(csv::Trim::All)
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
    let width = config.required_readings().count();
    let detector =
        Detector::new(config.detector.clone(), width).map_err(|source| ReplayError::Detector {
            monitor: config.name.clone(),
            source,
        })?;
    Ok(Replay {
        reader,
        record: csv::StringRecord::new(),
        time_index,
        column_names: config.readings.iter().map(|r| r.name.clone()).collect(),
        columns,
        aligner,
        detector,
        monitor: config.name.clone(),
        row: 0,
    })
}

impl<R: Read> Replay<R> {
    /// The detector as it stands after the records read so far.
    pub fn detector(&self) -> &Detector {
        &self.detector
    }

    /// Feeds the next row; returns the record of the frame it completed.
    fn next_row(&mut self) -> Result<Option<Option<ReplayRecord>>, ReplayError> {
        if !self.reader.read_record(&mut self.record)? {
            return Ok(None);
        }
        self.row += 1;
        let row = self.row;
        let raw_ts = self.record.get(self.time_index).unwrap_or_default();
        let ts = parse_timestamp(raw_ts).ok_or_else(|| ReplayError::BadTimestamp {
            row,
            value: raw_ts.to_string(),
        })?;
        let mut completed = None;
        for &(reading, column) in &self.columns {
            let raw = self.record.get(column).unwrap_or_default();
            if raw.is_empty() {
                // A missing value is a reading that did not report this second.
                continue;
            }
            let value: f64 = raw.parse().map_err(|_| ReplayError::BadValue {
                row,
                column: self.column_names[reading].clone(),
                value: raw.to_string(),
            })?;
            if !value.is_finite() {
                // The worker's payload parser refuses non-finite values too.
                continue;
            }
            let observation = Observation {
                reading,
                ts,
                value,
                received_at: ts,
            };
            if let Admission::FrameReady(frame) = self.aligner.admit(observation, ts) {
                completed = Some(frame);
            }
        }
        let Some(frame) = completed else {
            return Ok(Some(None));
        };
        let outcome = self.detector.process(&frame);
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
        let record = match outcome {
            Outcome::Scored(s) => ReplayRecord {
                row,
                ts: frame.ts,
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
                ts: frame.ts,
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

    #[test]
    fn timestamps_are_read_in_three_forms() {
        let want = DateTime::from_timestamp(1_583_748_873, 0);
        assert_eq!(parse_timestamp("2020-03-09 10:14:33"), want);
        assert_eq!(parse_timestamp("2020-03-09T11:14:33+01:00"), want);
        assert_eq!(parse_timestamp("1583748873000"), want);
        assert_eq!(parse_timestamp("yesterday"), None);
    }
}
