//! Events as the board sees them. Counter values need an SDK reader and are
//! checked in the worker's exposition tests; here the no-op meter shows the
//! API works without any provider installed.

use std::time::Duration;

use chrono::{TimeDelta, Utc};
use opentelemetry::metrics::MeterProvider;
use opentelemetry::metrics::noop::NoopMeterProvider;
use uuid::Uuid;

use super::{
    events::*,
    labels::{DetectorPhase, RejectReason},
    *,
};
use crate::mqtt::ConnectionEvent;
use crate::runtime::{ExitReason, Trigger};

/// What the MQTT reconnect owner reports when every subscription is acknowledged.
fn connected() -> ConnectionEvent {
    ConnectionEvent::Connected {
        at: Utc::now(),
        attempt: 1,
    }
}

/// What the MQTT reconnect owner reports when an established connection drops.
fn disconnected(reason: &str) -> ConnectionEvent {
    ConnectionEvent::Disconnected {
        at: Utc::now(),
        reason: reason.to_string(),
    }
}

fn telemetry() -> Telemetry {
    Telemetry::new(&NoopMeterProvider::new().meter(METER_NAME))
}

#[test]
fn a_monitor_is_ready_after_connecting_and_unready_after_dropping() {
    let t = telemetry();
    let m = t.monitor(Uuid::from_u128(1), "pump");
    assert!(!t.board().readiness().ready);
    m.emit(ConnectionChanged(&connected()));
    assert!(t.board().readiness().ready);
    m.emit(ConnectionChanged(&disconnected("connection reset")));
    let r = t.board().readiness();
    assert!(!r.ready);
    assert_eq!(r.not_ready[0].state, MonitorState::Disconnected);
    assert_eq!(r.not_ready[0].detail, "connection reset");
    m.emit(ConnectionChanged(&connected()));
    assert!(t.board().readiness().ready);
}

#[test]
fn readyz_counts_every_unready_monitor_and_names_the_first_hundred_by_id() {
    let t = telemetry();
    let monitors: Vec<_> = (0..NOT_READY_LISTED as u128 + 5)
        .map(|i| t.monitor(Uuid::from_u128(1000 - i), &format!("pump-{i}")))
        .collect();
    let r = t.board().readiness();
    assert!(!r.ready);
    assert_eq!(r.monitors, NOT_READY_LISTED + 5);
    assert_eq!(r.not_ready_count, NOT_READY_LISTED + 5);
    assert_eq!(r.not_ready.len(), NOT_READY_LISTED);
    let ids: Vec<Uuid> = r.not_ready.iter().map(|n| n.monitor_id).collect();
    let mut sorted = ids.clone();
    sorted.sort();
    assert_eq!(ids, sorted, "named by id");
    assert_eq!(ids[0], Uuid::from_u128(1000 - NOT_READY_LISTED as u128 - 4));
    for m in &monitors[1..] {
        m.emit(ConnectionChanged(&connected()));
    }
    let r = t.board().readiness();
    assert!(!r.ready);
    assert_eq!(r.not_ready_count, 1);
    assert_eq!(r.not_ready[0].monitor_id, Uuid::from_u128(1000));
    assert_eq!(r.not_ready[0].monitor_name, "pump-0");
    assert_eq!(r.not_ready[0].state, MonitorState::Starting);
    monitors[0].emit(ConnectionChanged(&connected()));
    let r = t.board().readiness();
    assert!(r.ready);
    assert_eq!((r.not_ready_count, r.not_ready.len()), (0, 0));
}

#[test]
fn terminal_events_keep_the_worker_unready_until_the_monitor_is_removed() {
    let t = telemetry();
    let m = t.monitor(Uuid::from_u128(1), "pump");
    m.emit(ConnectionChanged(&connected()));
    m.emit(MonitorExited {
        reason: &ExitReason::OwnershipLost {
            detail: "a successor snapshot was committed".into(),
        },
    });
    m.emit(ConnectionChanged(&connected()));
    let view = t.board().view(m.id(), Utc::now()).unwrap();
    assert_eq!(view.state, MonitorState::OwnershipLost);
    assert!(!view.ownership_held);
    assert!(!t.board().readiness().ready);
    assert!(t.remove_monitor(m.id()));
    assert!(t.board().readiness().ready);
}

