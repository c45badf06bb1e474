//! A monitor's condition as the health side sees it, and the one state that
//! follows from it. Pure: the runtime reports facts (connected, stalled,
//! a terminal exit) and the state is derived, so no two reports can leave
//! the monitor in a contradictory state.
//!
//! [`HealthFacts::state`] is the one place a state is derived. The health board
//! ([`Condition`]: `/readyz` and the state gauge) keeps its facts from
//! events; a monitor's heartbeat takes its facts from the views the model,
//! checkpoint and link publish, and writes [`HealthFacts::status_label`], the same
//! state under the status table's names.

use serde::Serialize;

use crate::runtime::{ExitReason, Ownership};

/// The state `/readyz`, the `radar.monitor.state` gauge and the status table
/// show. Only `Connected` is ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MonitorState {
    /// Admitted, not yet connected (restoring, taking the initial snapshot,
    /// subscribing).
    Starting,
    /// Every required subscription acknowledged and the model advancing.
    Connected,
    /// The connection dropped after it was established; reconnecting.
    Disconnected,
    /// The model stopped advancing (checkpoint stall or a stuck operation).
    Stalled,
    /// Connected, but a required reading delivered nothing for longer than
    /// its silence limit: not ready, since nothing seen is never healthy.
    NoData,
    /// Terminal: the monitor could not start (e.g. a snapshot was rejected).
    StartupFailed,
    /// Terminal: another worker committed a successor snapshot.
    OwnershipLost,
    /// Terminal: a fatal uncertain update; no checkpoint is exported again.
    Quarantined,
    /// Terminal: stopped on request.
    Stopped,
    /// Ended by a transient failure; the supervisor starts it again after a
    /// backoff (re-admitting it on the board as `starting`).
    Failed,
}

impl MonitorState {
    pub const ALL: [MonitorState; 10] = [
        Self::Starting,
        Self::Connected,
        Self::Disconnected,
        Self::Stalled,
        Self::NoData,
        Self::StartupFailed,
        Self::OwnershipLost,
        Self::Quarantined,
        Self::Stopped,
        Self::Failed,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Starting => "starting",
            Self::Connected => "connected",
            Self::Disconnected => "disconnected",
            Self::Stalled => "stalled",
            Self::NoData => "no_data",
            Self::StartupFailed => "startup_failed",
            Self::OwnershipLost => "ownership_lost",
            Self::Quarantined => "quarantined",
            Self::Stopped => "stopped",
            Self::Failed => "failed",
        }
    }

    pub const fn is_terminal(self) -> bool {
        matches!(
            self,
            Self::StartupFailed | Self::OwnershipLost | Self::Quarantined | Self::Stopped
        )
    }
}

impl std::fmt::Display for MonitorState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<&ExitReason> for MonitorState {
    fn from(exit: &ExitReason) -> Self {
        match exit {
            ExitReason::Stopped => Self::Stopped,
            ExitReason::OwnershipLost { .. } => Self::OwnershipLost,
            ExitReason::Quarantined { .. } => Self::Quarantined,
            ExitReason::StartupFailed { .. } => Self::StartupFailed,
            ExitReason::Failed { .. } => Self::Failed,
        }
    }
}

/// Why a monitor's model does not advance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stall {
    /// Queued input has not moved for the stall limit.
    Input,
    /// Checkpoints are not committing, so the model holds still.
    Checkpoint,
}

impl Stall {
    /// What the operator reads on `/readyz`, in the log and in the status.
    pub const fn detail(self) -> &'static str {
        match self {
            Self::Input => "queued input is not progressing",
            Self::Checkpoint => "checkpoints are not committing; the model does not advance",
        }
    }
}

/// What one instant shows of a monitor; its state follows from these alone.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HealthFacts {
    /// How the monitor ended: a state an exit leaves
    /// (`MonitorState::from(&ExitReason)`); a quarantine counts from the
    /// moment it is being recorded.
    pub ended: Option<MonitorState>,
    pub stall: Option<Stall>,
    /// Every required subscription is acknowledged.
    pub connected: bool,
    /// It was connected at some point since it started: a monitor not
    /// connected is then disconnected, not starting.
    pub was_connected: bool,
    /// Required readings are silent.
    pub no_data: bool,
}

