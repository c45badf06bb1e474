//! `radar detect`: the offline backtest, through the binary.

use std::{fmt::Write as _, process::Command};

use radar_testkit::monitor::MonitorFile;

/// Two readings `a` and `b` on `t/a` and `t/b`, a day of maximum age (the
/// CSV's source times are old), 200 training and 100 calibration frames.
fn monitor_file() -> String {
    MonitorFile::new("two-sensors")
        .readings_under("t", &["a", "b"])
        .max_age_ms(86_400_000)
        .future_tolerance_ms(1000)
        .detector(200, 100)
        .alarm(3, 5, 5)
        .to_toml()
}

/// A deterministic pseudo-random stream with a large step in `b` at row 500.
fn csv() -> String {
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut noise = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % 10_000) as f64 / 10_000.0 - 0.5
    };
    let mut out = String::from("datetime;a;b;label\n");
    for i in 0..700 {
        let step = if i >= 500 { 25.0 } else { 0.0 };
        let a = noise();
        let b = 5.0 + a * 0.5 + noise() * 0.2 + step;
        let (m, s) = (i / 60, i % 60);
        writeln!(
            out,
            "2026-01-01 00:{m:02}:{s:02};{a:.5};{b:.5};{}",
            u8::from(i >= 500)
        )
        .unwrap();
    }
    out
}

#[test]
fn detect_prints_one_json_object_per_frame_and_alarms_on_a_step() {
    let dir = tempfile::tempdir().unwrap();
    let monitor = dir.path().join("m.toml");
    let data = dir.path().join("d.csv");
    std::fs::write(&monitor, monitor_file()).unwrap();
    std::fs::write(&data, csv()).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_radar"))
        .args(["detect", "--config"])
        .arg(&monitor)
        .arg("--csv")
        .arg(&data)
        .args(["--delimiter", ";", "--json"])
        .env("RADAR_CONFIG_FILE", "/dev/null")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<serde_json::Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 700, "one object per frame");
    for key in ["ts", "phase", "score", "threshold", "flagged", "alarm_open"] {
        assert!(rows[0].get(key).is_some(), "missing {key}");
    }
    assert!(rows[0]["score"].is_null(), "no score before monitoring");
    assert_eq!(rows[650]["phase"], "monitoring");
    let before: usize = rows[300..500]
        .iter()
        .filter(|r| r["alarm_open"] == true)
        .count();
    let after: usize = rows[510..700]
        .iter()
        .filter(|r| r["alarm_open"] == true)
        .count();
    assert!(before <= 20, "{before} alarm frames before the step");
    assert!(after >= 180, "only {after} alarm frames after the step");
}

#[test]
fn detect_names_a_missing_column() {
    let dir = tempfile::tempdir().unwrap();
    let monitor = dir.path().join("m.toml");
    let data = dir.path().join("d.csv");
    std::fs::write(&monitor, monitor_file()).unwrap();
    std::fs::write(&data, "datetime;a\n2026-01-01 00:00:00;1\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_radar"))
        .args(["detect", "--config"])
        .arg(&monitor)
        .arg("--csv")
        .arg(&data)
        .args(["--delimiter", ";"])
        .env("RADAR_CONFIG_FILE", "/dev/null")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("\"b\""));
}
