//! The listener's endpoints, against a real SDK meter provider and the
//! Prometheus registry it fills.

use std::{
    net::{TcpListener, TcpStream},
    time::Duration,
};

use actix_web::{App, body::to_bytes, http::StatusCode, test};
use chrono::{TimeDelta, Utc};
use opentelemetry::metrics::MeterProvider;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use prometheus::Registry;
use radar::{
    coverage::GapCause,
    mqtt::ConnectionEvent,
    runtime::{ExitReason, Trigger},
    telemetry::{
        CheckpointFailure, DetectorPhase, METER_NAME, Metric, ModelOperation, MonitorTelemetry,
        RejectReason, Telemetry, events::*, names::Kind,
    },
};
use radar_testkit::{exposition::samples, http::http_get};
use uuid::Uuid;

use super::{Shared, exposition, routes, serve};

const PUMP: Uuid = Uuid::from_u128(0x0a11ce);

struct Fixture {
    // Dropping the provider would stop collection.
    _provider: SdkMeterProvider,
    registry: Registry,
    telemetry: Telemetry,
}

fn fixture() -> Fixture {
    let (provider, registry) =
        exposition::build_meter_provider("test-worker", exposition::OtlpPush::Off).unwrap();
    let telemetry = Telemetry::new(&provider.meter(METER_NAME));
    Fixture {
        _provider: provider,
        registry,
        telemetry,
    }
}

impl Fixture {
    fn shared(&self) -> Shared {
        Shared {
            registry: self.registry.clone(),
            board: self.telemetry.board().clone(),
        }
    }

    async fn get(&self, path: &str) -> (StatusCode, String) {
        let app = test::init_service(App::new().configure(routes(self.shared()))).await;
        let res = test::call_service(&app, test::TestRequest::get().uri(path).to_request()).await;
        let status = res.status();
        let body = to_bytes(res.into_body()).await.unwrap();
        (status, String::from_utf8(body.to_vec()).unwrap())
    }
}

/// The value of the one sample named `name` whose labels include `labels`
/// (the testkit's parser; a second match fails the test).
fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let mut found = samples(text).into_iter().filter(|s| {
        s.name == name
            && labels
                .iter()
                .all(|(k, v)| s.labels.get(*k).is_some_and(|have| have == v))
    });
    let first = found.next().map(|s| s.value);
    assert!(
        found.next().is_none(),
        "{name} {labels:?} matches several series"
    );
    first
}

fn pump(f: &Fixture) -> MonitorTelemetry {
    f.telemetry.monitor(PUMP, "pump")
}

/// A known sequence of events touching every metric.
fn record_a_known_history(m: &MonitorTelemetry) {
    let saved_at = Utc::now() - TimeDelta::seconds(120);
    m.set_last_accepted(vec![("flow".to_string(), Some(saved_at))]);
    m.emit(SnapshotRestored {
        restored_processed: 5000,
        saved_at,
        partial_frames_cleared: 2,
    });
    m.emit(DetectorPhaseChanged {
        phase: DetectorPhase::Monitoring,
    });
    m.set_queue_capacity(1024);
    m.set_queue_depth(3);
    m.set_held_values(2);
    for _ in 0..7 {
        m.emit(ObservationsReceived { count: 1 });
    }
    m.emit(ObservationsAccepted { count: 4 });
    m.emit(ObservationsRejected {
        reason: RejectReason::Stale,
        count: 2,
    });
    m.emit(ObservationsRejected {
        reason: RejectReason::NotJson,
        count: 1,
    });
    m.emit(FramesEmitted { count: 3 });
    m.emit(PossibleGapMeasured {
        gap: Duration::from_secs(125),
    });
    for (score, flagged) in [(0.5, false), (0.9, false), (7.0, true)] {
        m.emit(FrameScored { score, flagged });
    }
    m.emit(AlarmOpened);
    m.emit(AlarmClosed);
    m.emit(ModelOperationFinished {
        operation: ModelOperation::Score,
        duration: Duration::from_micros(300),
    });
    m.emit(CheckpointCommitted {
        trigger: Trigger::FrameInterval,
        duration: Duration::from_millis(20),
        bytes: 3000,
        saved_at: Utc::now(),
    });
    m.emit(CheckpointFailed {
        reason: CheckpointFailure::Timeout,
        error: "statement timeout",
    });
    m.emit(ConnectionChanged(&ConnectionEvent::Connected {
        at: Utc::now(),
        attempt: 1,
    }));
    m.emit(ConnectionChanged(&ConnectionEvent::Disconnected {
        at: Utc::now(),
        reason: "connection reset by peer".into(),
    }));
    m.emit(ConnectionChanged(&ConnectionEvent::Retrying {
        at: Utc::now(),
        next_attempt: 1,
        retry_in: Duration::from_secs(5),
        reason: "connection refused".into(),
    }));
    m.emit(ConnectionChanged(&ConnectionEvent::Retrying {
        at: Utc::now(),
        next_attempt: 2,
        retry_in: Duration::from_secs(10),
        reason: "connection refused".into(),
    }));
    m.emit(ConnectionChanged(&ConnectionEvent::Connected {
        at: Utc::now(),
        attempt: 1,
    }));
    m.emit(CoverageGapClosed {
        cause: GapCause::MqttOutage,
        duration: Duration::from_millis(15_500),
    });
}