impl HealthFacts {
    /// The state: an end first, then a stall, then the connection (a
    /// connected monitor whose required readings are silent has no data).
    pub fn state(&self) -> MonitorState {
        if let Some(ended) = self.ended {
            return ended;
        }
        if self.stall.is_some() {
            return MonitorState::Stalled;
        }
        match (self.connected, self.was_connected) {
            (true, _) if self.no_data => MonitorState::NoData,
            (true, _) => MonitorState::Connected,
            (false, true) => MonitorState::Disconnected,
            (false, false) => MonitorState::Starting,
        }
    }

    /// The stall the state shows, if it is stalled.
    pub fn stalled(&self) -> Option<Stall> {
        self.stall.filter(|_| self.ended.is_none())
    }

    /// The state under the status table's names: a connected monitor is
    /// `running`, and a stall of checkpoints is `checkpoint_stalled`.
    pub fn status_label(&self) -> &'static str {
        match (self.state(), self.stalled()) {
            (MonitorState::Connected, _) => "running",
            (_, Some(Stall::Checkpoint)) => "checkpoint_stalled",
            (state, _) => state.as_str(),
        }
    }
}

/// The operator-facing reason carried by an exit.
fn exit_detail(exit: &ExitReason) -> &str {
    match exit {
        ExitReason::Stopped => "stopped on request",
        ExitReason::OwnershipLost { detail } | ExitReason::Quarantined { detail } => detail,
        ExitReason::StartupFailed { reason } => reason,
        ExitReason::Failed { error } => error,
    }
}

/// The facts reported about one monitor.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Condition {
    connected: bool,
    /// Distinguishes "not connected yet" (starting) from "dropped".
    was_connected: bool,
    disconnect_detail: String,
    stall: Option<Stall>,
    /// The silent required readings, as a sentence; `None` while data flows.
    no_data: Option<String>,
    /// The first exit wins: a quarantined monitor that then stops stays
    /// reported as quarantined.
    exit: Option<ExitReason>,
    ownership: Ownership,
}

impl Condition {
    fn facts(&self) -> HealthFacts {
        HealthFacts {
            ended: self.exit.as_ref().map(MonitorState::from),
            stall: self.stall,
            connected: self.connected,
            was_connected: self.was_connected,
            no_data: self.no_data.is_some(),
        }
    }

    pub fn state(&self) -> MonitorState {
        self.facts().state()
    }

    /// Why the monitor is in its state; empty when connected.
    pub fn detail(&self) -> &str {
        if let Some(exit) = &self.exit {
            return exit_detail(exit);
        }
        if let Some(stall) = self.stall {
            return stall.detail();
        }
        if self.connected {
            self.no_data.as_deref().unwrap_or("")
        } else {
            &self.disconnect_detail
        }
    }

    pub fn connected(&self) -> bool {
        self.connected
    }

    pub fn ownership(&self) -> Ownership {
        self.ownership
    }

    pub fn is_ready(&self) -> bool {
        self.state() == MonitorState::Connected
    }

    /// Every required subscription was acknowledged.
    pub fn connect(&mut self) {
        self.connected = true;
        self.was_connected = true;
        self.disconnect_detail.clear();
    }

    /// Where a start that has not connected yet is (waiting for a start
    /// slot, restoring...); ignored once the monitor has connected.
    pub fn starting(&mut self, detail: impl Into<String>) {
        if !self.was_connected {
            self.disconnect_detail = detail.into();
        }
    }

    /// The connection is down or a subscription was refused.
    pub fn disconnect(&mut self, detail: impl Into<String>) {
        self.connected = false;
        self.disconnect_detail = detail.into();
    }

    pub fn stall(&mut self, stall: Stall) {
        self.stall = Some(stall);
    }

    pub fn clear_stall(&mut self) {
        self.stall = None;
    }

    /// Required readings are silent (`Some`, naming them) or data flows.
    pub fn set_no_data(&mut self, detail: Option<String>) {
        self.no_data = detail;
    }

    /// Ends the monitor. Ownership loss also clears the held token, and the
    /// connection is no longer reported as up once the monitor has exited.
    pub fn exit(&mut self, exit: &ExitReason) {
        if matches!(exit, ExitReason::OwnershipLost { .. }) {
            self.ownership = Ownership::Lost;
        }
        if self.exit.is_none() {
            self.exit = Some(exit.clone());
        }
        self.connected = false;
    }

