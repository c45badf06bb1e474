//! Replay against the aligner on every row, record JSON against serde_json,
//! and the timestamp forms.

use chrono::DateTime;

use super::{
    ReplayError, ReplayOptions, ReplayRecord,
    cells::{Timestamps, parse_timestamp, parse_timestamp_bytes},
    replay, replay_in_background,
};
use crate::{
    config::MonitorConfig,
    detector::{AlarmEvent, Phase},
};

const MONITOR: &str = r#"
name = "tiny"
[[readings]]
name = "a"
topic = "t/a"
[[readings]]
name = "b"
topic = "t/b"
[[readings]]
name = "c"
topic = "t/c"
required = false
[alignment]
freshness_ms = 5000
max_age_ms = 30000
future_tolerance_ms = 2000
max_skew_ms = 1000
[detector]
training_frames = 20
calibration_frames = 19
false_alarm_rate = 0.05
[detector.alarm]
open_k = 1
open_n = 1
close_m = 1
"#;

fn csv_text(rows: usize) -> String {
    let mut text = String::from("time;a;label;b\r\n");
    for i in 0..rows {
        let x = i as f64;
        let a = if i == rows - 1 { 50.0 } else { (x * 0.7).sin() };
        text.push_str(&format!(
            "{};{a};{};{}\r\n",
            1_700_000_000_000i64 + 1000 * i as i64,
            i % 2,
            (x * 1.3).cos()
        ));
    }
    text
}

fn options() -> ReplayOptions {
    ReplayOptions {
        delimiter: b';',
        time_column: "time".to_string(),
    }
}

#[test]
fn every_row_becomes_a_frame_through_training_calibration_and_monitoring() {
    let config = MonitorConfig::from_toml(MONITOR).unwrap();
    let text = csv_text(45);
    let records: Vec<ReplayRecord> = replay(&config, text.as_bytes(), &options())
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(records.len(), 45);
    assert_eq!(records[0].phase, Phase::Training);
    assert_eq!(records[19].phase, Phase::Calibrating);
    // The last calibration frame triggers the fit.
    assert_eq!(records[38].phase, Phase::Monitoring);
    assert!(records[38].score.is_none());
    assert!(records[39].score.is_some());
    let last = &records[44];
    assert!(last.flagged && last.alarm_open);
    assert_eq!(last.contributions.as_ref().map(Vec::len), Some(2));
    assert_eq!(last.row, 45);
}

#[test]
fn a_repeated_timestamp_is_stale_and_forms_no_frame() {
    let config = MonitorConfig::from_toml(MONITOR).unwrap();
    let text = "time;a;b\n1000;1;2\n1000;3;4\n2000;5;6\n";
    let rows: Vec<u64> = replay(&config, text.as_bytes(), &options())
        .unwrap()
        .map(|r| r.unwrap().row)
        .collect();
    assert_eq!(rows, vec![1, 3]);
}

#[test]
fn missing_columns_and_bad_cells_name_what_is_wrong() {
    let config = MonitorConfig::from_toml(MONITOR).unwrap();
    let err = replay(&config, "time;a\n1;2\n".as_bytes(), &options())
        .err()
        .unwrap();
    assert!(err.to_string().contains("\"b\""), "{err}");
    let mut bad = replay(&config, "time;a;b\n1000;x;2\n".as_bytes(), &options()).unwrap();
    let err = bad.next().unwrap().unwrap_err();
    assert!(err.to_string().contains("row 1, column \"a\""), "{err}");
    let err = replay(&config, "when;a;b\n".as_bytes(), &options())
        .err()
        .unwrap();
    assert!(err.to_string().contains("--time-column"), "{err}");
}

