//! The reading stage of a replay: each CSV data row to its number, its time
//! and the values of the reading columns. Knows nothing of frames.

use std::{collections::HashMap, io::Read};

use chrono::{DateTime, Utc};

use super::{
    ReplayError, ReplayOptions,
    cells::{Row, Timestamps},
};
use crate::config::MonitorConfig;

/// The CSV file, its header matched to the monitor's readings.
pub(super) struct Rows<R: Read> {
    reader: csv::Reader<R>,
    record: Row,
    time_index: usize,
    timestamps: Timestamps,
    /// (reading index in the monitor, column index in the CSV).
    columns: Vec<(usize, usize)>,
    column_names: Vec<String>,
    row: u64,
}

/// One data row as read: its number (1-based, after the header), its time
/// and the first of its reading cells that is not a number.
#[derive(Debug)]
pub(super) struct RowHead {
    pub row: u64,
    pub ts: DateTime<Utc>,
    pub bad: Option<BadCell>,
}

/// A reading cell that is not a number: the row's values before it count.
#[derive(Debug)]
pub(super) struct BadCell {
    /// Its entry of `Rows::readings`.
    pub entry: usize,
    /// `ReplayError::BadValue`, naming the cell.
    pub error: ReplayError,
}

impl<R: Read> Rows<R> {
    /// Reads the header of `reader` and finds the time column and a column
    /// for every required reading of `config`.
    pub(super) fn open(
        config: &MonitorConfig,
        reader: R,
        options: &ReplayOptions,
    ) -> Result<Self, ReplayError> {
        // Only the header is trimmed by the reader; cells are trimmed as they
        // are parsed, which spares a pass over every record.
        let mut reader = csv::ReaderBuilder::new()
            .delimiter(options.delimiter)
            .trim(csv::Trim::Headers)
            .buffer_capacity(1 << 16)
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
        Ok(Self {
            reader,
            record: Row::default(),
            time_index,
            timestamps: Timestamps::default(),
            columns,
            column_names: config.readings.iter().map(|r| r.name.clone()).collect(),
            row: 0,
        })
    }

    /// The monitor's index of the reading in each value entry of a row.
    pub(super) fn readings(&self) -> Vec<usize> {
        self.columns.iter().map(|&(reading, _)| reading).collect()
    }

    /// Reads the next row, its values into `values` (one per entry of
    /// `readings`; `None`: empty or not finite); `None` at the end of the
    /// file. A row with a bad timestamp is counted and is an error.
    pub(super) fn next_row(
        &mut self,
        values: &mut [Option<f64>],
    ) -> Result<Option<RowHead>, ReplayError> {
        if !self.record.read(&mut self.reader)? {
            return Ok(None);
        }
        self.row += 1;
        let row = self.row;
        let raw_ts = self.record.cell(self.time_index);
        let ts = self
            .timestamps
            .parse(raw_ts)
            .ok_or_else(|| ReplayError::BadTimestamp {
                row,
                value: String::from_utf8_lossy(raw_ts).into_owned(),
            })?;
        let bad = self
            .parse_values(values)
            .map(|(entry, reading, column)| BadCell {
                entry,
                error: ReplayError::BadValue {
                    row,
                    column: self.column_names[reading].clone(),
                    value: String::from_utf8_lossy(self.record.cell(column)).into_owned(),
                },
            });
        Ok(Some(RowHead { row, ts, bad }))
    }

    /// Parses the row's reading cells into `values`, stopping at the first
    /// cell that is not a number; returns that cell as (entry of `columns`,
    /// reading, CSV column).
    fn parse_values(&self, values: &mut [Option<f64>]) -> Option<(usize, usize, usize)> {
        for (i, &(reading, column)) in self.columns.iter().enumerate() {
            values[i] = match self.record.number(column) {
                // A missing value is a reading that did not report this second.
                None => None,
                // The worker's payload parser refuses non-finite values too.
                Some(Some(v)) => Some(v).filter(|v| v.is_finite()),
                Some(None) => return Some((i, reading, column)),
            };
        }
        None
    }
}
