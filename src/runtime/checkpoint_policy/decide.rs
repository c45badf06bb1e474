//! The policy's decisions: which checkpoint is due (frame interval,
//! requests, maximum interval), whether the model must stall, and whether
//! nothing can change until the next event.

use std::time::{Duration, Instant};

use super::{CheckpointPolicy, Trigger, oldest};

impl CheckpointPolicy {
    fn changed(&mut self, now: Instant) {
        self.uncommitted_since.get_or_insert(now);
    }

    /// Counts frames the model processed; returns the trigger if the frame
    /// interval is reached.
    pub fn on_frames(&mut self, frames: u64, now: Instant) -> Option<Trigger> {
        if frames == 0 {
            return None;
        }
        self.changed(now);
        self.frames_since_start = self.frames_since_start.saturating_add(frames);
        if self.frames_since_start >= self.limits.interval_frames {
            self.request(Trigger::FrameInterval, now)
        } else {
            None
        }
    }

    /// Records an event that checkpoints at once (phase or coverage change,
    /// shutdown, before subscribing).
    pub fn request(&mut self, trigger: Trigger, now: Instant) -> Option<Trigger> {
        self.changed(now);
        // The first reason is kept; any one of them checkpoints everything.
        Some(*self.pending.get_or_insert(trigger))
    }

    /// The trigger that is due now, if any: a requested one, or the maximum
    /// interval when a change has waited that long; none while the pause
    /// after a failed checkpoint lasts.
    pub fn due(&mut self, now: Instant) -> Option<Trigger> {
        if !self.retry.ready(now) {
            return None;
        }
        if self.pending.is_none()
            && self
                .uncommitted_since
                .is_some_and(|t| now.saturating_duration_since(t) >= self.limits.max_interval)
        {
            self.pending = Some(Trigger::MaxInterval);
        }
        self.pending
    }

    /// True when no time passing can make a checkpoint due or the model
    /// stalled: nothing is requested or uncommitted, no checkpoint waits
    /// for its commit and no evidence batch failed. Only a new event (a
    /// frame, a request, a started checkpoint) ends it, so a caller need
    /// not watch the clock meanwhile.
    pub fn quiet(&self) -> bool {
        self.pending.is_none()
            && self.uncommitted_since.is_none()
            && self.outstanding.is_empty()
            && self.failed_batch_since.is_none()
    }

    /// True when a started checkpoint has gone longer than the timeout
    /// without a commit: the model must stop advancing until one commits.
    pub fn stalled(&self, now: Instant) -> bool {
        self.waiting(now) > self.limits.timeout
    }

    /// How long the oldest checkpoint without a commit has been waiting
    /// (zero if none).
    pub fn waiting(&self, now: Instant) -> Duration {
        let since = oldest(
            self.outstanding.front().map(|(_, t)| *t),
            self.failed_batch_since,
        );
        since.map_or(Duration::ZERO, |t| now.saturating_duration_since(t))
    }

    /// The earliest instant at which time passing alone can make a
    /// checkpoint due (the maximum interval) or the model stalled (the
    /// timeout), when both are known: `None` while a requested checkpoint
    /// waits (it is taken at the next input or tick, or after a retry
    /// pause), and for a quiet policy (see [`Self::quiet`]: never).
    /// Before it, [`Self::due`] and [`Self::stalled`] answer as they do now.
    pub fn next_deadline(&self) -> Option<Instant> {
        if self.pending.is_some() || self.quiet() {
            return None;
        }
        let interval = self.uncommitted_since.map(|t| t + self.limits.max_interval);
        // `stalled` is strictly later than the timeout.
        let stall = oldest(
            self.outstanding.front().map(|(_, t)| *t),
            self.failed_batch_since,
        )
        .map(|t| t + self.limits.timeout + Duration::from_nanos(1));
        oldest(interval, stall)
    }
}
