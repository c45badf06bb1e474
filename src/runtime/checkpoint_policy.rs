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

/// Tracks what is not committed yet. Time is measured from the oldest
/// change that no committed checkpoint covers, so an idle monitor never
/// counts as stalled however long ago its last commit was.
#[derive(Debug, Clone)]
pub struct CheckpointPolicy {
    limits: CheckpointLimits,
    frames_since_start: u64,
    /// Oldest change not covered by a started checkpoint.
    uncommitted_since: Option<Instant>,
    /// Oldest change covered by the checkpoint in flight.
    in_flight_since: Option<Instant>,
    /// A trigger waiting for the next checkpoint to start.
    pending: Option<Trigger>,
}

fn oldest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

impl CheckpointPolicy {
    pub fn new(limits: CheckpointLimits) -> Self {
        Self {
            limits,
            frames_since_start: 0,
            uncommitted_since: None,
            in_flight_since: None,
            pending: None,
        }
    }

    pub fn limits(&self) -> CheckpointLimits {
        self.limits
    }

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
    /// interval when a change has waited that long.
    pub fn due(&mut self, now: Instant) -> Option<Trigger> {
        if self.pending.is_none()
            && self
                .uncommitted_since
                .is_some_and(|t| now.saturating_duration_since(t) >= self.limits.max_interval)
        {
            self.pending = Some(Trigger::MaxInterval);
        }
        self.pending
    }

    /// A checkpoint started: it covers every change so far.
    pub fn started(&mut self) -> Option<Trigger> {
        self.frames_since_start = 0;
        self.in_flight_since = oldest(self.in_flight_since, self.uncommitted_since.take());
        self.pending.take()
    }

    /// The checkpoint in flight committed.
    pub fn committed(&mut self) {
        self.in_flight_since = None;
    }

    /// The checkpoint failed: its changes are uncommitted again and its
    /// trigger stays due, so it is retried.
    pub fn failed(&mut self, trigger: Option<Trigger>) {
        self.uncommitted_since = oldest(self.uncommitted_since, self.in_flight_since.take());
        if let Some(trigger) = trigger {
            self.pending.get_or_insert(trigger);
        }
    }

    /// True when a change has waited longer than the timeout without a
    /// commit: the model must stop advancing until one commits.
    pub fn stalled(&self, now: Instant) -> bool {
        self.waiting(now) > self.limits.timeout
    }

    /// How long the oldest uncommitted change has waited (zero if none).
    pub fn waiting(&self, now: Instant) -> Duration {
        oldest(self.uncommitted_since, self.in_flight_since)
            .map_or(Duration::ZERO, |t| now.saturating_duration_since(t))
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

    fn secs(t0: Instant, s: u64) -> Instant {
        t0 + Duration::from_secs(s)
    }

    #[test]
    fn the_frame_interval_triggers_exactly_at_the_configured_count() {
        let t0 = Instant::now();
        let mut p = CheckpointPolicy::new(limits());
        assert_eq!(p.on_frames(9, t0), None);
        assert_eq!(p.on_frames(1, t0), Some(Trigger::FrameInterval));
        assert_eq!(p.started(), Some(Trigger::FrameInterval));
        assert_eq!(
            p.on_frames(9, t0),
            None,
            "the count restarts when a checkpoint starts"
        );
    }

    #[test]
    fn the_max_interval_counts_from_the_oldest_uncommitted_change() {
        let t0 = Instant::now();
        let mut p = CheckpointPolicy::new(limits());
        assert_eq!(p.due(secs(t0, 100)), None, "nothing changed");
        p.on_frames(1, secs(t0, 100));
        assert_eq!(p.due(secs(t0, 129)), None);
        assert_eq!(p.due(secs(t0, 130)), Some(Trigger::MaxInterval));
    }

    #[test]
    fn requested_triggers_are_due_at_once_and_the_first_reason_is_kept() {
        let t0 = Instant::now();
        let mut p = CheckpointPolicy::new(limits());
        p.request(Trigger::PhaseChange, t0);
        p.request(Trigger::CoverageChange, t0);
        assert_eq!(p.due(t0), Some(Trigger::PhaseChange));
        assert_eq!(p.started(), Some(Trigger::PhaseChange));
        assert_eq!(p.due(t0), None);
    }

    #[test]
    fn a_failed_checkpoint_stays_due() {
        let t0 = Instant::now();
        let mut p = CheckpointPolicy::new(limits());
        p.request(Trigger::Shutdown, t0);
        let started = p.started();
        p.failed(started);
        assert_eq!(p.due(t0), Some(Trigger::Shutdown));
    }

    #[test]
    fn an_idle_monitor_never_stalls() {
        let t0 = Instant::now();
        let mut p = CheckpointPolicy::new(limits());
        p.request(Trigger::BeforeSubscribing, t0);
        p.started();
        p.committed();
        assert!(!p.stalled(secs(t0, 3600)), "no change waits for a commit");
    }

    #[test]
    fn the_model_stalls_when_a_change_waits_longer_than_the_timeout() {
        let t0 = Instant::now();
        let mut p = CheckpointPolicy::new(limits());
        p.on_frames(1, secs(t0, 100));
        let trigger = p.due(secs(t0, 130));
        p.started();
        assert!(
            !p.stalled(secs(t0, 130)),
            "a checkpoint in flight, exactly at the limit"
        );
        assert!(
            p.stalled(secs(t0, 131)),
            "still not committed after the timeout"
        );
        p.failed(trigger);
        assert!(
            p.stalled(secs(t0, 131)),
            "a failure does not reset the clock"
        );
        p.started();
        p.committed();
        assert!(!p.stalled(secs(t0, 200)), "a commit clears it");
    }

    #[test]
    fn changes_after_a_checkpoint_started_wait_for_the_next_commit() {
        let t0 = Instant::now();
        let mut p = CheckpointPolicy::new(limits());
        p.on_frames(1, t0);
        p.started();
        p.on_frames(1, secs(t0, 5));
        p.committed();
        assert_eq!(p.waiting(secs(t0, 10)), Duration::from_secs(5));
    }
}