/// A CSV with everything the aligner must handle: empty and non-finite
/// cells, repeated and backward timestamps, rows of the optional
/// reading only, long gaps.
fn messy_csv(seed: u64, rows: usize) -> String {
    let mut state = seed;
    let mut next = move || {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1);
        (state >> 33) as u32
    };
    let mut text = String::from("time;a;label;b;c\n");
    let mut t: i64 = 1_700_000_000_000;
    for i in 0..rows {
        t += match next() % 20 {
            0 => 0,
            1 => -3000,
            2 => 60_000,
            3 => 500,
            _ => 1000,
        };
        let x = i as f64;
        let mut cell = |v: f64| match next() % 25 {
            0 => String::new(),
            1 => "NaN".to_string(),
            2 => "inf".to_string(),
            _ => v.to_string(),
        };
        let (a, b, c) = (cell((x * 0.7).sin()), cell((x * 1.3).cos()), cell(x));
        text.push_str(&format!("{t};{a};{};{b};{c}\n", i % 2));
    }
    text
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

    #[test]
    fn whole_rows_give_the_records_and_state_of_ingesting_every_value_alone(
        seed in proptest::prelude::any::<u64>(),
    ) {
        let config = MonitorConfig::from_toml(MONITOR).unwrap();
        let text = messy_csv(seed, 300);
        let run = |at_once: bool| {
            let mut replay = replay(&config, text.as_bytes(), &options()).unwrap();
            replay.frames.row_at_once = at_once;
            let records: Vec<ReplayRecord> =
                replay.by_ref().collect::<Result<_, _>>().unwrap();
            (records, replay.core().managed_state().unwrap())
        };
        let (at_once, alone) = (run(true), run(false));
        proptest::prop_assert_eq!(at_once, alone);
    }

    #[test]
    fn json_records_are_written_exactly_as_serde_json_writes_them(
        row in proptest::prelude::any::<u64>(),
        secs in -62_000_000_000i64..300_000_000_000,
        nanos in proptest::prop_oneof![proptest::strategy::Just(0u32), 0u32..2_000_000_000],
        score in proptest::option::of(proptest::num::f64::ANY),
        threshold in proptest::option::of(proptest::num::f64::ANY),
        flags in 0u8..4,
        contributions in proptest::option::of(proptest::collection::vec(proptest::num::f64::ANY, 0..4)),
        event in proptest::prelude::any::<bool>(),
    ) {
        let Some(ts) = DateTime::from_timestamp(secs, nanos) else { return Ok(()) };
        let record = ReplayRecord {
            row,
            ts,
            phase: Phase::Monitoring,
            score,
            threshold,
            p_value: score.map(|s| s / 7.0),
            flagged: flags & 1 == 1,
            alarm_open: flags & 2 == 2,
            alarm_event: event.then_some(AlarmEvent::Opened { seq: 3, ts, peak_score: 1.5 }),
            contributions,
        };
        let mut ours = Vec::new();
        record.write_json(&mut ours).unwrap();
        proptest::prop_assert_eq!(
            String::from_utf8(ours).unwrap(),
            serde_json::to_string(&record).unwrap()
        );
    }
}

/// A monitoring row's record with the given threshold and p-value (the
/// number cache's tests vary only those).
fn monitoring_record(row: usize, threshold: Option<f64>, p_value: Option<f64>) -> ReplayRecord {
    ReplayRecord {
        row: row as u64,
        ts: DateTime::from_timestamp(1_583_748_873, 0).unwrap(),
        phase: Phase::Monitoring,
        score: Some(0.75),
        threshold,
        p_value,
        flagged: false,
        alarm_open: false,
        alarm_event: None,
        contributions: None,
    }
}

