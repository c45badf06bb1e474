//! The final summary of the demo: per monitor, how it started, its coverage
//! gaps, its alarms checked against the plant's fault windows, and its
//! checkpoints; for the run, the storage, speed and outcome.

use chrono::{DateTime, Utc};
use radar::{
    coverage::{CoverageHistory, GapCause},
    detector::Phase,
    telemetry::{Board, MonitorState, MonitorView},
};
use radar_demo::{FaultKind, PublishReport, READINGS, WindowTimes};
use serde::Serialize;
use uuid::Uuid;

use super::{AlarmSeen, Tracked};

/// One gap of a monitor's coverage history.
#[derive(Debug, Clone, Serialize)]
pub struct GapSummary {
    pub cause: GapCause,
    pub from: DateTime<Utc>,
    pub to: Option<DateTime<Utc>>,
    pub seconds: Option<f64>,
}

/// One fault window that began during the run.
#[derive(Debug, Clone, Serialize)]
pub struct FaultSummary {
    pub kind: FaultKind,
    pub reading: &'static str,
    pub started_at: DateTime<Utc>,
    pub ended_at: Option<DateTime<Utc>>,
    /// An alarm opened while it was active.
    pub detected: bool,
}

/// How a monitor started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Start {
    Fresh,
    Restored,
    /// It did not start (see `error`).
    NotStarted,
}

/// The final figures of one monitor.
#[derive(Debug, Clone, Serialize)]
pub struct MonitorSummary {
    pub name: String,
    pub id: Uuid,
    pub fault: Option<FaultKind>,
    pub start: Start,
    /// Frames processed before this run, from the restored snapshot.
    pub restored_processed: Option<u64>,
    /// Snapshot save time -> first new frame: input in between was not seen.
    pub possible_gap_seconds: Option<f64>,
    pub gaps: Vec<GapSummary>,
    pub phase: Option<Phase>,
    /// Frames processed in this run.
    pub frames: u64,
    pub processed_total: u64,
    pub alarms: usize,
    pub alarm_list: Vec<AlarmSeen>,
    pub faults: Vec<FaultSummary>,
    /// Every fault window of the run raised an alarm; `None` without faults.
    pub faults_detected: Option<bool>,
    /// Alarms that opened outside every fault window.
    pub alarms_outside_faults: usize,
    pub checkpoints: u64,
    pub checkpoint_failures: u64,
    pub last_checkpoint_at: Option<DateTime<Utc>>,
    /// The snapshot after ingestion stopped committed (PostgreSQL only).
    pub final_checkpoint: Option<bool>,
    pub state: Option<MonitorState>,
    pub error: Option<String>,
}

/// Everything the demo reports at the end.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// `postgres` or `disabled`.
    pub database_mode: &'static str,
    pub database: Option<String>,
    pub database_disabled_reason: Option<String>,
    pub seed: u64,
    pub speed: f64,
    pub wall_seconds: f64,
    /// Plant ticks published (one simulated second each).
    pub simulated_seconds: u64,
    pub monitors: Vec<MonitorSummary>,
    /// `stopped`, or why the worker did not stop cleanly.
    pub outcome: String,
}

fn gaps_of(coverage: &CoverageHistory) -> Vec<GapSummary> {
    coverage
        .gaps
        .iter()
        .map(|gap| GapSummary {
            cause: gap.cause,
            from: gap.from,
            to: gap.to,
            seconds: gap
                .to
                .map(|to| (to - gap.from).num_milliseconds() as f64 / 1e3),
        })
        .collect()
}

/// The possible gap of the last restore: from the snapshot's save time to
/// the first new frame.
fn restore_gap(coverage: &CoverageHistory) -> Option<f64> {
    let mark = coverage.last_restore()?;
    let gap = coverage
        .gaps
        .iter()
        .rev()
        .find(|g| g.cause == GapCause::RestartRollback && g.from == mark.saved_at)?;
    gap.to
        .map(|to| (to - gap.from).num_milliseconds() as f64 / 1e3)
}

/// Whether fault window `w` was active at `at`; a window still open when
/// publishing stopped lasts until `end`.
fn window_active(w: &WindowTimes, at: DateTime<Utc>, end: DateTime<Utc>) -> bool {
    w.started_at <= at && at < w.ended_at.unwrap_or(end) + chrono::TimeDelta::milliseconds(1)
}

