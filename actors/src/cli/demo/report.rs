//! What the demo knows about each monitor: the views the worker publishes,
//! the alarms it announced (with their top contributing readings), and the
//! final summary built from them and the publisher's report.

use std::collections::VecDeque;

use chrono::{DateTime, Utc};
use radar::{
    coverage::{CoverageHistory, GapCause},
    demo::{FaultKind, PublishReport, READINGS, WindowTimes},
    detector::Phase,
    telemetry::{Board, MonitorState, MonitorView},
};
use serde::Serialize;
use uuid::Uuid;

use crate::{
    monitor::Ownership,
    worker::{MonitorWatch, Notice},
};

/// Readings named for an alarm.
const TOP_READINGS: usize = 3;
/// A reading is named only with at least this share (the first always is).
const MIN_SHARE: f64 = 0.05;

/// One alarm as announced by the worker.
#[derive(Debug, Clone, Serialize)]
pub struct AlarmSeen {
    pub seq: u64,
    pub opened_at: DateTime<Utc>,
    pub closed_at: Option<DateTime<Utc>>,
    pub peak_score: f64,
    /// Mean share of each named reading in the flagged frames that opened it.
    pub top_readings: Vec<ReadingShare>,
    /// Whether it opened inside one of this monitor's fault windows.
    pub in_fault_window: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct ReadingShare {
    pub reading: String,
    pub share: f64,
}

impl AlarmSeen {
    /// `current 91%, pressure 5%`.
    pub fn readings_text(&self) -> String {
        self.top_readings
            .iter()
            .map(|r| format!("{} {:.0}%", r.reading, 100.0 * r.share))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// One demo monitor.
pub struct Tracked {
    pub id: Uuid,
    pub name: String,
    pub machine: usize,
    pub fault: Option<FaultKind>,
    /// Set once the monitor has started and published its views.
    pub watch: Option<MonitorWatch>,
    /// Processed count when this run's publishing began.
    pub baseline: u64,
    /// Contributions of the last flagged frames, newest last.
    recent_flags: VecDeque<Vec<f64>>,
    /// Frames the alarm rule looks back over.
    window: usize,
    pub alarms: Vec<AlarmSeen>,
}

impl Tracked {
    pub fn new(id: Uuid, name: String, machine: usize, window: usize) -> Self {
        Self {
            id,
            name,
            machine,
            fault: FaultKind::of_machine(machine),
            watch: None,
            baseline: 0,
            recent_flags: VecDeque::new(),
            window: window.max(1),
            alarms: Vec::new(),
        }
    }

    /// The fault as shown: `step (current)`, or `none`.
    pub fn fault_text(&self) -> String {
        match self.fault {
            Some(kind) => format!("{} ({})", kind.as_str(), READINGS[kind.reading()].name),
            None => "none".to_string(),
        }
    }

    fn readings(&self) -> Vec<String> {
        match &self.watch {
            Some(watch) => watch.readings.clone(),
            None => READINGS.iter().map(|r| r.name.to_string()).collect(),
        }
    }

    /// Takes a notice of this monitor; returns the alarm it opened, if any.
    pub fn take(&mut self, notice: &Notice) -> Option<&AlarmSeen> {
        match notice {
            Notice::Flagged { contributions, .. } => {
                self.recent_flags.push_back(contributions.clone());
                while self.recent_flags.len() > self.window {
                    self.recent_flags.pop_front();
                }
                None
            }
            Notice::AlarmOpened {
                seq,
                ts,
                peak_score,
                ..
            } => {
                let top = top_readings(&self.readings(), &self.recent_flags);
                self.alarms.push(AlarmSeen {
                    seq: *seq,
                    opened_at: *ts,
                    closed_at: None,
                    peak_score: *peak_score,
                    top_readings: top,
                    in_fault_window: false,
                });
                self.alarms.last()
            }
            Notice::AlarmClosed {
                seq,
                ts,
                peak_score,
                ..
            } => {
                if let Some(alarm) = self.alarms.iter_mut().find(|a| a.seq == *seq) {
                    alarm.closed_at = Some(*ts);
                    alarm.peak_score = *peak_score;
                }
                None
            }
        }
    }

    /// The live figures of this monitor.
    pub fn row(&self, board: &Board, now: DateTime<Utc>) -> Row {
        let state = board.view(self.id, now).map(|v| v.state);
        let (phase, buffered, processed, last_checkpoint, checkpoint_error, writes) =
            match &self.watch {
                Some(watch) => {
                    let model = watch.model.borrow();
                    let checkpoint = watch.checkpoint.borrow();
                    (
                        Some(model.phase),
                        model.buffered,
                        model.processed,
                        checkpoint.last_commit_at,
                        checkpoint.last_error.clone(),
                        checkpoint.ownership != Ownership::Disabled,
                    )
                }
                None => (None, (0, 0), 0, None, None, true),
            };
        Row {
            state,
            phase,
            buffered,
            frames: processed.saturating_sub(self.baseline),
            alarms: self.alarms.len(),
            alarm_open: self.alarms.last().is_some_and(|a| a.closed_at.is_none()),
            last_checkpoint,
            checkpoint_error,
            writes,
        }
    }
}

/// Mean positive contribution per reading over the frames given, largest first.
fn top_readings(readings: &[String], flags: &VecDeque<Vec<f64>>) -> Vec<ReadingShare> {
    let mut sums = vec![0.0; readings.len()];
    for frame in flags {
        // A reading's share of T-squared is negative when it pulls the
        // score down; only what pushed the score up contributed.
        for (sum, share) in sums.iter_mut().zip(frame) {
            if share.is_finite() && *share > 0.0 {
                *sum += share;
            }
        }
    }
    let total: f64 = sums.iter().sum();
    if total <= 0.0 {
        return Vec::new();
    }
    let mut shares: Vec<ReadingShare> = readings
        .iter()
        .zip(sums)
        .map(|(reading, sum)| ReadingShare {
            reading: reading.clone(),
            share: sum / total,
        })
        .collect();
    shares.sort_by(|a, b| b.share.total_cmp(&a.share));
    shares
        .into_iter()
        .enumerate()
        .filter(|(i, r)| *i == 0 || r.share >= MIN_SHARE)
        .take(TOP_READINGS)
        .map(|(_, r)| r)
        .collect()
}

/// A monitor's live figures.
#[derive(Debug, Clone)]
pub struct Row {
    pub state: Option<MonitorState>,
    pub phase: Option<Phase>,
    pub buffered: (usize, usize),
    /// Frames processed in this run.
    pub frames: u64,
    pub alarms: usize,
    pub alarm_open: bool,
    pub last_checkpoint: Option<DateTime<Utc>>,
    /// The last checkpoint write failed with this (cleared by a commit).
    pub checkpoint_error: Option<String>,
    /// False when database writes are disabled.
    pub writes: bool,
}

impl Row {
    /// `3.0s ago`, `never`, `failing: ...`, or `off` without database writes.
    pub fn checkpoint_text(&self, now: DateTime<Utc>) -> String {
        if !self.writes {
            return "off (no database)".to_string();
        }
        if let Some(error) = &self.checkpoint_error {
            let short: String = error.chars().take(60).collect();
            return format!("failing: {short}");
        }
        match self.last_checkpoint {
            Some(at) => format!(
                "{:.1}s ago",
                (now - at).num_milliseconds().max(0) as f64 / 1e3
            ),
            None => "never".to_string(),
        }
    }

    /// The phase, or the monitor's state while it is not running.
    pub fn phase_text(&self) -> String {
        match (self.state, self.phase) {
            (Some(state), _) if state != MonitorState::Connected => state.as_str().to_string(),
            (_, Some(phase)) => phase.as_str().to_string(),
            _ => "starting".to_string(),
        }
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(frames: &[[f64; 4]]) -> VecDeque<Vec<f64>> {
        frames.iter().map(|f| f.to_vec()).collect()
    }

    fn names() -> Vec<String> {
        ["pressure", "flow", "current", "temperature"]
            .map(String::from)
            .to_vec()
    }

    #[test]
    fn the_top_readings_are_the_largest_mean_shares_of_the_opening_frames() {
        let top = top_readings(
            &names(),
            &flags(&[[0.1, 0.0, 0.8, 0.1], [0.1, 0.02, 0.8, 0.08]]),
        );
        let named: Vec<&str> = top.iter().map(|r| r.reading.as_str()).collect();
        assert_eq!(named, ["current", "pressure", "temperature"]);
        assert!((top[0].share - 0.8).abs() < 1e-9);
    }

    #[test]
    fn small_shares_are_left_out_but_the_largest_is_always_named() {
        let top = top_readings(&names(), &flags(&[[0.01, 0.97, 0.01, 0.01]]));
        assert_eq!(top.len(), 1);
        assert_eq!(top[0].reading, "flow");
        assert!(top_readings(&names(), &VecDeque::new()).is_empty());
        // A reading that pulled the score down contributed nothing.
        let top = top_readings(&names(), &flags(&[[-3.0, 1.0, 1.0, 0.0]]));
        assert_eq!(top.len(), 2);
        assert!((top[0].share - 0.5).abs() < 1e-9);
    }

    #[test]
    fn an_opened_alarm_names_the_readings_of_the_flags_before_it_and_closes_by_seq() {
        let id = Uuid::from_u128(1);
        let mut tracked = Tracked::new(id, "demo-pump-2".into(), 1, 2);
        let ts = Utc::now();
        for c in [
            [1.0, 0.0, 0.0, 0.0],
            [0.0, 0.0, 1.0, 0.0],
            [0.0, 0.0, 1.0, 0.0],
        ] {
            tracked.take(&Notice::Flagged {
                monitor_id: id,
                ts,
                contributions: c.to_vec(),
            });
        }
        let opened = tracked
            .take(&Notice::AlarmOpened {
                monitor_id: id,
                seq: 1,
                ts,
                peak_score: 9.0,
            })
            .cloned()
            .unwrap();
        // Only the last two flags (the rule's window) count.
        assert_eq!(opened.readings_text(), "current 100%");
        tracked.take(&Notice::AlarmClosed {
            monitor_id: id,
            seq: 1,
            ts,
            peak_score: 12.0,
        });
        assert_eq!(tracked.alarms[0].closed_at, Some(ts));
        assert_eq!(tracked.alarms[0].peak_score, 12.0);
        assert_eq!(tracked.fault_text(), "step (current)");
    }
}