#[test]
fn records_written_with_shared_numbers_are_written_as_serde_writes_each() {
    let mut numbers = super::JsonNumbers::default();
    let thresholds = [
        Some(1.5),
        Some(1.5),
        None,
        Some(2.25),
        Some(f64::NAN),
        Some(2.25),
        Some(1.5),
    ];
    for (row, threshold) in thresholds.into_iter().enumerate() {
        let record = monitoring_record(row, threshold, Some(0.5));
        let mut ours = Vec::new();
        record.write_json_with(&mut ours, &mut numbers).unwrap();
        assert_eq!(
            String::from_utf8(ours).unwrap(),
            serde_json::to_string(&record).unwrap(),
            "row {row}"
        );
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

    /// The number cache reuses text only for the very same bits: many more
    /// values than it has slots (so slots are taken over), written again
    /// and again, thresholds and p-values alike, with zeros of both signs,
    /// infinities and NaN among them.
    #[test]
    fn cached_numbers_are_written_as_serde_json_writes_them_afresh(
        drawn in proptest::collection::vec(proptest::num::f64::ANY, 1..1500),
        picks in proptest::collection::vec(proptest::prelude::any::<(usize, usize)>(), 1..2500),
    ) {
        let specials = [0.0, -0.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 1.0 / 101.0, 1.0];
        let pool: Vec<f64> = specials.into_iter().chain(drawn).collect();
        let mut numbers = super::JsonNumbers::default();
        for (row, (t, p)) in picks.into_iter().enumerate() {
            let record =
                monitoring_record(row, Some(pool[t % pool.len()]), Some(pool[p % pool.len()]));
            let mut ours = Vec::new();
            record.write_json_with(&mut ours, &mut numbers).unwrap();
            proptest::prop_assert_eq!(
                String::from_utf8(ours).unwrap(),
                serde_json::to_string(&record).unwrap(),
                "row {}", row
            );
        }
    }
}

proptest::proptest! {
    /// Timestamps read with the last date kept are those read afresh: rows
    /// of a few dates in turn (valid or not: February 30th, month 13), times
    /// valid or not (24:00:00, 10:61:00), a cell whose digit is not one, and
    /// the other forms.
    #[test]
    fn timestamps_read_with_the_date_kept_are_read_as_afresh(
        rows in proptest::collection::vec(
            (0usize..4, 0u32..26, 0u32..62, 0u32..62, 0u8..12),
            1..200,
        ),
    ) {
        let dates = ["2020-03-09", "2020-03-10", "2020-02-30", "2020-13-01"];
        let mut kept = Timestamps::default();
        for (date, h, m, sec, form) in rows {
            let mut text = format!("{} {h:02}:{m:02}:{sec:02}", dates[date]);
            match form {
                0 => text.push_str(".5"),
                1 => text.replace_range(10..11, "T"),
                2 => text.replace_range(15..16, "x"),
                3 => text.replace_range(3..4, "x"),
                4 => text = "1583748873000".to_string(),
                _ => {}
            }
            proptest::prop_assert_eq!(
                kept.parse(text.as_bytes()),
                parse_timestamp_bytes(text.as_bytes()),
                "{}", text
            );
        }
    }
}

#[test]
fn timestamps_are_read_in_three_forms() {
    let want = DateTime::from_timestamp(1_583_748_873, 0);
    assert_eq!(parse_timestamp("2020-03-09 10:14:33"), want);
    assert_eq!(parse_timestamp("2020-03-09T11:14:33+01:00"), want);
    assert_eq!(parse_timestamp("1583748873000"), want);
    assert_eq!(parse_timestamp("yesterday"), None);
    assert_eq!(parse_timestamp_bytes(b"2020-03-09 10:14:33"), want);
    assert_eq!(
        parse_timestamp_bytes(b"2020-03-09 10:14:33.5"),
        parse_timestamp("2020-03-09 10:14:33.5")
    );
    assert_eq!(parse_timestamp_bytes(b"2020-02-30 10:14:33"), None);
    assert_eq!(parse_timestamp_bytes(b"2020-03-09 24:00:00"), None);
    assert_eq!(parse_timestamp_bytes(b"1583748873000"), want);
}

/// Records and errors (as their messages) of a whole replay.
fn outcomes(
    replay: impl Iterator<Item = Result<ReplayRecord, ReplayError>>,
) -> Vec<Result<ReplayRecord, String>> {
    replay.map(|r| r.map_err(|e| e.to_string())).collect()
}

#[test]
fn reading_on_a_thread_of_its_own_gives_the_same_records_errors_and_detector() {
    let config = MonitorConfig::from_toml(MONITOR).unwrap();
    // Several batches long, with a bad timestamp and a bad cell among them
    // (the replay goes on after each error).
    // Enough batches that the reader reuses the ones handed back.
    let lines: Vec<String> = messy_csv(7, 12_000)
        .lines()
        .enumerate()
        .map(|(i, line)| match i {
            1500 => "yesterday;1;0;2;3".to_string(),
            1600 => {
                let cells: Vec<&str> = line.split(';').collect();
                format!("{};{};{};x;{}", cells[0], cells[1], cells[2], cells[4])
            }
            _ => line.to_string(),
        })
        .collect();
    let text = lines.join("\n");
    let mut inline = replay(&config, text.as_bytes(), &options()).unwrap();
    let mut background =
        replay_in_background(&config, std::io::Cursor::new(text.clone()), &options()).unwrap();
    let (expected, got) = (outcomes(inline.by_ref()), outcomes(background.by_ref()));
    assert!(expected.iter().filter(|r| r.is_err()).count() >= 2);
    assert!(expected.len() > 6000, "{}", expected.len());
    assert_eq!(got, expected);
    assert_eq!(background.detector(), inline.detector());
}

/// A CSV file that never ends: a header, then the same row forever.
struct Endless {
    text: Vec<u8>,
    at: usize,
}

impl std::io::Read for Endless {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = buf.len().min(self.text.len() - self.at);
        buf[..n].copy_from_slice(&self.text[self.at..self.at + n]);
        self.at += n;
        if self.at == self.text.len() {
            // Past the header: only the row repeats.
            self.at = "time;a;label;b;c\n".len();
        }
        Ok(n)
    }
}

