//! The policy's bookkeeping: checkpoint attempts started, committed and
//! failed, and the outcomes of background evidence batches.

use std::time::Instant;

use super::{Attempt, CheckpointPolicy, Trigger, oldest};

impl CheckpointPolicy {
    /// A checkpoint started at `now`: it covers every change so far. Returns
    /// its trigger (if one was pending) and the attempt its outcome names.
    pub fn started(&mut self, now: Instant) -> (Option<Trigger>, Attempt) {
        self.frames_since_start = 0;
        self.in_flight_since = oldest(self.in_flight_since, self.uncommitted_since.take());
        let attempt = Attempt(self.next_attempt);
        self.next_attempt += 1;
        self.outstanding.push_back((attempt, now));
        (self.pending.take(), attempt)
    }

    /// `attempt` committed: it covers every change up to its start, and
    /// every attempt started before it is settled too.
    pub fn committed(&mut self, attempt: Attempt) {
        while self
            .outstanding
            .front()
            .is_some_and(|(started, _)| *started <= attempt)
        {
            self.outstanding.pop_front();
        }
        if self.outstanding.is_empty() {
            self.in_flight_since = None;
        }
        self.failed_batch_since = None;
        self.retry.succeeded();
    }

    /// A background evidence batch started at `started` failed: the stall
    /// clock runs from its start, as for a failed checkpoint.
    pub fn batch_failed(&mut self, started: Instant) {
        self.failed_batch_since = oldest(self.failed_batch_since, Some(started));
    }

    /// A background evidence batch committed: the database takes writes.
    pub fn batch_committed(&mut self) {
        self.failed_batch_since = None;
        self.retry.succeeded();
    }

    /// `attempt` failed (found out at `now`): its changes are uncommitted
    /// again and its trigger stays due, so it is retried after a pause. The
    /// stall clock keeps counting from the oldest attempt that has not
    /// committed.
    pub fn failed(&mut self, attempt: Attempt, trigger: Option<Trigger>, now: Instant) {
        self.retry.failed(now);
        self.uncommitted_since = oldest(self.uncommitted_since, self.in_flight_since.take());
        if let Some(trigger) = trigger {
            self.pending.get_or_insert(trigger);
        }
        // The oldest entry keeps the clock; a later failed one adds nothing
        // (its retry is a new attempt).
        if self
            .outstanding
            .front()
            .is_some_and(|(oldest, _)| *oldest != attempt)
        {
            self.outstanding.retain(|(a, _)| *a != attempt);
        }
    }
}
