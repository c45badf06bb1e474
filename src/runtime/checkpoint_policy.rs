//! When a monitor checkpoints, and when it must stop advancing because
//! checkpoints no longer commit. Pure: the caller passes the clock.

use std::time::{Duration, Instant};

/// Why a checkpoint is taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Trigger {
    /// Before the first subscription of a (re)started monitor.
    BeforeSubscribing,
    /// The detector moved to another phase.
    PhaseChange,
    /// `RADAR_CHECKPOINT_INTERVAL` frames since the last commit.
    FrameInterval,
    /// `RADAR_CHECKPOINT_MAX_INTERVAL_SECONDS` since the last commit.
    MaxInterval,
    /// The coverage history changed (a gap opened or closed).
    CoverageChange,
    /// Graceful shutdown, after ingestion stopped.
    Shutdown,
}

impl Trigger {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::BeforeSubscribing => "before_subscribing",
            Self::PhaseChange => "phase_change",
            Self::FrameInterval => "frame_interval",
            Self::MaxInterval => "max_interval",
            Self::CoverageChange => "coverage_change",
            Self::Shutdown => "shutdown",
        }
    }
}

/// The checkpoint settings of a worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckpointLimits {
    /// Frames between checkpoints.
    pub interval_frames: u64,
    /// Longest time between checkpoints while anything changed.
    pub max_interval: Duration,
    /// Longest time without a commit before the model stops advancing.
    pub timeout: Duration,
}

/// Tracks what happened since the last committed checkpoint.
#[derive(Debug, Clone)]
pub struct CheckpointPolicy {
    limits: CheckpointLimits,
    last_commit: Instant,
    frames_since_commit: u64,
    /// Something changed (frames, phase, coverage) since the last commit.
    dirty: bool,
    /// A trigger waiting for the next checkpoint to start.
    pending: Option<Trigger>,
}

impl CheckpointPolicy {
    pub fn new(limits: CheckpointLimits, now: Instant) -> Self {
        Self {
            limits,
            last_commit: now,
            frames_since_commit: 0,
            dirty: false,
            pending: None,
        }
    }

    pub fn limits(&self) -> CheckpointLimits {
        self.limits
    }

    /// Counts frames the model processed; returns the trigger if the frame
    /// interval is reached.
    pub fn on_frames(&mut self, frames: u64) -> Option<Trigger> {
        if frames == 0 {
            return None;
        }
        self.frames_since_commit = self.frames_since_commit.saturating_add(frames);
        self.dirty = true;
        if self.frames_since_commit >= self.limits.interval_frames {
            self.request(Trigger::FrameInterval)
        } else {
            None
        }
    }

    /// Records an event that checkpoints at once (phase or coverage change,
    /// shutdown, before subscribing).
    pub fn request(&mut self, trigger: Trigger) -> Option<Trigger> {
        self.dirty = true;
        // The first reason is kept; any one of them checkpoints everything.
        let kept = *self.pending.get_or_insert(trigger);
        Some(kept)
    }

    /// The trigger that is due now, if any: a requested one, or the maximum
    /// interval when something changed since the last commit.
    pub fn due(&mut self, now: Instant) -> Option<Trigger> {
        if let Some(trigger) = self.pending {
            return Some(trigger);
        }
        if self.dirty && now.saturating_duration_since(self.last_commit) >= self.limits.max_interval
        {
            self.pending = Some(Trigger::MaxInterval);
        }
        self.pending
    }

    /// A checkpoint started for the pending trigger; later changes need another.
    pub fn started(&mut self) -> Option<Trigger> {
        self.frames_since_commit = 0;
        self.dirty = false;
        self.pending.take()
    }

    /// The checkpoint committed.
    pub fn committed(&mut self, now: Instant) {
        self.last_commit = now;
    }

    /// The checkpoint failed: its trigger stays due so it is retried.
    pub fn failed(&mut self, trigger: Option<Trigger>) {
        self.dirty = true;
        if let Some(trigger) = trigger {
            self.pending.get_or_insert(trigger);
        }
    }

    /// True when no checkpoint committed for longer than the timeout: the
    /// model must stop advancing until one does.
    pub fn stalled(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.last_commit) > self.limits.timeout
    }

    /// How long since the last commit.
    pub fn since_commit(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.last_commit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> CheckpointLimits {
        CheckpointLimits {
            interval_frames: 10,
            max_interval: Duration::from_secs(30),
            timeout: Duration::from_secs(30),
        }
    }

    #[test]
    fn the_frame_interval_triggers_exactly_at_the_configured_count() {
        let t0 = Instant::now();
        let mut p = CheckpointPolicy::new(limits(), t0);
        assert_eq!(p.on_frames(9), None);
        assert_eq!(p.on_frames(1), Some(Trigger::FrameInterval));
        assert_eq!(p.started(), Some(Trigger::FrameInterval));
        assert_eq!(
            p.on_frames(9),
            None,
            "the count restarts when a checkpoint starts"
        );
    }

    #[test]
    fn the_max_interval_triggers_only_when_something_changed() {
        let t0 = Instant::now();
        let mut p = CheckpointPolicy::new(limits(), t0);
        assert_eq!(p.due(t0 + Duration::from_secs(31)), None, "nothing changed");
        p.on_frames(1);
        assert_eq!(p.due(t0 + Duration::from_secs(29)), None);
        assert_eq!(
            p.due(t0 + Duration::from_secs(30)),
            Some(Trigger::MaxInterval)
        );
    }

    #[test]
    fn requested_triggers_are_due_at_once_and_the_first_reason_is_kept() {
        let t0 = Instant::now();
        let mut p = CheckpointPolicy::new(limits(), t0);
        p.request(Trigger::PhaseChange);
        p.request(Trigger::CoverageChange);
        assert_eq!(p.due(t0), Some(Trigger::PhaseChange));
        assert_eq!(p.started(), Some(Trigger::PhaseChange));
        assert_eq!(p.due(t0), None);
    }

    #[test]
    fn a_failed_checkpoint_stays_due() {
        let t0 = Instant::now();
        let mut p = CheckpointPolicy::new(limits(), t0);
        p.request(Trigger::Shutdown);
        let started = p.started();
        p.failed(started);
        assert_eq!(p.due(t0), Some(Trigger::Shutdown));
    }

    #[test]
    fn the_model_stalls_only_after_the_timeout_without_a_commit() {
        let t0 = Instant::now();
        let mut p = CheckpointPolicy::new(limits(), t0);
        assert!(!p.stalled(t0 + Duration::from_secs(30)));
        assert!(p.stalled(t0 + Duration::from_millis(30_001)));
        p.committed(t0 + Duration::from_secs(31));
        assert!(!p.stalled(t0 + Duration::from_secs(40)));
    }
}
