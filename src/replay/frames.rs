//! The scoring stage of a replay: rows as read (time and values) through
//! the worker's own runtime core, [`MonitorCore`], one record per frame.
//!
//! Each value is an observation the core ingests as the model thread
//! ingests one from MQTT, and the fit runs through the same "checkpoint,
//! then fit" step (with no snapshot to keep), so the records are the
//! worker's arithmetic by construction. A complete row goes through
//! [`MonitorCore::ingest_row`], which gives what ingesting its values one by
//! one would, or declines and leaves them to `ingest`.

use std::collections::VecDeque;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::{ReplayError, ReplayRecord, rows::RowHead};
use crate::{
    align::{Observation, Row},
    config::MonitorConfig,
    detector::Detector,
    graph::{CompiledGraph, GraphBinding},
    runtime::{CoreError, MonitorCore, Step, no_snapshot},
};

/// One monitor's runtime core, fed rows.
pub(super) struct Frames {
    /// The monitor's index of the reading in each value entry of a row.
    readings: Vec<usize>,
    pub(super) core: MonitorCore,
    monitor: String,
    /// The row's values when every one is present, for `ingest_row`.
    complete: Vec<f64>,
    /// Records (or a row's bad cell) beyond the first of a row: a row whose
    /// values complete two frames has two records.
    pub(super) pending: VecDeque<Result<ReplayRecord, ReplayError>>,
    /// Off only in tests, to compare against ingesting every value alone.
    pub(super) row_at_once: bool,
    /// The step of the last row taken whole, filled in place by the next.
    step: Step,
    /// A graph's alarm threshold: what its verdicts' scores compare with.
    graph_threshold: Option<f64>,
}

impl Frames {
    /// The stage for `config`, fed rows whose value entries are of
    /// `readings` (monitor indices); with `graph`, a run of that graph
    /// (`config` is then the graph's [`graph_config`]).
    pub(super) fn new(
        config: &MonitorConfig,
        graph: Option<CompiledGraph>,
        readings: Vec<usize>,
    ) -> Result<Self, ReplayError> {
        // No worker owns a replay; its coverage history starts at the epoch
        // and is never reported.
        let (id, start) = (Uuid::nil(), DateTime::UNIX_EPOCH);
        let graph_threshold = graph.as_ref().and_then(CompiledGraph::alarm_threshold);
        let core = match graph {
            Some(graph) => MonitorCore::fresh_graph(id, config.clone(), graph, start),
            None => MonitorCore::fresh(id, config.clone(), start),
        }
        .map_err(|e| core_error(&config.name, e))?;
        Ok(Self {
            graph_threshold,
            complete: Vec::with_capacity(readings.len()),
            readings,
            core,
            monitor: config.name.clone(),
            pending: VecDeque::new(),
            row_at_once: true,
            step: Step::default(),
        })
    }

    /// Feeds one row; returns the record of the frame it completed, if any.
    /// Further records of the row, and its bad cell's error (after the
    /// values before that cell were ingested), wait in `pending`, which the
    /// caller empties before feeding the next row.
    pub(super) fn feed(
        &mut self,
        head: RowHead,
        values: &[Option<f64>],
    ) -> Result<Option<ReplayRecord>, ReplayError> {
        let RowHead { row, ts, bad } = head;
        if bad.is_none() && self.ingest_row(ts, values) {
            let mut scoring = Scoring {
                core: &mut self.core,
                monitor: &self.monitor,
                graph_threshold: self.graph_threshold,
            };
            return scoring.record(row, &self.step);
        }
        let admitted = bad.as_ref().map_or(values.len(), |b| b.entry);
        for (i, value) in values[..admitted].iter().enumerate() {
            let Some(value) = *value else { continue };
            let observation = Observation {
                reading: self.readings[i],
                ts,
                value,
                received_at: ts,
            };
            let step = self.core.ingest(Ok(observation), ts);
            if let Some(result) = self.scoring().record(row, &step).transpose() {
                self.pending.push_back(result);
            }
        }
        if let Some(bad) = bad {
            self.pending.push_back(Err(bad.error));
        }
        self.pending.pop_front().transpose()
    }

    /// The row through [`MonitorCore::ingest_row`] into `self.step` when
    /// every value is present; `false` when it is not or the core declines.
    fn ingest_row(&mut self, ts: DateTime<Utc>, values: &[Option<f64>]) -> bool {
        if !self.row_at_once {
            return false;
        }
        self.complete.clear();
        for value in values {
            let Some(value) = *value else {
                return false;
            };
            self.complete.push(value);
        }
        let row = Row {
            readings: &self.readings,
            values: &self.complete,
            ts,
            received_at: ts,
        };
        self.core.ingest_row(row, ts, &mut self.step)
    }

