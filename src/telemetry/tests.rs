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
    labels::{CheckpointTrigger, DetectorPhase, RejectReason},
    *,
};

fn telemetry() -> Telemetry {
    Telemetry::new(&NoopMeterProvider::new().meter(METER_NAME))
}

#[test]
fn a_monitor_is_ready_after_connecting_and_unready_after_dropping() {
    let t = telemetry();
    let m = t.monitor(Uuid::from_u128(1), "pump");
    assert!(!t.board().readiness().ready);
    m.emit(MqttConnected);
    assert!(t.board().readiness().ready);
    m.emit(MqttDisconnected {
        detail: "connection reset",
    });
    let r = t.board().readiness();
    assert!(!r.ready);
    assert_eq!(r.not_ready[0].state, MonitorState::Disconnected);
    assert_eq!(r.not_ready[0].detail, "connection reset");
    m.emit(MqttConnected);
    assert!(t.board().readiness().ready);
}

#[test]
fn terminal_events_keep_the_worker_unready_until_the_monitor_is_removed() {
    let t = telemetry();
    let m = t.monitor(Uuid::from_u128(1), "pump");
    m.emit(MqttConnected);
    m.emit(OwnershipLost {
        detail: "a successor snapshot was committed",
    });
    m.emit(MqttConnected);
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
    assert_eq!(view.stale_rejected, 3);
    assert_eq!((view.queue_depth, view.queue_capacity), (17, Some(1024)));

    let committed_at = saved_at + TimeDelta::seconds(60);
    m.emit(CheckpointCommitted {
        trigger: CheckpointTrigger::MaxInterval,
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
    m.emit(MqttConnected);
    m.emit(MonitorStalled {
        detail: "no checkpoint committed for 30 s",
    });
    let r = t.board().readiness();
    assert_eq!(r.not_ready[0].state, MonitorState::Stalled);
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