#[test]
fn restore_commit_and_phase_events_fill_the_gauge_figures() {
    let t = telemetry();
    let m = t.monitor(Uuid::from_u128(3), "fan");
    let saved_at = Utc::now() - TimeDelta::seconds(90);
    m.emit(SnapshotRestored {
        restored_processed: 5000,
        saved_at,
        partial_frames_cleared: 2,
    });
    m.emit(DetectorPhaseChanged {
        phase: DetectorPhase::Monitoring,
    });
    m.emit(PossibleGapMeasured {
        gap: Duration::from_secs(95),
    });
    m.emit(ObservationsRejected {
        reason: RejectReason::Stale,
        count: 3,
    });
    m.emit(ObservationsRejected {
        reason: RejectReason::TooOld,
        count: 4,
    });
    m.set_queue_capacity(1024);
    m.set_queue_depth(17);
    let view = t
        .board()
        .view(m.id(), saved_at + TimeDelta::seconds(90))
        .unwrap();
    assert!(view.ownership_held);
    assert_eq!(view.phase, Some(DetectorPhase::Monitoring));
    assert_eq!(view.snapshot_age, Some(Duration::from_secs(90)));
    assert_eq!(
        view.recovery,
        Some(Recovery {
            restored_processed: 5000,
            partial_frames_cleared: 2,
            possible_gap: Some(Duration::from_secs(95)),
        })
    );
    assert_eq!(view.counts.get(counts::Count::StaleRejected), 3);
    assert_eq!((view.queue_depth, view.queue_capacity), (17, Some(1024)));

    let committed_at = saved_at + TimeDelta::seconds(60);
    m.emit(CheckpointCommitted {
        trigger: Trigger::MaxInterval,
        duration: Duration::from_millis(4),
        bytes: 4096,
        saved_at: committed_at,
    });
    let view = t
        .board()
        .view(m.id(), committed_at + TimeDelta::seconds(1))
        .unwrap();
    assert_eq!(view.snapshot_age, Some(Duration::from_secs(1)));
}

#[test]
fn a_stall_makes_a_connected_monitor_unready_until_cleared() {
    let t = telemetry();
    let m = t.monitor(Uuid::from_u128(4), "press");
    m.emit(ConnectionChanged(&connected()));
    m.emit(MonitorStalled {
        stall: Stall::Checkpoint,
    });
    let r = t.board().readiness();
    assert_eq!(r.not_ready[0].state, MonitorState::Stalled);
    assert_eq!(r.not_ready[0].detail, Stall::Checkpoint.detail());
    assert!(r.not_ready[0].connected);
    m.emit(MonitorStallCleared);
    assert!(t.board().readiness().ready);
}

#[test]
fn the_global_meter_works_before_any_provider_is_installed() {
    let t = Telemetry::global();
    let m = t.monitor(Uuid::from_u128(5), "idle");
    m.emit(ObservationsReceived { count: 1 });
    m.emit(FrameScored {
        score: f64::NAN,
        flagged: true,
    });
    assert_eq!(t.board().len(), 1);
}

#[test]
fn connection_events_of_the_reconnect_owner_drive_the_board() {
    use crate::mqtt::ConnectionEvent;

    let t = telemetry();
    let m = t.monitor(Uuid::from_u128(6), "mixer");
    let at = Utc::now();
    m.emit(ConnectionChanged(&ConnectionEvent::SubscriptionRefused {
        at,
        topic: "plant/mixer/speed".into(),
        required: true,
    }));
    let r = t.board().readiness();
    assert_eq!(r.not_ready[0].state, MonitorState::Starting);
    assert_eq!(
        r.not_ready[0].detail,
        "the broker refused the subscription to plant/mixer/speed"
    );
    m.emit(ConnectionChanged(&ConnectionEvent::Connected {
        at,
        attempt: 2,
    }));
    assert!(t.board().readiness().ready);
    m.emit(ConnectionChanged(&ConnectionEvent::Disconnected {
        at,
        reason: "keep-alive timeout".into(),
    }));
    m.emit(ConnectionChanged(&ConnectionEvent::Retrying {
        at,
        next_attempt: 2,
        retry_in: Duration::from_secs(5),
        reason: "connection refused".into(),
    }));
    let r = t.board().readiness();
    assert_eq!(r.not_ready[0].state, MonitorState::Disconnected);
    assert_eq!(r.not_ready[0].detail, "connection refused");
}

#[test]
fn a_transient_failure_shows_as_failed_until_the_monitor_is_readmitted() {
    let t = telemetry();
    let m = t.monitor(Uuid::from_u128(8), "kiln");
    m.emit(ConnectionChanged(&connected()));
    m.emit(MonitorExited {
        reason: &ExitReason::Failed {
            error: "database unreachable".into(),
        },
    });
    let r = t.board().readiness();
    assert_eq!(r.not_ready[0].state, MonitorState::Failed);
    assert_eq!(r.not_ready[0].detail, "database unreachable");
    let again = t.monitor(Uuid::from_u128(8), "kiln");
    again.emit(ConnectionChanged(&connected()));
    assert!(t.board().readiness().ready);
}