#[test]
fn a_replay_dropped_while_its_reader_is_ahead_stops_the_reader() {
    let config = MonitorConfig::from_toml(MONITOR).unwrap();
    let endless = Endless {
        text: b"time;a;label;b;c\n1000;1;0;2;3\n".to_vec(),
        at: 0,
    };
    let mut background = replay_in_background(&config, endless, &options()).unwrap();
    assert!(background.next().is_some());
    let reader = background.reader.take().unwrap();
    drop(background);
    // The reader's next batch finds no one to take it, and the thread ends
    // although the file does not.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !reader.is_finished() {
        assert!(
            std::time::Instant::now() < deadline,
            "the reader still runs"
        );
        std::thread::yield_now();
    }
    reader.join().unwrap();
}

#[test]
fn a_row_that_is_not_utf8_outside_its_readings_gives_the_same_records() {
    let config = MonitorConfig::from_toml(MONITOR).unwrap();
    let text = csv_text(45);
    let mut bytes = Vec::new();
    for (i, line) in text.split_inclusive('\n').enumerate() {
        let mut cells: Vec<&[u8]> = line.as_bytes().split(|b| *b == b';').collect();
        // The label column of every third data row holds Latin-1 text.
        if i % 3 == 1 {
            cells[2] = b"\xe9t\xe9";
        }
        bytes.extend_from_slice(&cells.join(&b';'));
    }
    let plain = outcomes(replay(&config, text.as_bytes(), &options()).unwrap());
    let latin1 = outcomes(replay(&config, bytes.as_slice(), &options()).unwrap());
    assert_ne!(bytes, text.as_bytes());
    assert_eq!(latin1, plain);
}

#[test]
fn a_reading_cell_that_is_not_utf8_is_a_bad_value_named_by_its_text() {
    let config = MonitorConfig::from_toml(MONITOR).unwrap();
    let text = b"time;a;b\n1000;1;2\n2000;\xff5;4\n";
    let records = outcomes(replay(&config, &text[..], &options()).unwrap());
    assert_eq!(records.len(), 2);
    let err = records[1].as_ref().unwrap_err();
    assert!(err.contains("row 2, column \"a\": \"\u{fffd}5\""), "{err}");
}
