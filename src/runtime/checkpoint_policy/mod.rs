//! When a monitor checkpoints, and when it must stop advancing because
//! checkpoints no longer commit. Pure: the caller passes the clock.
//!
//! This file holds the triggers, the limits and the policy's state;
//! `decide` says what is due and when the model stalls, `record` keeps
//! the books on checkpoint attempts and evidence batches.

mod decide;
mod record;
#[cfg(test)]
mod tests;

use std::{
    collections::VecDeque,
    time::{Duration, Instant},
};

use super::retry::RetryBackoff;

/// The longest pause between checkpoint attempts while they fail.
const MAX_RETRY_PAUSE: Duration = Duration::from_secs(30);

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
    /// Every trigger, in declaration order.
    pub const ALL: [Trigger; 6] = [
        Self::BeforeSubscribing,
        Self::PhaseChange,
        Self::FrameInterval,
        Self::MaxInterval,
        Self::CoverageChange,
        Self::Shutdown,
    ];

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

/// One started checkpoint, named so that its outcome can be matched to it.
/// Attempts are numbered in the order they start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Attempt(u64);

/// Tracks what is not committed yet, for two clocks:
///
/// - the maximum interval counts from the oldest change no started
///   checkpoint covers, so an idle monitor never checkpoints for nothing;
/// - the stall timeout counts from the start of the oldest checkpoint that
///   has not committed (nor been overtaken by a later commit), so the model
///   stops only when writes fail or hang for the timeout, never merely
///   because a change waited out the maximum interval before its
///   checkpoint started. An idle monitor therefore never stalls either.
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
    next_attempt: u64,
    /// Started checkpoints without a commit at or after them, oldest first.
    /// The writer commits in start order and coalesces what waits, so this
    /// holds at most the oldest failed one, the one in flight and the one
    /// waiting behind it.
    outstanding: VecDeque<(Attempt, Instant)>,
    /// Start of the oldest failed evidence batch since the last commit of
    /// any write: a failing database stalls the model even when no
    /// checkpoint is due yet.
    failed_batch_since: Option<Instant>,
    /// After a failed checkpoint nothing is due until the pause ends (at
    /// most the stall timeout, so a recovered database is tried again
    /// before a stall would be declared).
    retry: RetryBackoff,
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
            next_attempt: 0,
            outstanding: VecDeque::new(),
            failed_batch_since: None,
            retry: RetryBackoff::new(limits.timeout.min(MAX_RETRY_PAUSE)),
        }
    }

    pub fn limits(&self) -> CheckpointLimits {
        self.limits
    }
}
