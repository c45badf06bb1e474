//! The scoring stage of a replay: rows as read (time and values) through the
//! aligner and the detector, one record per completed frame.

use chrono::{DateTime, Utc};

use super::{ReplayError, ReplayRecord, rows::RowHead};
use crate::{
    align::{Admission, Aligner, Frame, Observation},
    config::MonitorConfig,
    detector::{Detector, Outcome},
};

/// The aligner and detector of one monitor, and the fast path's state.
pub(super) struct Frames {
    /// The monitor's index of the reading in each value entry of a row.
    readings: Vec<usize>,
    /// Per reading, its position in a frame (required readings only).
    positions: Vec<Option<usize>>,
    pub(super) aligner: Aligner,
    pub(super) detector: Detector,
    monitor: String,
    /// The newest row time seen; a row must be newer for the fast path.
    newest: Option<DateTime<Utc>>,
    /// The last fast-path row (time, values), not yet shown to the aligner.
    unsynced: Option<(DateTime<Utc>, Vec<Option<f64>>)>,
    frame: Frame,
    /// Off only in tests, to compare against the aligner on every row.
    pub(super) fast_path: bool,
}

impl Frames {
    /// The stage for `config`, fed rows whose value entries are of
    /// `readings` (monitor indices).
    pub(super) fn new(config: &MonitorConfig, readings: Vec<usize>) -> Result<Self, ReplayError> {
        let aligner =
            Aligner::new(config.alignment.clone(), &config.readings).map_err(|source| {
                ReplayError::Align {
                    monitor: config.name.clone(),
                    source,
                }
            })?;
        let names: Vec<String> = config.required_readings().map(|r| r.name.clone()).collect();
        let width = names.len();
        let detector =
            Detector::for_readings(config.detector.clone(), &names).map_err(|source| {
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
        Ok(Self {
            readings,
            positions,
            aligner,
            detector,
            monitor: config.name.clone(),
            newest: None,
            unsynced: None,
            frame: Frame {
                ts: DateTime::UNIX_EPOCH,
                values: vec![0.0; width],
            },
            fast_path: true,
        })
    }

    /// Feeds one row; returns the record of the frame it completed, or the
    /// row's bad cell after its values before that cell were offered.
    pub(super) fn feed(
        &mut self,
        head: RowHead,
        values: &[Option<f64>],
    ) -> Result<Option<ReplayRecord>, ReplayError> {
        let RowHead { row, ts, bad } = head;
        let fast = self.fast_path
            && bad.is_none()
            && self.newest.is_none_or(|n| ts > n)
            && values.iter().all(Option::is_some)
            && (self.unsynced.is_some() || self.aligner.held_values() == 0);
        self.newest = Some(self.newest.map_or(ts, |n| n.max(ts)));
        let completed = if fast {
            self.complete_fast_frame(ts, values);
            true
        } else {
            let admitted = bad.as_ref().map_or(values.len(), |b| b.entry);
            self.align_row(ts, &values[..admitted])
        };
        if let Some(bad) = bad {
            return Err(bad.error);
        }
        if !completed {
            return Ok(None);
        }
        Ok(Some(self.score_frame(row)?))
    }

    /// The fast path: the row's values are its own frame; the row is kept
    /// to show the aligner later (see `sync`).
    fn complete_fast_frame(&mut self, ts: DateTime<Utc>, values: &[Option<f64>]) {
        self.frame.ts = ts;
        for (&reading, value) in self.readings.iter().zip(values) {
            if let (Some(position), Some(value)) = (self.positions[reading], value) {
                self.frame.values[position] = *value;
            }
        }
        match &mut self.unsynced {
            Some((last_ts, last)) => {
                *last_ts = ts;
                last.clone_from_slice(values);
            }
            None => self.unsynced = Some((ts, values.to_vec())),
        }
    }

    /// Offers `values` (the row's values before its bad cell, if any) to the
    /// aligner; true when one of them completed a frame.
    fn align_row(&mut self, ts: DateTime<Utc>, values: &[Option<f64>]) -> bool {
        self.sync();
        let mut completed = false;
        for (i, value) in values.iter().enumerate() {
            if let Some(frame) = self.admit(i, ts, *value) {
                self.frame = frame;
                completed = true;
            }
        }
        completed
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

    /// Offers value entry `i` of a row at `ts` to the aligner.
    fn admit(&mut self, i: usize, ts: DateTime<Utc>, value: Option<f64>) -> Option<Frame> {
        let value = value?;
        let observation = Observation {
            reading: self.readings[i],
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
    pub(super) fn sync(&mut self) {
        if let Some((ts, values)) = self.unsynced.take() {
            for (i, value) in values.into_iter().enumerate() {
                self.admit(i, ts, value);
            }
        }
    }
}