#[actix_web::test]
async fn the_exposition_carries_the_recorded_values_under_prometheus_names() {
    let f = fixture();
    record_a_known_history(&pump(&f));
    let (status, text) = f.get("/metrics").await;
    assert_eq!(status, StatusCode::OK);
    let id = PUMP.to_string();
    let me = [("monitor_id", id.as_str())];
    let with = |k: &'static str, v: &'static str| {
        let mut l = me.to_vec();
        l.push((k, v));
        l
    };
    let at = |name: &str, labels: &[(&str, &str)]| {
        sample(&text, name, labels).unwrap_or_else(|| panic!("no {name} {labels:?} in\n{text}"))
    };
    // The name is on the info series only.
    assert_eq!(at("radar_monitor_info", &with("monitor_name", "pump")), 1.0);
    assert!(
        text.lines()
            .filter(|l| l.contains("monitor_name="))
            .all(|l| l.starts_with("radar_monitor_info{")),
        "monitor_name outside radar_monitor_info:\n{text}"
    );
    assert_eq!(at("radar_observations_received_total", &me), 7.0);
    assert_eq!(at("radar_observations_accepted_total", &me), 4.0);
    // Rejections and checkpoint failures: the monitor's total, and the
    // worker's breakdown by reason.
    assert_eq!(at("radar_observations_rejected_total", &me), 3.0);
    let by_reason = "radar_observations_rejected_by_reason_total";
    assert_eq!(at(by_reason, &[("reason", "stale")]), 2.0);
    assert_eq!(at(by_reason, &[("reason", "not_json")]), 1.0);
    assert_eq!(at(by_reason, &[("reason", "too_old")]), 0.0);
    assert_eq!(
        sample(&text, by_reason, &with("reason", "stale")),
        None,
        "no reason per monitor"
    );
    assert_eq!(at("radar_frames_emitted_total", &me), 3.0);
    assert_eq!(at("radar_frames_flagged_total", &me), 1.0);
    // Distributions are the worker's, over all its monitors.
    assert_eq!(at("radar_frame_score_count", &[]), 3.0);
    assert!((at("radar_frame_score_sum", &[]) - 8.4).abs() < 1e-9);
    assert_eq!(at("radar_frame_score_bucket", &[("le", "1")]), 2.0);
    assert_eq!(at("radar_alarms_opened_total", &me), 1.0);
    assert_eq!(at("radar_alarms_closed_total", &me), 1.0);
    assert_eq!(at("radar_ingress_queue_depth", &me), 3.0);
    assert_eq!(at("radar_partial_frame_values", &me), 2.0);
    // The capacity is a worker setting: one line without a monitor.
    assert_eq!(at("radar_ingress_queue_capacity", &[]), 1024.0);
    assert_eq!(sample(&text, "radar_ingress_queue_capacity", &me), None);
    assert_eq!(
        at(
            "radar_model_operation_duration_seconds_count",
            &[("operation", "score")]
        ),
        1.0
    );
    // Commits and gaps: the monitor's total, the worker's breakdown.
    assert_eq!(at("radar_checkpoint_commits_total", &me), 1.0);
    let by_trigger = "radar_checkpoint_commits_by_trigger_total";
    assert_eq!(at(by_trigger, &[("trigger", "frame_interval")]), 1.0);
    assert_eq!(at(by_trigger, &[("trigger", "max_interval")]), 0.0);
    assert_eq!(at("radar_checkpoint_failures_total", &me), 1.0);
    let failures = "radar_checkpoint_failures_by_reason_total";
    assert_eq!(at(failures, &[("reason", "timeout")]), 1.0);
    assert_eq!(at(failures, &[("reason", "database")]), 0.0);
    assert!((at("radar_checkpoint_duration_seconds_sum", &[]) - 0.02).abs() < 1e-9);
    assert_eq!(at("radar_checkpoint_size_bytes_sum", &[]), 3000.0);
    let age = at("radar_snapshot_age_seconds", &me);
    assert!((0.0..60.0).contains(&age), "snapshot age {age}");
    assert_eq!(at("radar_monitor_state", &with("state", "connected")), 1.0);
    assert_eq!(
        sample(&text, "radar_monitor_state", &with("state", "stalled")),
        None
    );
    assert_eq!(at("radar_mqtt_connected", &me), 1.0);
    assert_eq!(at("radar_mqtt_reconnect_attempts_total", &me), 2.0);
    assert_eq!(at("radar_coverage_gap_duration_seconds_total", &me), 15.5);
    let by_cause = "radar_coverage_gap_duration_by_cause_seconds_total";
    assert_eq!(at(by_cause, &[("cause", "mqtt_outage")]), 15.5);
    assert_eq!(at(by_cause, &[("cause", "no_data")]), 0.0);
    assert_eq!(at("radar_recovery_restored_processed", &me), 5000.0);
    assert_eq!(
        at("radar_recovery_possible_gap_duration_seconds", &me),
        125.0
    );
    assert_eq!(at("radar_recovery_partial_frames_cleared", &me), 2.0);
    assert_eq!(at("radar_recovery_stale_rejected_total", &me), 2.0);
    assert_eq!(
        at("radar_detector_phase", &with("phase", "monitoring")),
        1.0
    );
    assert_eq!(
        sample(&text, "radar_detector_phase", &with("phase", "training")),
        None
    );
}

