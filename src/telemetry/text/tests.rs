use std::{sync::Arc, time::Duration};

use proptest::prelude::*;
use radar_testkit::exposition::{parse_line, sample, samples};
use uuid::Uuid;

use super::*;
use crate::telemetry::{MonitorState, Recovery, counts::CountValues, labels::DetectorPhase};

fn view(n: u128, name: &str) -> MonitorView {
    let id = Uuid::from_u128(n);
    MonitorView {
        id,
        name: name.to_string(),
        id_label: Arc::from(id.to_string()),
        state: MonitorState::Connected,
        connected: true,
        detail: String::new(),
        ownership_held: true,
        phase: Some(DetectorPhase::Training),
        queue_depth: 0,
        held_values: 0,
        queue_capacity: Some(1024),
        snapshot_age: Some(Duration::from_millis(1500)),
        recovery: None,
        reading_ages: vec![("flow".into(), None), ("rpm".into(), None)],
        counts: CountValues::default(),
        gap_seconds: 0.0,
    }
}

fn render(views: &[MonitorView]) -> String {
    let mut out = String::new();
    write_monitors(views, &mut out);
    out
}

#[test]
fn an_idle_monitor_costs_eleven_lines() {
    let text = render(&[view(1, "pump")]);
    let lines = samples(&text);
    // 11 per monitor plus the worker's one queue-capacity line.
    assert_eq!(lines.len(), 12, "{text}");
    assert_eq!(
        lines
            .iter()
            .filter(|s| s.labels.contains_key("monitor_id"))
            .count(),
        11,
        "{text}"
    );
    let me = [("monitor_id", "00000000-0000-0000-0000-000000000001")];
    assert_eq!(
        sample(&text, "radar_monitor_info", &[("monitor_name", "pump")]),
        Some(1.0)
    );
    assert_eq!(
        sample(&text, "radar_monitor_state", &[("state", "connected")]),
        Some(1.0)
    );
    assert_eq!(
        sample(&text, "radar_detector_phase", &[("phase", "training")]),
        Some(1.0)
    );
    assert_eq!(
        sample(&text, "radar_observations_received_total", &me),
        Some(0.0)
    );
    assert_eq!(
        sample(&text, "radar_checkpoint_commits_total", &me),
        Some(0.0)
    );
    assert_eq!(sample(&text, "radar_snapshot_age_seconds", &me), Some(1.5));
    assert_eq!(sample(&text, "radar_alarms_opened_total", &me), None);
    assert_eq!(
        sample(&text, "radar_ingress_queue_capacity", &[]),
        Some(1024.0)
    );
}

#[test]
fn counts_that_are_zero_appear_only_once_they_count() {
    let mut v = view(1, "pump");
    v.counts = CountValues::default()
        .with(Count::AlarmsOpened, 2)
        .with(Count::Received, 7);
    v.queue_depth = 3;
    v.held_values = 4;
    v.gap_seconds = 2.5;
    v.reading_ages[1].1 = Some(Duration::from_secs(3));
    v.recovery = Some(Recovery {
        restored_processed: 10,
        partial_frames_cleared: 1,
        possible_gap: Some(Duration::from_secs(9)),
    });
    let text = render(&[v]);
    let me = ("monitor_id", "00000000-0000-0000-0000-000000000001");
    assert_eq!(sample(&text, "radar_alarms_opened_total", &[me]), Some(2.0));
    assert_eq!(sample(&text, "radar_alarms_closed_total", &[me]), None);
    assert_eq!(
        sample(&text, "radar_observations_received_total", &[me]),
        Some(7.0)
    );
    assert_eq!(sample(&text, "radar_ingress_queue_depth", &[me]), Some(3.0));
    assert_eq!(
        sample(&text, "radar_partial_frame_values", &[me]),
        Some(4.0)
    );
    assert_eq!(
        sample(&text, "radar_coverage_gap_duration_seconds_total", &[me]),
        Some(2.5)
    );
    assert_eq!(
        sample(
            &text,
            "radar_reading_age_seconds",
            &[me, ("reading", "rpm")]
        ),
        Some(3.0)
    );
    assert_eq!(
        sample(
            &text,
            "radar_reading_age_seconds",
            &[me, ("reading", "flow")]
        ),
        None
    );
    assert_eq!(
        sample(&text, "radar_recovery_restored_processed", &[me]),
        Some(10.0)
    );
    assert_eq!(
        sample(&text, "radar_recovery_possible_gap_duration_seconds", &[me]),
        Some(9.0)
    );
}

#[test]
fn each_family_has_one_help_and_type_before_all_its_lines() {
    let text = render(&[view(1, "pump"), view(2, "fan"), view(3, "fan")]);
    let mut seen = std::collections::BTreeSet::new();
    let mut current = String::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let name = rest.split(' ').next().unwrap().to_string();
            assert!(seen.insert(name.clone()), "{name} declared twice");
            current = name;
        } else if let Some(s) = parse_line(line) {
            assert_eq!(s.name, current, "{line} outside its family");
        }
    }
    assert_eq!(
        text.matches("# HELP radar_monitor_state ").count(),
        1,
        "{text}"
    );
    assert_eq!(samples(&text).len(), 3 * 11 + 1);
}

#[test]
fn with_no_monitor_every_family_is_declared_and_has_no_sample() {
    let text = render(&[]);
    assert!(samples(&text).is_empty(), "{text}");
    for m in crate::telemetry::Metric::ALL
        .iter()
        .filter(|m| m.per_monitor())
    {
        let line = format!("# TYPE {} ", m.prometheus_name());
        assert!(text.contains(&line), "{line} missing in\n{text}");
    }
}

#[test]
fn float_values_use_the_prometheus_spellings() {
    assert_eq!(Float(f64::INFINITY).to_string(), "+Inf");
    assert_eq!(Float(f64::NEG_INFINITY).to_string(), "-Inf");
    assert_eq!(Float(f64::NAN).to_string(), "NaN");
    assert_eq!(Float(0.25).to_string(), "0.25");
}

#[test]
fn the_exposition_passes_promtool_when_it_is_installed() {
    let which = std::process::Command::new("promtool")
        .arg("--version")
        .output();
    if which.is_err() {
        return;
    }
    let mut v = view(1, "a \"quoted\"\\name\nwith a newline");
    v.counts = CountValues::default().with(Count::CheckpointFailures, 1);
    radar_testkit::exposition::promtool_check(&render(&[v, view(2, "fan")]));
}

proptest! {
    #[test]
    fn any_monitor_or_reading_name_reads_back_unchanged(
        name in "\\PC{0,16}|[\\\\\"\n a-z]{0,16}",
        reading in "[\\\\\"\n a-z]{1,12}",
    ) {
        let mut v = view(1, &name);
        v.reading_ages = vec![(reading.clone(), Some(Duration::from_secs(1)))];
        let text = render(&[v]);
        let info = samples(&text)
            .into_iter()
            .find(|s| s.name == "radar_monitor_info")
            .expect("an info line");
        prop_assert_eq!(info.labels.get("monitor_name"), Some(&name));
        let age = samples(&text)
            .into_iter()
            .find(|s| s.name == "radar_reading_age_seconds")
            .expect("a reading age line");
        prop_assert_eq!(age.labels.get("reading"), Some(&reading));
        // Escaping keeps every sample on one line.
        prop_assert_eq!(text.lines().filter(|l| !l.starts_with('#')).count(), 13);
    }
}
