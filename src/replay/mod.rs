//! Offline replay: a CSV file through the worker's own runtime core
//! ([`MonitorCore`]: alignment, detector, fit, counters), one record per
//! frame. The operator's backtest tool: what it prints is what a worker
//! would have scored, by construction.
//!
//! Each data row becomes one observation per reading column, stamped with
//! the row's time on every clock (source, receipt and processing), so the
//! alignment policy sees a perfectly punctual stream; rows that repeat a
//! timestamp are then rejected as stale exactly as a replayed MQTT message
//! would be. Columns that are not readings (labels, comments) are ignored.
//!
//! Speed: a row that carries every reading column, finite, goes to the core
//! whole ([`MonitorCore::ingest_row`]): when it is newer than every
//! watermark and nothing is held, the core forms the row's own frame
//! without a partial frame or a watermark lookup by name, with the frame,
//! verdict, counters and watermarks that ingesting its values one by one
//! gives (the core's equivalence test); otherwise the values are ingested
//! one by one.
//!
//! Layout: `rows` reads the CSV (header, timestamps, numbers; `cells` the
//! cells of one row), `frames` feeds rows to the core and makes the
//! records, `record` writes a record as JSON; [`Replay`] runs both stages
//! on the caller's thread, [`BackgroundReplay`] reads on a thread of its
//! own (`radar detect`).

mod background;
mod cells;
mod frames;
mod record;
mod rows;
#[cfg(test)]
mod tests;

use std::io::Read;

use crate::{
    align::AlignError,
    config::MonitorConfig,
    detector::{Detector, DetectorError},
    graph::CompiledGraph,
    runtime::MonitorCore,
};

pub use background::{BackgroundReplay, replay_graph_in_background, replay_in_background};
pub use cells::parse_timestamp;
use frames::{Frames, graph_config};
pub use record::{JsonNumbers, ReplayRecord};
use rows::Rows;

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
    #[error("monitor {monitor:?} cannot run its graph: {reason}")]
    Graph { monitor: String, reason: String },
    #[error("cannot start the thread that reads the CSV file: {0}")]
    ReaderThread(#[source] std::io::Error),
}

/// A replay in progress: an iterator of records, one per frame.
pub struct Replay<R: Read> {
    rows: Rows<R>,
    frames: Frames,
    /// This row's value per reading entry of `rows` (`None`: empty or not
    /// finite).
    values: Vec<Option<f64>>,
}

/// Starts replaying `reader` (CSV with a header row) through `config`.
pub fn replay<R: Read>(
    config: &MonitorConfig,
    reader: R,
    options: &ReplayOptions,
) -> Result<Replay<R>, ReplayError> {
    start(config, None, reader, options)
}

/// Starts replaying `reader` (CSV with a header row) through a run of
/// `graph`: its readings and alignment, its nodes scoring each frame.
pub fn replay_graph<R: Read>(
    graph: &CompiledGraph,
    reader: R,
    options: &ReplayOptions,
) -> Result<Replay<R>, ReplayError> {
    start(&graph_config(graph), Some(graph.clone()), reader, options)
}

fn start<R: Read>(
    config: &MonitorConfig,
    graph: Option<CompiledGraph>,
    reader: R,
    options: &ReplayOptions,
) -> Result<Replay<R>, ReplayError> {
    let rows = Rows::open(config, reader, options)?;
    let readings = rows.readings();
    Ok(Replay {
        values: vec![None; readings.len()],
        frames: Frames::new(config, graph, readings)?,
        rows,
    })
}

impl<R: Read> Replay<R> {
    /// The runtime core as it stands after the records read so far.
    pub fn core(&self) -> &MonitorCore {
        &self.frames.core
    }

    /// The detector as it stands after the records read so far.
    pub fn detector(&self) -> Option<&Detector> {
        self.frames.core.detector()
    }
}

impl<R: Read> Iterator for Replay<R> {
    type Item = Result<ReplayRecord, ReplayError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(pending) = self.frames.pending.pop_front() {
                return Some(pending);
            }
            let head = match self.rows.next_row(&mut self.values) {
                Ok(None) => return None,
                Ok(Some(head)) => head,
                Err(e) => return Some(Err(e)),
            };
            match self.frames.feed(head, &self.values) {
                Ok(None) => continue,
                Ok(Some(record)) => return Some(Ok(record)),
                Err(e) => return Some(Err(e)),
            }
        }
    }
}
