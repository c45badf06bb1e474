//! A replay whose CSV reading runs on a thread of its own.
//!
//! Reading (CSV fields, timestamps, numbers) is about as much work as
//! scoring and writing the records, and the two need nothing of each other
//! but the rows: a reader thread parses batches of rows ahead while the
//! caller's thread scores them, so a second core halves the wall time of a
//! long backtest. The batches go through a channel of two and come back to
//! be reused, so memory stays bounded whatever the file's length; the rows,
//! and so the records and errors, are exactly those of [`super::Replay`].

use std::{
    io::Read,
    sync::mpsc::{Receiver, SyncSender, TryRecvError, sync_channel},
    thread::JoinHandle,
};

use super::{
    ReplayError, ReplayOptions, ReplayRecord,
    frames::{Frames, graph_config},
    rows::{RowHead, Rows},
};
use crate::{
    config::MonitorConfig, detector::Detector, graph::CompiledGraph, runtime::MonitorCore,
};

/// Rows per batch: large enough that the hand-over costs nothing per row,
/// small enough that a batch stays in the cache.
const BATCH_ROWS: usize = 1024;
/// Batches parsed ahead of the scoring thread.
const BATCHES_AHEAD: usize = 2;

/// Rows as read, each with its `width` values in `values`.
struct Batch {
    heads: Vec<Option<Result<RowHead, ReplayError>>>,
    values: Vec<Option<f64>>,
}

/// A replay in progress whose rows are read on a thread of its own: an
/// iterator of records, one per frame, the same as [`super::Replay`]'s.
pub struct BackgroundReplay {
    frames: Frames,
    width: usize,
    full: Receiver<Batch>,
    empty: SyncSender<Batch>,
    batch: Batch,
    next: usize,
    pub(super) reader: Option<JoinHandle<()>>,
}

/// Starts replaying `reader` (CSV with a header row) through `config`,
/// reading it on a new thread; the header is read before this returns.
pub fn replay_in_background<R: Read + Send + 'static>(
    config: &MonitorConfig,
    reader: R,
    options: &ReplayOptions,
) -> Result<BackgroundReplay, ReplayError> {
    start(config, None, reader, options)
}

/// [`replay_in_background`] through a run of `graph`: its readings and
/// alignment, its nodes scoring each frame.
pub fn replay_graph_in_background<R: Read + Send + 'static>(
    graph: &CompiledGraph,
    reader: R,
    options: &ReplayOptions,
) -> Result<BackgroundReplay, ReplayError> {
    start(&graph_config(graph), Some(graph.clone()), reader, options)
}

fn start<R: Read + Send + 'static>(
    config: &MonitorConfig,
    graph: Option<CompiledGraph>,
    reader: R,
    options: &ReplayOptions,
) -> Result<BackgroundReplay, ReplayError> {
    let rows = Rows::open(config, reader, options)?;
    let readings = rows.readings();
    let width = readings.len();
    let frames = Frames::new(config, graph, readings)?;
    let (full_tx, full) = sync_channel(BATCHES_AHEAD);
    let (empty, empty_rx) = sync_channel(BATCHES_AHEAD + 2);
    let reader = std::thread::Builder::new()
        .name("radar-replay-reader".to_string())
        .spawn(move || read_batches(rows, width, &full_tx, &empty_rx))
        .map_err(ReplayError::ReaderThread)?;
    Ok(BackgroundReplay {
        frames,
        width,
        full,
        empty,
        batch: Batch::new(),
        next: 0,
        reader: Some(reader),
    })
}

impl Batch {
    fn new() -> Self {
        Self {
            heads: Vec::new(),
            values: Vec::new(),
        }
    }
}

/// The reader thread: fills batches until the file ends or the replay is
/// dropped (its channel then refuses the next batch).
fn read_batches<R: Read>(
    mut rows: Rows<R>,
    width: usize,
    full: &SyncSender<Batch>,
    empty: &Receiver<Batch>,
) {
    let mut ended = false;
    while !ended {
        let mut batch = match empty.try_recv() {
            Ok(batch) => batch,
            Err(TryRecvError::Empty | TryRecvError::Disconnected) => Batch::new(),
        };
        batch.heads.clear();
        batch.values.clear();
        while batch.heads.len() < BATCH_ROWS {
            let start = batch.values.len();
            batch.values.resize(start + width, None);
            match rows.next_row(&mut batch.values[start..]) {
                Ok(Some(head)) => batch.heads.push(Some(Ok(head))),
                Ok(None) => {
                    batch.values.truncate(start);
                    ended = true;
                    break;
                }
                Err(e) => batch.heads.push(Some(Err(e))),
            }
        }
        if !batch.heads.is_empty() && full.send(batch).is_err() {
            return;
        }
    }
}

impl BackgroundReplay {
    /// The runtime core as it stands after the records read so far.
    pub fn core(&self) -> &MonitorCore {
        &self.frames.core
    }

    /// The detector as it stands after the records read so far.
    pub fn detector(&self) -> Option<&Detector> {
        self.frames.core.detector()
    }

    /// The next row as read, with its values; `None` once the file is read.
    fn next_head(&mut self) -> Option<Result<RowHead, ReplayError>> {
        if self.next == self.batch.heads.len() {
            let batch = self.receive()?;
            let used = std::mem::replace(&mut self.batch, batch);
            // The reader makes a new batch when none comes back.
            let _ = self.empty.try_send(used);
            self.next = 0;
        }
        self.next += 1;
        self.batch.heads[self.next - 1].take()
    }

    /// The next batch; `None` once the reader thread has ended, after
    /// passing on its panic, if it had one.
    fn receive(&mut self) -> Option<Batch> {
        match self.full.recv() {
            Ok(batch) => Some(batch),
            Err(_) => {
                if let Some(Err(panic)) = self.reader.take().map(JoinHandle::join) {
                    std::panic::resume_unwind(panic);
                }
                None
            }
        }
    }
}

impl Iterator for BackgroundReplay {
    type Item = Result<ReplayRecord, ReplayError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(pending) = self.frames.pending.pop_front() {
                return Some(pending);
            }
            let head = match self.next_head()? {
                Ok(head) => head,
                Err(e) => return Some(Err(e)),
            };
            let at = (self.next - 1) * self.width;
            let values = &self.batch.values[at..at + self.width];
            match self.frames.feed(head, values) {
                Ok(None) => continue,
                Ok(Some(record)) => return Some(Ok(record)),
                Err(e) => return Some(Err(e)),
            }
        }
    }
}
