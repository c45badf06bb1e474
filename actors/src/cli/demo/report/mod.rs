//! What the demo knows about each monitor: the views the worker publishes
//! and the alarms it announced (with their top contributing readings).
//!
//! - this file: the tracking of one monitor and its live figures.
//! - `summary`: the final summary built from them and the publisher's
//!   report.

mod summary;

use std::collections::VecDeque;

use chrono::{DateTime, Utc};
use radar::{
    detector::Phase,
    telemetry::{Board, MonitorState},
};
use radar_demo::{FaultKind, READINGS};
use serde::Serialize;
use uuid::Uuid;

pub use self::summary::{MonitorSummary, Start, Summary};
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