#[actix_web::test]
async fn every_metric_appears_under_the_name_and_type_the_names_module_predicts() {
    let f = fixture();
    record_a_known_history(&pump(&f));
    let (_, text) = f.get("/metrics").await;
    for m in Metric::ALL {
        let kind = match m.kind() {
            Kind::Counter => "counter",
            Kind::Histogram => "histogram",
            Kind::Gauge => "gauge",
        };
        let line = format!("# TYPE {} {kind}", m.prometheus_name());
        assert!(text.contains(&line), "missing `{line}` in\n{text}");
    }
}

#[actix_web::test]
async fn distributions_are_per_worker_and_no_line_carries_scope_labels() {
    let f = fixture();
    let second = Uuid::from_u128(0x0b0b);
    record_a_known_history(&pump(&f));
    record_a_known_history(&f.telemetry.monitor(second, "second"));
    let (_, text) = f.get("/metrics").await;
    for family in [
        "radar_frame_score",
        "radar_model_operation_duration_seconds",
        "radar_checkpoint_duration_seconds",
        "radar_checkpoint_size_bytes",
    ] {
        let lines: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with(&format!("{family}_")))
            .collect();
        assert!(!lines.is_empty(), "no {family} series in\n{text}");
        assert!(
            lines.iter().all(|l| !l.contains("monitor_id")),
            "{family} is split per monitor: {lines:?}"
        );
    }
    // Both monitors' frames land in the one score distribution.
    assert_eq!(sample(&text, "radar_frame_score_count", &[]), Some(6.0));
    assert!(!text.contains("otel_scope_"), "scope labels in\n{text}");
    // What stays per monitor: a bounded number of lines each (its counts,
    // state and gauges, no breakdown; 23 after this history).
    let id = PUMP.to_string();
    let per_monitor = text
        .lines()
        .filter(|l| l.contains(&format!("monitor_id=\"{id}\"")))
        .count();
    assert!(
        per_monitor <= 23,
        "{per_monitor} lines for one monitor:\n{}",
        text.lines()
            .filter(|l| l.contains(&id))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[actix_web::test]
async fn gauges_of_a_monitor_disappear_when_it_leaves_the_board() {
    let f = fixture();
    let m = pump(&f);
    m.emit(ConnectionChanged(&ConnectionEvent::Connected {
        at: Utc::now(),
        attempt: 1,
    }));
    let id = PUMP.to_string();
    let me = [("monitor_id", id.as_str())];
    let (_, text) = f.get("/metrics").await;
    assert_eq!(sample(&text, "radar_mqtt_connected", &me), Some(1.0));
    f.telemetry.remove_monitor(PUMP);
    let (_, text) = f.get("/metrics").await;
    assert_eq!(sample(&text, "radar_mqtt_connected", &me), None);
}

/// `promtool check metrics` reads the exposition on stdin. The Debian
/// package `prometheus` provides it; CI installs it, so its absence fails.
#[actix_web::test]
async fn the_exposition_passes_promtool_check_metrics() {
    let f = fixture();
    record_a_known_history(&pump(&f));
    let (_, text) = f.get("/metrics").await;
    radar_testkit::exposition::promtool_check(&text);
}

#[actix_web::test]
async fn healthz_answers_ok() {
    let f = fixture();
    assert_eq!(f.get("/healthz").await, (StatusCode::OK, "ok\n".into()));
}

#[actix_web::test]
async fn readyz_is_ready_with_no_admitted_monitor() {
    let (status, body) = fixture().get("/readyz").await;
    assert_eq!(status, StatusCode::OK);
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(json["ready"], true);
    assert_eq!(json["monitors"], 0);
}

#[actix_web::test]
async fn readyz_lists_a_disconnected_monitor_and_recovers_after_reconnect() {
    let f = fixture();
    let m = pump(&f);
    let other = f.telemetry.monitor(Uuid::from_u128(2), "fan");
    m.emit(ConnectionChanged(&ConnectionEvent::Connected {
        at: Utc::now(),
        attempt: 1,
    }));
    other.emit(ConnectionChanged(&ConnectionEvent::Connected {
        at: Utc::now(),
        attempt: 1,
    }));
    assert_eq!(f.get("/readyz").await.0, StatusCode::OK);

    m.emit(ConnectionChanged(&ConnectionEvent::Disconnected {
        at: Utc::now(),
        reason: "connection refused".into(),
    }));
    let (status, body) = f.get("/readyz").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(json["ready"], false);
    assert_eq!(json["monitors"], 2);
    assert_eq!(
        json["not_ready"],
        serde_json::json!([{
            "monitor_id": PUMP.to_string(),
            "monitor_name": "pump",
            "state": "disconnected",
            "connected": false,
            "detail": "connection refused",
        }])
    );

    m.emit(ConnectionChanged(&ConnectionEvent::Connected {
        at: Utc::now(),
        attempt: 1,
    }));
    let (status, body) = f.get("/readyz").await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

#[actix_web::test]
async fn readyz_reports_stalled_and_failed_monitors_by_state() {
    let f = fixture();
    let stalled = f.telemetry.monitor(Uuid::from_u128(1), "stalled");
    let failed = f.telemetry.monitor(Uuid::from_u128(2), "failed");
    stalled.emit(ConnectionChanged(&ConnectionEvent::Connected {
        at: Utc::now(),
        attempt: 1,
    }));
    stalled.emit(MonitorStalled {
        stall: radar::telemetry::Stall::Checkpoint,
    });
    failed.emit(MonitorExited {
        reason: &ExitReason::StartupFailed {
            reason: "snapshot signature does not verify: wrong key".into(),
        },
    });
    let (status, body) = f.get("/readyz").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    let states: Vec<&str> = json["not_ready"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["state"].as_str().unwrap())
        .collect();
    assert_eq!(states, ["stalled", "startup_failed"]);
}

#[actix_web::test]
async fn the_listener_serves_the_three_endpoints_over_tcp_and_stops_on_request() {
    let f = fixture();
    let m = pump(&f);
    m.emit(ObservationsReceived { count: 7 });
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let server = serve(listener, f.registry.clone(), f.telemetry.board().clone()).unwrap();
    let handle = server.handle();
    let running = actix_web::rt::spawn(server);

    let get = |path: &'static str| {
        actix_web::rt::task::spawn_blocking(move || {
            http_get(addr.port(), path).unwrap_or_else(|| panic!("no answer to GET {path}"))
        })
    };
    assert_eq!(get("/healthz").await.unwrap(), (200, "ok\n".into()));
    assert_eq!(get("/readyz").await.unwrap().0, 503);
    let (status, text) = get("/metrics").await.unwrap();
    assert_eq!(status, 200);
    let id = PUMP.to_string();
    assert_eq!(
        sample(
            &text,
            "radar_observations_received_total",
            &[("monitor_id", &id)]
        ),
        Some(7.0)
    );
    assert_eq!(get("/nowhere").await.unwrap().0, 404);

    handle.stop(true).await;
    running.await.unwrap().unwrap();
    assert!(
        TcpStream::connect(addr).is_err(),
        "still listening after stop"
    );
}
