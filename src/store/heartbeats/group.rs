//! Heartbeats are handed in as a group ([`Heartbeats::submit`]: the
//! worker's beat driver hands in every beat of a tick at once) and answered
//! together: one channel for the whole group instead of a oneshot and a
//! waiting task per monitor, and no copy of any reporter.

use std::sync::{Arc, Mutex, PoisonError};

use chrono::{DateTime, Utc};
use tokio::sync::{mpsc, oneshot};

use super::{Beat, Heartbeats, report_alone};
use crate::store::health::{HealthOutcome, HealthRecord, HealthReporter};

/// One monitor's heartbeat in a group.
pub struct GroupBeat {
    pub reporter: HealthReporter,
    pub record: Arc<HealthRecord>,
    /// When `record` was last known to be the monitor's state.
    pub taken_at: DateTime<Utc>,
    /// `record` is what this reporter's last written heartbeat carried
    /// (which [`HealthOutcome::Written`] answered), still the monitor's
    /// state at `taken_at`: the flush then only refreshes the row's
    /// heartbeat time, under the same token check, if the row is still as
    /// that write left it, and writes `record` in full (as taken at
    /// `taken_at`) if it is not. A record that differs from what was last
    /// written must not be handed in as unchanged: its new content would
    /// be lost.
    pub unchanged: bool,
}

/// Where the flusher answers a heartbeat: its slot in its group's answers.
pub(super) struct Reply {
    index: usize,
    answers: Arc<Answers>,
}

impl Reply {
    pub(super) fn send(self, outcome: HealthOutcome) {
        let mut outcomes = self
            .answers
            .outcomes
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(slot) = outcomes.get_mut(self.index) {
            *slot = Some(outcome);
        }
    }
}

/// A group's outcomes, handed to the submitter once the last heartbeat of
/// the group is answered (or dropped unanswered: the flusher is gone).
pub(super) struct Answers {
    outcomes: Mutex<Vec<Option<HealthOutcome>>>,
    done: Option<oneshot::Sender<Vec<Option<HealthOutcome>>>>,
}

impl Drop for Answers {
    fn drop(&mut self) {
        let outcomes = std::mem::take(
            self.outcomes
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner),
        );
        if let Some(done) = self.done.take() {
            let _ = done.send(outcomes);
        }
    }
}

impl Heartbeats {
    /// Writes every heartbeat of `beats` with the next flush, each if the
    /// snapshot row still holds one of its reporter's tokens (see
    /// [`GroupBeat::unchanged`] for a record handed in again), and resolves
    /// once all are answered, with the outcomes in the order given. Should
    /// the flusher be gone when a heartbeat is handed in, that one is
    /// written on its own; `None`: the flusher was dropped with the
    /// heartbeat queued (the worker's runtime is shutting down) and its
    /// reporter went with it.
    pub async fn submit(&self, beats: Vec<GroupBeat>) -> Vec<Option<HealthOutcome>> {
        let (done, answered) = oneshot::channel();
        let answers = Arc::new(Answers {
            outcomes: Mutex::new((0..beats.len()).map(|_| None).collect()),
            done: Some(done),
        });
        let mut alone = Vec::new();
        for (index, beat) in beats.into_iter().enumerate() {
            let beat = Beat {
                reporter: beat.reporter,
                record: beat.record,
                taken_at: beat.taken_at,
                unchanged: beat.unchanged,
                reply: Reply {
                    index,
                    answers: Arc::clone(&answers),
                },
            };
            if let Err(mpsc::error::SendError(beat)) = self.beats.send(beat) {
                alone.push((index, beat));
            }
        }
        let mut unsent = Vec::with_capacity(alone.len());
        for (index, beat) in alone {
            let Beat {
                reporter,
                record,
                taken_at,
                reply,
                ..
            } = beat;
            // Not answered by the flusher: this group's slot is filled here.
            drop(reply);
            unsent.push((index, report_alone((reporter, record), taken_at).await));
        }
        drop(answers);
        let mut outcomes = answered.await.unwrap_or_default();
        for (index, outcome) in unsent {
            if let Some(slot) = outcomes.get_mut(index) {
                *slot = Some(outcome);
            }
        }
        outcomes
    }
}
