//! The alarm rule: turns the stream of flagged frames into incidents.

use std::collections::VecDeque;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::AlarmRule;

/// An incident opening or closing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum AlarmEvent {
    Opened {
        /// Per-detector alarm sequence number, from 1.
        seq: u64,
        ts: DateTime<Utc>,
        /// Highest score among the frames in the opening window.
        peak_score: f64,
    },
    Closed {
        seq: u64,
        ts: DateTime<Utc>,
        /// Highest score while the alarm was open.
        peak_score: f64,
    },
}

/// The rule's memory: the last `open_n` flags and the open alarm, if any.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AlarmState {
    rule: AlarmRule,
    recent: VecDeque<(bool, f64)>,
    open: Option<OpenAlarm>,
    last_seq: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct OpenAlarm {
    seq: u64,
    peak_score: f64,
    normal_run: usize,
}

impl AlarmState {
    pub fn new(rule: AlarmRule) -> Self {
        Self {
            recent: VecDeque::with_capacity(rule.open_n),
            rule,
            open: None,
            last_seq: 0,
        }
    }

    pub fn is_open(&self) -> bool {
        self.open.is_some()
    }

    /// The open alarm's sequence number.
    pub fn open_seq(&self) -> Option<u64> {
        self.open.as_ref().map(|a| a.seq)
    }

    /// Numbers the next alarm after `seq` at least. A detector restored
    /// from a snapshot does not know alarms opened after it was saved (and
    /// committed by a background batch); their numbers must not be reused.
    pub fn continue_after(&mut self, seq: u64) {
        self.last_seq = self.last_seq.max(seq);
    }

    /// Feeds one scored frame; returns the event it causes, if any.
    pub fn observe(&mut self, ts: DateTime<Utc>, flagged: bool, score: f64) -> Option<AlarmEvent> {
        if self.recent.len() == self.rule.open_n.max(1) {
            self.recent.pop_front();
        }
        self.recent.push_back((flagged, score));
        match &mut self.open {
            Some(alarm) => {
                alarm.peak_score = alarm.peak_score.max(score);
                alarm.normal_run = if flagged { 0 } else { alarm.normal_run + 1 };
                if alarm.normal_run >= self.rule.close_m {
                    let event = AlarmEvent::Closed {
                        seq: alarm.seq,
                        ts,
                        peak_score: alarm.peak_score,
                    };
                    self.open = None;
                    // A fresh window: the flags that opened this alarm must not reopen it.
                    self.recent.clear();
                    return Some(event);
                }
                None
            }
            None => {
                let flagged_count = self.recent.iter().filter(|(f, _)| *f).count();
                if flagged_count < self.rule.open_k {
                    return None;
                }
                let peak_score = self
                    .recent
                    .iter()
                    .map(|(_, s)| *s)
                    .fold(f64::NEG_INFINITY, f64::max);
                self.last_seq += 1;
                self.open = Some(OpenAlarm {
                    seq: self.last_seq,
                    peak_score,
                    normal_run: 0,
                });
                Some(AlarmEvent::Opened {
                    seq: self.last_seq,
                    ts,
                    peak_score,
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed(state: &mut AlarmState, flags: &str) -> Vec<(usize, AlarmEvent)> {
        flags
            .chars()
            .enumerate()
            .filter_map(|(i, c)| {
                let ts = DateTime::from_timestamp(i as i64, 0).unwrap_or_default();
                state.observe(ts, c == 'x', i as f64).map(|e| (i, e))
            })
            .collect()
    }

    fn rule(open_k: usize, open_n: usize, close_m: usize) -> AlarmRule {
        AlarmRule {
            open_k,
            open_n,
            close_m,
        }
    }

    #[test]
    fn alarm_opens_on_the_frame_that_makes_k_of_the_last_n_flagged() {
        let mut state = AlarmState::new(rule(3, 5, 2));
        let events = feed(&mut state, "x.x.x");
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].0, 4);
        assert!(matches!(
            events[0].1,
            AlarmEvent::Opened { seq: 1, peak_score, .. } if peak_score == 4.0
        ));
    }

    #[test]
    fn flags_spread_wider_than_the_window_never_open_an_alarm() {
        let mut state = AlarmState::new(rule(3, 5, 2));
        assert!(feed(&mut state, "x...x...x...x..").is_empty());
        assert!(!state.is_open());
    }

    #[test]
    fn alarm_closes_after_m_consecutive_normal_frames_and_a_flag_resets_the_count() {
        let mut state = AlarmState::new(rule(2, 2, 3));
        let events = feed(&mut state, "xx..x...");
        assert_eq!(events.len(), 2);
        assert_eq!(events[0].0, 1);
        assert_eq!(events[1].0, 7);
        assert!(matches!(
            events[1].1,
            AlarmEvent::Closed { seq: 1, peak_score, .. } if peak_score == 7.0
        ));
    }

    #[test]
    fn after_continuing_past_stored_alarms_numbers_are_not_reused() {
        let mut state = AlarmState::new(rule(1, 1, 1));
        feed(&mut state, "x.");
        state.continue_after(3);
        state.continue_after(2);
        let events = feed(&mut state, "x");
        assert!(matches!(events[0].1, AlarmEvent::Opened { seq: 4, .. }));
    }

    #[test]
    fn each_new_alarm_gets_the_next_sequence_number() {
        let mut state = AlarmState::new(rule(1, 1, 1));
        let events = feed(&mut state, "x.x.");
        let seqs: Vec<u64> = events
            .iter()
            .map(|(_, e)| match e {
                AlarmEvent::Opened { seq, .. } | AlarmEvent::Closed { seq, .. } => *seq,
            })
            .collect();
        assert_eq!(seqs, vec![1, 1, 2, 2]);
    }
}
