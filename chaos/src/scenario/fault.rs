//! The faults the loop injects, how often each is picked, and the small
//! deterministic generator that makes a seed replay a schedule.

use std::{fmt, time::Duration};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Fault {
    /// SIGKILL a shard's worker; a replacement starts a moment later.
    Kill9,
    /// SIGTERM a shard's worker (it commits and exits); a replacement starts.
    Sigterm,
    /// Start a second worker for a shard, then kill or stop the first: two
    /// workers compute for the same monitors until fencing settles it.
    Takeover,
    /// SIGKILL Mosquitto; it comes back after a while.
    BrokerRestart,
    /// pg_ctl stop (fast or immediate) and start again after a while.
    PgRestart,
    /// SIGSTOP every PostgreSQL process; SIGCONT after a while.
    PgPause,
    /// SIGSTOP a shard's worker (maybe inside a transaction) and start its
    /// replacement; SIGCONT the frozen one a while later (a zombie writer
    /// that must find itself fenced), then SIGTERM it.
    Freeze,
    /// Drop every packet to and from the broker's port (iptables, loopback
    /// only, no reset) for a while.
    BrokerBlackhole,
    /// Start an extra worker for a shard whose clock is 30 to 120 s off
    /// (libfaketime); SIGTERM it a few seconds later.
    ClockOffset,
    /// Copy a monitor's signed row, write it back 3 to 8 s later, wait for
    /// the refusal to be reported, repair the row, restart the shard.
    Replay,
}

impl Fault {
    pub const ALL: [Fault; 10] = [
        Self::Kill9,
        Self::Sigterm,
        Self::Takeover,
        Self::BrokerRestart,
        Self::PgRestart,
        Self::PgPause,
        Self::Freeze,
        Self::BrokerBlackhole,
        Self::ClockOffset,
        Self::Replay,
    ];

    /// Relative frequency.
    pub(super) fn weight(self) -> u64 {
        match self {
            Self::Kill9 | Self::Takeover => 6,
            Self::Sigterm | Self::BrokerRestart | Self::Freeze => 4,
            Self::PgRestart | Self::PgPause | Self::BrokerBlackhole => 3,
            Self::ClockOffset | Self::Replay => 2,
        }
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Kill9 => "kill9",
            Self::Sigterm => "sigterm",
            Self::Takeover => "takeover",
            Self::BrokerRestart => "broker_restart",
            Self::PgRestart => "pg_restart",
            Self::PgPause => "pg_pause",
            Self::Freeze => "freeze",
            Self::BrokerBlackhole => "broker_blackhole",
            Self::ClockOffset => "clock_offset",
            Self::Replay => "replay",
        })
    }
}

/// A small deterministic generator (SplitMix64): a seed replays a schedule.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub(super) fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// A duration uniformly in `[lo, hi)` milliseconds.
    pub(super) fn ms(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(lo + self.below(hi.saturating_sub(lo)))
    }

    pub(super) fn coin(&mut self) -> bool {
        self.next() & 1 == 1
    }
}