    /// What making a record takes, borrowed apart from the step.
    fn scoring(&mut self) -> Scoring<'_> {
        Scoring {
            core: &mut self.core,
            monitor: &self.monitor,
            graph_threshold: self.graph_threshold,
        }
    }
}

/// The core and what a record names, borrowed apart from [`Frames`]'
/// step, which a row taken whole fills in place.
struct Scoring<'a> {
    core: &'a mut MonitorCore,
    monitor: &'a str,
    graph_threshold: Option<f64>,
}

impl Scoring<'_> {
    /// Fits when `step` made the fit due, then gives the record of the
    /// frame `step` scored, if it completed one.
    fn record(&mut self, row: u64, step: &Step) -> Result<Option<ReplayRecord>, ReplayError> {
        self.core
            .fit_when_due(step, no_snapshot)
            .map_err(|e| core_error(self.monitor, e))?;
        if let Some(failure) = &step.quarantined {
            return Err(ReplayError::Graph {
                monitor: self.monitor.to_string(),
                reason: format!(
                    "node {:?} ({}) failed on the frame at {}: {}; the run is quarantined and scores no more frames",
                    failure.failed_node, failure.node_type, failure.frame_ts, failure.reason
                ),
            });
        }
        // Rows hold finite numbers only, and frames have the monitor's
        // width, so the detector rejects none: every frame is in `step`.
        let Some(frame) = step.frame.as_ref() else {
            return Ok(None);
        };
        let ts = frame.ts;
        Ok(Some(if self.core.is_graph() {
            self.graph_record_of(row, ts, step)
        } else {
            self.record_of(row, ts, step)
        }))
    }

    /// The record of a graph's frame: its alarm node's verdict (once its
    /// detectors are fitted), the evidence's p-value and per-detector
    /// contributions on flagged frames.
    fn graph_record_of(&self, row: u64, ts: DateTime<Utc>, step: &Step) -> ReplayRecord {
        let evidence = step.results.evidence.first();
        let verdict = step.verdict.as_ref();
        ReplayRecord {
            row,
            ts,
            phase: self.core.phase(),
            score: verdict.map(|v| v.score),
            threshold: verdict.and(self.graph_threshold),
            p_value: evidence.map(|e| e.p_value),
            flagged: verdict.is_some_and(|v| v.flagged),
            alarm_open: self.core.open_alarm_opened_at().is_some(),
            alarm_event: verdict.and_then(|v| v.alarm_event.clone()),
            contributions: evidence.map(|e| e.contributions.values().copied().collect()),
        }
    }

    /// The record of the frame at `ts` that `step` offered, with the
    /// detector's state after it (and after the fit, if one ran).
    fn record_of(&self, row: u64, ts: DateTime<Utc>, step: &Step) -> ReplayRecord {
        let phase = self.core.phase();
        match &step.scored {
            Some(s) => ReplayRecord {
                row,
                ts,
                phase,
                score: Some(s.score),
                threshold: Some(s.threshold),
                p_value: Some(s.p_value),
                flagged: s.flagged,
                alarm_open: s.alarm_open,
                alarm_event: s.alarm_event.clone(),
                contributions: s.evidence.as_ref().map(|e| e.contributions.clone()),
            },
            None => ReplayRecord {
                row,
                ts,
                phase,
                score: None,
                threshold: self.core.detector().and_then(Detector::threshold),
                p_value: None,
                flagged: false,
                alarm_open: self.core.detector().is_some_and(Detector::alarm_open),
                alarm_event: None,
                contributions: None,
            },
        }
    }
}

/// A core error as the replay's: the monitor by its name (a replay's core
/// has no service id worth naming).
fn core_error(monitor: &str, error: CoreError) -> ReplayError {
    let monitor = monitor.to_string();
    match error {
        CoreError::Align { source, .. } => ReplayError::Align { monitor, source },
        CoreError::Detector { source, .. } => ReplayError::Detector { monitor, source },
        CoreError::Graph { reason, .. } => ReplayError::Graph { monitor, reason },
    }
}

/// The monitor a replay of `graph` runs: the graph's readings (all
/// required) and alignment, bound to the graph's semantics as a run is.
pub(super) fn graph_config(graph: &CompiledGraph) -> MonitorConfig {
    let name = graph.definition().name.clone();
    let binding = GraphBinding {
        graph_id: Uuid::nil(),
        graph: name.clone(),
        revision: 0,
        run_id: Uuid::nil(),
        semantics_hash: graph.semantics_hash().to_string(),
    };
    graph.monitor_config(name, binding)
}