    /// The initial snapshot was won or a snapshot was restored.
    pub fn hold_ownership(&mut self) {
        self.ownership = self.ownership.after_commit();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_monitor_is_starting_and_not_ready() {
        let c = Condition::default();
        assert_eq!(c.state(), MonitorState::Starting);
        assert!(!c.is_ready());
    }

    #[test]
    fn a_dropped_connection_is_disconnected_with_its_detail_until_it_recovers() {
        let mut c = Condition::default();
        c.connect();
        assert!(c.is_ready());
        assert_eq!(c.detail(), "");
        c.disconnect("broker closed the connection");
        assert_eq!(c.state(), MonitorState::Disconnected);
        assert_eq!(c.detail(), "broker closed the connection");
        c.connect();
        assert_eq!(c.state(), MonitorState::Connected);
        assert_eq!(c.detail(), "");
    }

    #[test]
    fn a_start_says_where_it_is_until_the_monitor_connects() {
        let mut c = Condition::default();
        c.starting("waiting for a start slot");
        assert_eq!(c.state(), MonitorState::Starting);
        assert_eq!(c.detail(), "waiting for a start slot");
        c.connect();
        assert_eq!(c.detail(), "");
        c.disconnect("broker closed the connection");
        c.starting("starting");
        assert_eq!(c.state(), MonitorState::Disconnected);
        assert_eq!(c.detail(), "broker closed the connection");
    }

    #[test]
    fn a_stall_hides_the_connection_until_cleared() {
        let mut c = Condition::default();
        c.connect();
        c.stall(Stall::Checkpoint);
        assert_eq!(c.state(), MonitorState::Stalled);
        assert_eq!(c.detail(), Stall::Checkpoint.detail());
        assert!(c.connected());
        assert!(!c.is_ready());
        c.clear_stall();
        assert!(c.is_ready());
    }

    #[test]
    fn the_first_exit_wins_and_reconnecting_cannot_revive_the_monitor() {
        let mut c = Condition::default();
        c.connect();
        c.exit(&ExitReason::Quarantined {
            detail: "node f failed mid-update".into(),
        });
        c.exit(&ExitReason::Stopped);
        c.connect();
        assert_eq!(c.state(), MonitorState::Quarantined);
        assert_eq!(c.detail(), "node f failed mid-update");
        assert!(!c.is_ready());
    }

    /// The status table's label of each combination of facts, in the order
    /// the state is decided: an end, a stall, then the connection.
    #[test]
    fn the_status_table_shows_each_state_under_its_own_name() {
        let up = HealthFacts {
            connected: true,
            was_connected: true,
            ..HealthFacts::default()
        };
        let cases = [
            (HealthFacts::default(), "starting"),
            (up, "running"),
            (
                HealthFacts {
                    connected: false,
                    ..up
                },
                "disconnected",
            ),
            (
                HealthFacts {
                    no_data: true,
                    ..up
                },
                "no_data",
            ),
            (
                HealthFacts {
                    no_data: true,
                    connected: false,
                    ..up
                },
                "disconnected",
            ),
            (
                HealthFacts {
                    no_data: true,
                    ..HealthFacts::default()
                },
                "starting",
            ),
            (
                HealthFacts {
                    stall: Some(Stall::Input),
                    no_data: true,
                    ..up
                },
                "stalled",
            ),
            (
                HealthFacts {
                    stall: Some(Stall::Checkpoint),
                    ..HealthFacts::default()
                },
                "checkpoint_stalled",
            ),
            (
                HealthFacts {
                    ended: Some(MonitorState::Quarantined),
                    stall: Some(Stall::Checkpoint),
                    ..up
                },
                "quarantined",
            ),
            (
                HealthFacts {
                    ended: Some(MonitorState::Stopped),
                    ..up
                },
                "stopped",
            ),
        ];
        for (facts, label) in cases {
            assert_eq!(facts.status_label(), label, "{facts:?}");
        }
    }

    #[test]
    fn losing_ownership_drops_the_held_token_for_good() {
        let mut c = Condition::default();
        c.hold_ownership();
        assert_eq!(c.ownership(), Ownership::Held);
        c.exit(&ExitReason::OwnershipLost {
            detail: "successor committed".into(),
        });
        c.hold_ownership();
        assert_eq!(c.ownership(), Ownership::Lost);
        assert_eq!(c.state(), MonitorState::OwnershipLost);
        assert!(!c.connected());
    }
}

#[cfg(test)]
mod properties {
    use proptest::prelude::*;

