//! How a monitor ended, and whether the supervisor may start it again.

use std::fmt;

/// Why a monitor's actors stopped. Terminal reasons are never restarted in
/// the same process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExitReason {
    /// Graceful stop: worker shutdown or the monitor was retired.
    Stopped,
    /// Another worker committed a successor snapshot.
    OwnershipLost { detail: String },
    /// The monitor's state can no longer be trusted.
    Quarantined { detail: String },
    /// The snapshot is corrupted or incompatible; an operator must act.
    StartupFailed { reason: String },
    /// Something transient failed (e.g. the database was unreachable at start).
    Failed { error: String },
}

/// What the supervisor does after an exit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Restart {
    Never,
    AfterBackoff,
}

impl ExitReason {
    pub fn restart(&self) -> Restart {
        match self {
            Self::Failed { .. } => Restart::AfterBackoff,
            Self::Stopped
            | Self::OwnershipLost { .. }
            | Self::Quarantined { .. }
            | Self::StartupFailed { .. } => Restart::Never,
        }
    }

    pub fn is_terminal(&self) -> bool {
        self.restart() == Restart::Never
    }
}

impl fmt::Display for ExitReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Stopped => f.write_str("stopped"),
            Self::OwnershipLost { detail } => write!(f, "ownership lost: {detail}"),
            Self::Quarantined { detail } => write!(f, "quarantined: {detail}"),
            Self::StartupFailed { reason } => write!(f, "startup failed: {reason}"),
            Self::Failed { error } => write!(f, "failed: {error}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_transient_failures_are_restarted() {
        assert_eq!(
            ExitReason::Failed {
                error: "db down".into()
            }
            .restart(),
            Restart::AfterBackoff
        );
        for terminal in [
            ExitReason::Stopped,
            ExitReason::OwnershipLost {
                detail: String::new(),
            },
            ExitReason::Quarantined {
                detail: String::new(),
            },
            ExitReason::StartupFailed {
                reason: String::new(),
            },
        ] {
            assert!(terminal.is_terminal(), "{terminal}");
        }
    }
}
