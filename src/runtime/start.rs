//! A monitor's start, decided without IO: what the loaded snapshot row
//! means (start fresh, restore it, or refuse to start), which exit follows
//! a refused graph run, and whether a start that another worker's commit
//! overtook is tried again. The actor reads the row, asks here, and carries
//! the plan out.

use std::time::Duration;

use uuid::Uuid;

use super::ExitReason;
use crate::snapshot::{LoadOutcome, Restored};
use crate::store::AdmissionRefusal;

/// What a monitor starts from.
#[derive(Debug)]
pub enum StartPlan {
    /// No snapshot: a new model; the first checkpoint claims the row.
    Fresh,
    /// A verified, compatible snapshot: restore it; the first checkpoint
    /// replaces exactly that row.
    Restore(Box<Restored>),
    /// The row cannot be trusted or does not fit this binary, monitor or
    /// config: the monitor does not start, the row stays as it is, and the
    /// status says why (an operator must act, so it is never retried).
    Refuse { reason: String },
}

impl StartPlan {
    /// The plan for a snapshot row (`None`: the monitor has none).
    pub fn from_load(outcome: Option<LoadOutcome>) -> Self {
        match outcome {
            None | Some(LoadOutcome::Missing) => Self::Fresh,
            Some(LoadOutcome::Restored(restored)) => Self::Restore(restored),
            Some(LoadOutcome::Corrupted(corrupted)) => Self::Refuse {
                reason: corrupted.to_string(),
            },
            Some(LoadOutcome::Incompatible(incompatible)) => Self::Refuse {
                reason: incompatible.to_string(),
            },
        }
    }

    /// The exit of a refused start.
    pub fn refusal_exit(reason: String) -> ExitReason {
        ExitReason::StartupFailed { reason }
    }
}

/// A graph run the database did not admit: the monitor ends without
/// touching its snapshot; `reason` goes into its status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedRun {
    pub exit: ExitReason,
    pub reason: String,
}

impl RefusedRun {
    /// A run asked to stop, or already stopped, ends the monitor as
    /// stopped: nothing failed. Every other refusal (another monitor's run,
    /// a launch contract this binary lacks, a failed generation) is a
    /// failed start that only an operator can change.
    pub fn new(run_id: Uuid, refusal: &AdmissionRefusal) -> Self {
        let reason = format!("graph run {run_id} was not admitted: {refusal}");
        let stopped = match refusal {
            AdmissionRefusal::LifecycleIntent { .. } => true,
            AdmissionRefusal::TerminalGeneration { status, .. } => status == "stopped",
            AdmissionRefusal::UnknownRun { .. }
            | AdmissionRefusal::ServiceMismatch { .. }
            | AdmissionRefusal::LaunchContract { .. } => false,
        };
        let exit = if stopped {
            ExitReason::Stopped
        } else {
            ExitReason::StartupFailed {
                reason: reason.clone(),
            }
        };
        Self { exit, reason }
    }

    /// Whether the refusal is an error an operator should see as one.
    pub fn is_error(&self) -> bool {
        self.exit != ExitReason::Stopped
    }
}

/// Start attempts when another worker keeps committing between this
/// worker's load and its first commit (a busy monitor during a rolling
/// update). Each attempt reloads the newer snapshot.
pub const START_ATTEMPTS: u32 = 20;

/// After start attempt `attempt` (1-based) was overtaken by another
/// worker's commit: the pause before the next one, a little longer each
/// time so a steady committer is not met at the same phase of its cycle;
/// `None` once the attempts are used up (the start then fails and the
/// supervisor's backoff takes over).
pub fn retry_overtaken_start(attempt: u32) -> Option<Duration> {
    (attempt < START_ATTEMPTS).then(|| Duration::from_millis(10 * u64::from(attempt + 1)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::{CorruptReason, Corrupted, Incompatible, IncompatibleReason};
    use crate::telemetry::MonitorState;

    fn run() -> Uuid {
        Uuid::from_u128(7)
    }

    #[test]
    fn no_row_or_an_empty_one_starts_fresh() {
        assert!(matches!(StartPlan::from_load(None), StartPlan::Fresh));
        assert!(matches!(
            StartPlan::from_load(Some(LoadOutcome::Missing)),
            StartPlan::Fresh
        ));
    }

    #[test]
    fn a_corrupted_or_incompatible_row_refuses_the_start_with_its_reason() {
        let corrupted = Corrupted {
            service_id: run(),
            reason: CorruptReason::BadSignature,
        };
        let StartPlan::Refuse { reason } =
            StartPlan::from_load(Some(LoadOutcome::Corrupted(corrupted.clone())))
        else {
            panic!("a corrupted row must not start")
        };
        assert_eq!(reason, corrupted.to_string());
        let exit = StartPlan::refusal_exit(reason);
        assert!(exit.is_terminal(), "an operator must act: {exit}");
        assert_eq!(MonitorState::from(&exit), MonitorState::StartupFailed);

        let incompatible = Incompatible {
            service_id: run(),
            reason: IncompatibleReason::FormatVersion {
                snapshot: 9,
                running: 2,
            },
        };
        assert!(matches!(
            StartPlan::from_load(Some(LoadOutcome::Incompatible(incompatible))),
            StartPlan::Refuse { .. }
        ));
    }

    #[test]
    fn a_run_asked_to_stop_or_stopped_ends_as_stopped_and_other_refusals_fail_the_start() {
        let stopped = [
            AdmissionRefusal::LifecycleIntent {
                run_id: run(),
                intent: "stopping".into(),
            },
            AdmissionRefusal::TerminalGeneration {
                run_id: run(),
                generation: 2,
                status: "stopped".into(),
            },
        ];
        for refusal in &stopped {
            let refused = RefusedRun::new(run(), refusal);
            assert_eq!(refused.exit, ExitReason::Stopped, "{refusal}");
            assert!(!refused.is_error());
        }
        let failed = [
            AdmissionRefusal::UnknownRun { run_id: run() },
            AdmissionRefusal::ServiceMismatch {
                run_id: run(),
                expected: Uuid::from_u128(1),
                got: Uuid::from_u128(2),
            },
            AdmissionRefusal::LaunchContract {
                run_id: run(),
                run: 3,
                supported: 2,
            },
            AdmissionRefusal::TerminalGeneration {
                run_id: run(),
                generation: 2,
                status: "failed".into(),
            },
        ];
        for refusal in &failed {
            let refused = RefusedRun::new(run(), refusal);
            assert_eq!(
                MonitorState::from(&refused.exit),
                MonitorState::StartupFailed,
                "{refusal}"
            );
            assert!(refused.exit.is_terminal());
            assert!(refused.is_error());
            assert!(refused.reason.contains(&refusal.to_string()));
            assert!(refused.reason.contains(&run().to_string()));
        }
    }

    #[test]
    fn an_overtaken_start_is_retried_a_little_later_each_time_until_the_attempts_are_used() {
        let pauses: Vec<_> = (1..START_ATTEMPTS).map(retry_overtaken_start).collect();
        assert!(pauses.iter().all(Option::is_some));
        assert!(pauses.windows(2).all(|w| w[0] < w[1]), "{pauses:?}");
        assert_eq!(retry_overtaken_start(START_ATTEMPTS), None);
        assert_eq!(retry_overtaken_start(START_ATTEMPTS + 5), None);
    }
}