    use super::*;

    #[derive(Debug, Clone)]
    enum Report {
        Connect,
        Disconnect,
        Stall,
        ClearStall,
        Exit(ExitReason),
        HoldOwnership,
    }

    fn report() -> impl Strategy<Value = Report> {
        prop_oneof![
            Just(Report::Connect),
            Just(Report::Disconnect),
            Just(Report::Stall),
            Just(Report::ClearStall),
            prop_oneof![
                Just(ExitReason::StartupFailed {
                    reason: "bad key".into()
                }),
                Just(ExitReason::OwnershipLost {
                    detail: "successor".into()
                }),
                Just(ExitReason::Quarantined {
                    detail: "uncertain".into()
                }),
                Just(ExitReason::Stopped),
                Just(ExitReason::Failed {
                    error: "db down".into()
                }),
            ]
            .prop_map(Report::Exit),
            Just(Report::HoldOwnership),
        ]
    }

    fn apply(c: &mut Condition, r: &Report) {
        match r {
            Report::Connect => c.connect(),
            Report::Disconnect => c.disconnect("down"),
            Report::Stall => c.stall(Stall::Input),
            Report::ClearStall => c.clear_stall(),
            Report::Exit(e) => c.exit(e),
            Report::HoldOwnership => c.hold_ownership(),
        }
    }

    fn facts() -> impl Strategy<Value = HealthFacts> {
        (
            // The states an exit leaves (`MonitorState::from(&ExitReason)`).
            proptest::option::of(proptest::sample::select(vec![
                MonitorState::StartupFailed,
                MonitorState::OwnershipLost,
                MonitorState::Quarantined,
                MonitorState::Stopped,
                MonitorState::Failed,
            ])),
            proptest::option::of(prop_oneof![Just(Stall::Input), Just(Stall::Checkpoint)]),
            any::<(bool, bool, bool)>(),
        )
            .prop_map(
                |(ended, stall, (connected, was_connected, no_data))| HealthFacts {
                    ended,
                    stall,
                    connected,
                    was_connected,
                    no_data,
                },
            )
    }

    proptest! {
        /// The status table and the board show one state: the table's
        /// label is the board's, but for `running` (connected) and
        /// `checkpoint_stalled` (a stalled state whose stall is checkpoints).
        #[test]
        fn the_status_label_is_the_boards_state_under_the_tables_names(f in facts()) {
            let expected = match f.state() {
                MonitorState::Connected => "running",
                MonitorState::Stalled if f.stall == Some(Stall::Checkpoint) => "checkpoint_stalled",
                state => state.as_str(),
            };
            prop_assert_eq!(f.status_label(), expected);
            prop_assert_eq!(f.stalled().is_some(), f.state() == MonitorState::Stalled);
        }
    }

    proptest! {
        #[test]
        fn once_exited_a_monitor_keeps_its_first_exit_and_is_never_ready(
            reports in proptest::collection::vec(report(), 0..40),
        ) {
            let mut c = Condition::default();
            let mut first_exit: Option<ExitReason> = None;
            for r in &reports {
                apply(&mut c, r);
                if let Report::Exit(e) = r {
                    first_exit.get_or_insert_with(|| e.clone());
                }
                prop_assert_eq!(c.is_ready(), c.state() == MonitorState::Connected);
                if let Some(exit) = &first_exit {
                    prop_assert_eq!(c.state(), MonitorState::from(exit));
                    prop_assert_eq!(c.state().is_terminal(), exit.is_terminal());
                    prop_assert!(!c.is_ready());
                }
                if c.is_ready() {
                    prop_assert!(c.connected());
                    prop_assert_eq!(c.detail(), "");
                }
                if c.ownership() == Ownership::Lost {
                    let lost = |r: &Report| matches!(r, Report::Exit(ExitReason::OwnershipLost { .. }));
                    prop_assert!(reports.iter().any(lost));
                }
            }
        }
    }
}