/// The figures read from a started monitor's watch.
struct WatchedFigures {
    start: Start,
    restored_processed: Option<u64>,
    possible_gap: Option<f64>,
    gaps: Vec<GapSummary>,
    processed: u64,
    /// (commits, failures).
    checkpoints: (u64, u64),
    last_commit: Option<DateTime<Utc>>,
}

/// The error a monitor's view shows, unless it is connected or stopped.
fn view_error(view: Option<MonitorView>) -> Option<String> {
    view.filter(|v| !matches!(v.state, MonitorState::Connected | MonitorState::Stopped))
        .map(|v| v.detail)
        .filter(|d| !d.is_empty())
}

impl Tracked {
    /// Marks alarms inside fault windows and builds the final figures.
    pub fn summarize(
        &mut self,
        board: &Board,
        published: Option<&PublishReport>,
        stop_requested_at: DateTime<Utc>,
    ) -> MonitorSummary {
        let now = Utc::now();
        let end = published.and_then(|p| p.last_ts).unwrap_or(now);
        let windows = self.fault_windows(published);
        self.mark_alarms_in_fault_windows(&windows, end);
        let faults = self.fault_summaries(&windows, end);
        let view = board.view(self.id, now);
        let row = self.row(board, now);
        let watched = self.watched_figures();
        let state = view.as_ref().map(|v| v.state);
        let error = view_error(view);
        MonitorSummary {
            name: self.name.clone(),
            id: self.id,
            fault: self.fault,
            start: watched.start,
            restored_processed: watched.restored_processed,
            possible_gap_seconds: watched.possible_gap,
            gaps: watched.gaps,
            phase: row.phase,
            frames: row.frames,
            processed_total: watched.processed,
            alarms: self.alarms.len(),
            alarms_outside_faults: self.alarms.iter().filter(|a| !a.in_fault_window).count(),
            alarm_list: self.alarms.clone(),
            faults_detected: (!faults.is_empty()).then(|| faults.iter().all(|f| f.detected)),
            faults,
            checkpoints: watched.checkpoints.0,
            checkpoint_failures: watched.checkpoints.1,
            last_checkpoint_at: watched.last_commit,
            final_checkpoint: row.writes.then(|| {
                watched
                    .last_commit
                    .is_some_and(|at| at >= stop_requested_at)
            }),
            state,
            error,
        }
    }

    /// The published fault windows of this monitor's machine.
    fn fault_windows(&self, published: Option<&PublishReport>) -> Vec<WindowTimes> {
        published
            .map(|p| {
                p.windows
                    .iter()
                    .filter(|w| w.window.machine == self.machine)
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }

    fn mark_alarms_in_fault_windows(&mut self, windows: &[WindowTimes], end: DateTime<Utc>) {
        for alarm in &mut self.alarms {
            alarm.in_fault_window = windows
                .iter()
                .any(|w| window_active(w, alarm.opened_at, end));
        }
    }

    /// Each fault window, detected when an alarm opened while it was active.
    fn fault_summaries(&self, windows: &[WindowTimes], end: DateTime<Utc>) -> Vec<FaultSummary> {
        windows
            .iter()
            .map(|w| FaultSummary {
                kind: w.window.kind,
                reading: READINGS[w.window.reading].name,
                started_at: w.started_at,
                ended_at: w.ended_at,
                detected: self
                    .alarms
                    .iter()
                    .any(|a| window_active(w, a.opened_at, end)),
            })
            .collect()
    }

    /// How the monitor started and what its watch shows; `NotStarted` and
    /// zeros without a watch.
    fn watched_figures(&self) -> WatchedFigures {
        match &self.watch {
            Some(watch) => {
                let model = watch.model.borrow();
                let checkpoint = watch.checkpoint.borrow();
                let restored = model.recovery.restored_processed_count;
                WatchedFigures {
                    start: if restored.is_some() {
                        Start::Restored
                    } else {
                        Start::Fresh
                    },
                    restored_processed: restored,
                    possible_gap: restore_gap(&model.coverage),
                    gaps: gaps_of(&model.coverage),
                    processed: model.processed,
                    checkpoints: (checkpoint.commits, checkpoint.failures),
                    last_commit: checkpoint.last_commit_at,
                }
            }
            None => WatchedFigures {
                start: Start::NotStarted,
                restored_processed: None,
                possible_gap: None,
                gaps: Vec::new(),
                processed: 0,
                checkpoints: (0, 0),
                last_commit: None,
            },
        }
    }
}
