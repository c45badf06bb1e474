//! The shipped SKAB monitor against the published protocol: per file, the
//! first 300 rows train, the next 100 calibrate, and every later row counts
//! in one pooled point-wise confusion matrix of `alarm_open` against the
//! `anomaly` label (files without labels are anomaly-free). Runs through the
//! same replay function as `radar detect`.
//!
//! The data set (GPL-3.0) is not in the repository: it is read from the
//! folder named by `RADAR_TEST_SKAB_DIR` (`scripts/test` sets it to
//! `../shared/datasets/skab` beside the repository root when that exists).
//! Without the variable the evaluation is not run and says so in one line; a
//! variable that names a folder without the data fails.

use std::{fs::File, io::BufReader, path::PathBuf};

use radar::{
    config::MonitorConfig,
    replay::{ReplayOptions, replay},
};

/// Rows before this one train and calibrate; they are not scored.
const FIRST_TEST_ROW: usize = 401;

/// The configured data set folder, or `None` (after saying so) when none is
/// configured.
fn dataset_dir() -> Option<PathBuf> {
    let Some(dir) = std::env::var_os("RADAR_TEST_SKAB_DIR").map(PathBuf::from) else {
        static SAID: std::sync::Once = std::sync::Once::new();
        SAID.call_once(|| {
            eprintln!(
                "SKAB evaluation not run: RADAR_TEST_SKAB_DIR is not set (get the data from the \
             public SKAB repository's data/ folder and point the variable at it)"
            )
        });
        return None;
    };
    assert!(
        dir.join("valve1").is_dir() && dir.join("anomaly-free").is_dir(),
        "RADAR_TEST_SKAB_DIR={} does not hold the SKAB data: expected valve1/ and anomaly-free/",
        dir.display()
    );
    Some(dir)
}

#[derive(Default, Debug)]
struct Confusion {
    tp: u64,
    fp: u64,
    tn: u64,
    fn_: u64,
}

impl Confusion {
    fn add(&mut self, alarm: bool, anomaly: bool) {
        match (alarm, anomaly) {
            (true, true) => self.tp += 1,
            (true, false) => self.fp += 1,
            (false, false) => self.tn += 1,
            (false, true) => self.fn_ += 1,
        }
    }

    fn f1(&self) -> f64 {
        self.tp as f64 / (self.tp as f64 + (self.fp + self.fn_) as f64 / 2.0)
    }

    fn far(&self) -> f64 {
        self.fp as f64 / (self.fp + self.tn).max(1) as f64
    }

    fn mar(&self) -> f64 {
        self.fn_ as f64 / (self.fn_ + self.tp).max(1) as f64
    }
}

/// The `anomaly` label of every data row (all zero when the column is absent).
fn labels(path: &PathBuf) -> Vec<bool> {
    let mut reader = csv::ReaderBuilder::new()
        .delimiter(b';')
        .trim(csv::Trim::All)
        .from_path(path)
        .unwrap();
    let column = reader
        .headers()
        .unwrap()
        .iter()
        .position(|h| h == "anomaly");
    reader
        .records()
        .map(|r| {
            let r = r.unwrap();
            column.is_some_and(|c| r[c].parse::<f64>().unwrap() > 0.5)
        })
        .collect()
}

/// `alarm_open` after every data row of a SKAB-style CSV (index 0 is row 1);
/// a row that formed no frame (a repeated timestamp) keeps the alarm state.
fn alarms(config: &MonitorConfig, reader: impl std::io::Read, rows: usize) -> Vec<bool> {
    let options = ReplayOptions {
        delimiter: b';',
        time_column: "datetime".to_string(),
    };
    let mut alarm_by_row = vec![None; rows + 1];
    for record in replay(config, reader, &options).unwrap() {
        let record = record.unwrap();
        alarm_by_row[record.row as usize] = Some(record.alarm_open);
    }
    let mut alarm = false;
    alarm_by_row[1..]
        .iter()
        .map(|a| {
            alarm = a.unwrap_or(alarm);
            alarm
        })
        .collect()
}

fn evaluate(config: &MonitorConfig, path: &PathBuf) -> Confusion {
    let labels = labels(path);
    let reader = BufReader::new(File::open(path).unwrap());
    let alarms = alarms(config, reader, labels.len());
    let mut confusion = Confusion::default();
    for (row, (alarm, label)) in alarms.iter().zip(&labels).enumerate() {
        if row + 1 >= FIRST_TEST_ROW {
            confusion.add(*alarm, *label);
        }
    }
    confusion
}

impl std::ops::AddAssign<&Confusion> for Confusion {
    fn add_assign(&mut self, c: &Confusion) {
        self.tp += c.tp;
        self.fp += c.fp;
        self.tn += c.tn;
        self.fn_ += c.fn_;
    }
}

fn shipped_config() -> MonitorConfig {
    let text = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("config/monitors/skab.toml"),
    )
    .unwrap();
    MonitorConfig::from_toml(&text).unwrap()
}

/// The 16 valve1 files in experiment order, then anomaly-free.csv.
fn skab_files(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir.join("valve1"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "csv"))
        .collect();
    files.sort_by_key(|p| {
        p.file_stem()
            .and_then(|s| s.to_str())
            .and_then(|s| s.parse::<u32>().ok())
    });
    files.push(dir.join("anomaly-free/anomaly-free.csv"));
    assert_eq!(
        files.len(),
        17,
        "expected 16 valve1 files and anomaly-free.csv"
    );
    files
}

fn name(path: &std::path::Path) -> String {
    let parent = path
        .parent()
        .and_then(|p| p.file_name())
        .unwrap_or_default();
    format!(
        "{}/{}",
        parent.to_string_lossy(),
        path.file_name().unwrap_or_default().to_string_lossy()
    )
}

#[test]
fn shipped_skab_monitor_beats_the_published_pca_and_conv_ae_results() {
    let Some(dir) = dataset_dir() else { return };
    let config = shipped_config();
    let files = skab_files(&dir);
    let mut pooled = Confusion::default();
    for path in &files {
        let c = evaluate(&config, path);
        println!(
            "{:28} tp {:5} fp {:5} tn {:5} fn {:5} f1 {:.3} far {:.3} mar {:.3}",
            name(path),
            c.tp,
            c.fp,
            c.tn,
            c.fn_,
            c.f1(),
            c.far(),
            c.mar()
        );
        pooled += &c;
    }
    println!(
        "pooled: {pooled:?} f1 {:.3} far {:.3} mar {:.3}",
        pooled.f1(),
        pooled.far(),
        pooled.mar()
    );
    // In-sample (the configuration was chosen looking at these files):
    // 0.849 at 8.2% when this was written (8.0% before the stuck-value
    // channel, 0.855 at 7.4% before the change channels scored the four
    // drifting readings).
    assert!(pooled.f1() > 0.84, "pooled F1 {:.3}", pooled.f1());
    assert!(
        pooled.far() < 0.085,
        "pooled false-alarm rate {:.3}",
        pooled.far()
    );
}

/// The settings one would plausibly tune on this data: smoothing, holding
/// the level during an alarm, and the alarm rule. Leave-one-out picks one of
/// them on 15 valve1 files and anomaly-free.csv and scores it on the 16th.
fn candidates() -> Vec<(String, MonitorConfig)> {
    let mut out = Vec::new();
    for smoothing in [0.2, 0.5] {
        for hold in [false, true] {
            for (k, n, m) in [(5, 10, 10), (3, 5, 5)] {
                let mut config = shipped_config();
                config.detector.feature_smoothing = smoothing;
                config.detector.hold_level_during_alarm = hold;
                config.detector.alarm.open_k = k;
                config.detector.alarm.open_n = n;
                config.detector.alarm.close_m = m;
                let label = format!("smooth {smoothing} hold {hold} alarm {k}/{n} close {m}");
                out.push((label, config));
            }
        }
    }
    out
}

/// The selection rule: best pooled F1 among the candidates whose pooled
/// false-alarm rate is at most 15% (the target), else lowest rate.
fn select(results: &[Confusion]) -> usize {
    let ok = |c: &Confusion| c.far() <= 0.15;
    (0..results.len())
        .max_by(|&a, &b| {
            let (ca, cb) = (&results[a], &results[b]);
            (ok(ca), if ok(ca) { ca.f1() } else { -ca.far() })
                .partial_cmp(&(ok(cb), if ok(cb) { cb.f1() } else { -cb.far() }))
                .unwrap_or(std::cmp::Ordering::Equal)
                .then(b.cmp(&a))
        })
        .unwrap_or(0)
}

#[test]
fn leave_one_experiment_out_over_valve1_stays_near_the_in_sample_figure() {
    let Some(dir) = dataset_dir() else { return };
    let files = skab_files(&dir);
    let candidates = candidates();
    // per_file[f][c]: file f scored with candidate c.
    let per_file: Vec<Vec<Confusion>> = files
        .iter()
        .map(|path| candidates.iter().map(|(_, c)| evaluate(c, path)).collect())
        .collect();
    let valve1 = files.len() - 1;
    let mut held_out = Confusion::default();
    println!(
        "held-out file                 chosen candidate                              f1    far   mar"
    );
    for out in 0..valve1 {
        let pooled: Vec<Confusion> = (0..candidates.len())
            .map(|c| {
                let mut sum = Confusion::default();
                for (f, row) in per_file.iter().enumerate() {
                    if f != out {
                        sum += &row[c];
                    }
                }
                sum
            })
            .collect();
        let chosen = select(&pooled);
        let c = &per_file[out][chosen];
        println!(
            "{:28} {:44} {:.3} {:.3} {:.3}",
            name(&files[out]),
            candidates[chosen].0,
            c.f1(),
            c.far(),
            c.mar()
        );
        held_out += c;
    }
    let everywhere: Vec<Confusion> = (0..candidates.len())
        .map(|c| {
            let mut sum = Confusion::default();
            per_file.iter().for_each(|r| sum += &r[c]);
            sum
        })
        .collect();
    for ((label, _), c) in candidates.iter().zip(&everywhere) {
        println!(
            "candidate {label:44} all 17 files: f1 {:.3} far {:.3} mar {:.3}",
            c.f1(),
            c.far(),
            c.mar()
        );
    }
    let chosen = select(&everywhere);
    let mut all_valve1 = Confusion::default();
    per_file[..valve1]
        .iter()
        .for_each(|r| all_valve1 += &r[chosen]);
    println!(
        "leave-one-out, held-out valve1 files pooled: {held_out:?} f1 {:.3} far {:.3} mar {:.3}",
        held_out.f1(),
        held_out.far(),
        held_out.mar()
    );
    println!(
        "in-sample, chosen on all files, valve1 pooled: f1 {:.3} far {:.3} mar {:.3}",
        all_valve1.f1(),
        all_valve1.far(),
        all_valve1.mar()
    );
    // The shipped file must be what the rule picks on all the data.
    let shipped = shipped_config();
    assert!(
        candidates[chosen].1.detector == shipped.detector,
        "the selection rule picks {} over the shipped settings",
        candidates[chosen].0
    );
    // 0.877 at 14.1% when this was written (13.5% before the stuck-value
    // channel: its flags on valve1/7's long flow runs; the rule chose the
    // shipped settings for every held-out file).
    assert!(
        held_out.f1() > 0.87,
        "held-out pooled F1 {:.3}",
        held_out.f1()
    );
    assert!(
        held_out.far() < 0.145,
        "held-out pooled FAR {:.3}",
        held_out.far()
    );
}

/// Rows of each synthetic-fault run cut from anomaly-free.csv: 400 train
/// and calibrate, 200 normal, `FAULT_ROWS` faulty, 400 normal.
const SEGMENT_ROWS: usize = 1400;
const FAULT_START: usize = 600;
const FAULT_ROWS: usize = 400;
const FAULTS: [&str; 7] = [
    "step",
    "big step",
    "ramp",
    "variance",
    "stuck",
    "impulses",
    "oscillation",
];

/// The fault's value at row `t` of the fault window, for a reading whose
/// noise deviation is `sigma` and whose value at the fault's start was
/// `first`. Sizes are in noise deviations: step 3, big step 10 (a shift a
/// change reading's own statistics see only as it happens), ramp to 6,
/// added noise of 2 (variance x5), stuck at the first value, impulses of 8
/// every 10 rows, oscillation of amplitude 2 and period 20 rows.
fn inject(fault: &str, t: usize, value: f64, first: f64, sigma: f64, noise: f64) -> f64 {
    match fault {
        "step" => value + 3.0 * sigma,
        "big step" => value + 10.0 * sigma,
        "ramp" => value + 6.0 * sigma * (t + 1) as f64 / FAULT_ROWS as f64,
        "variance" => value + 2.0 * sigma * noise,
        "stuck" => first,
        "impulses" if t.is_multiple_of(10) => value + 8.0 * sigma,
        "oscillation" => value + 2.0 * sigma * (std::f64::consts::TAU * t as f64 / 20.0).sin(),
        _ => value,
    }
}

/// Standard normals from a seeded splitmix64 (Box-Muller), reproducible.
struct Normals(u64);

impl Normals {
    fn uniform(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64 + 0.5 / (1u64 << 53) as f64
    }

    fn next(&mut self) -> f64 {
        let (u, v) = (self.uniform(), self.uniform());
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }
}

#[test]
fn synthetic_faults_in_the_fault_free_run_are_found_on_every_reading_that_can_show_them() {
    let Some(dir) = dataset_dir() else { return };
    let config = shipped_config();
    let text = std::fs::read_to_string(dir.join("anomaly-free/anomaly-free.csv")).unwrap();
    let mut lines = text.lines();
    let header = lines.next().unwrap();
    let columns: Vec<&str> = header.split(';').collect();
    let rows: Vec<Vec<String>> = lines
        .filter(|l| !l.is_empty())
        .map(|l| l.split(';').map(str::to_string).collect())
        .collect();
    let segments: Vec<usize> = (0..rows.len() / SEGMENT_ROWS)
        .map(|s| s * SEGMENT_ROWS)
        .collect();
    let run = |cells: &[Vec<String>]| {
        let mut csv = String::from(header);
        csv.push('\n');
        for row in cells {
            csv.push_str(&row.join(";"));
            csv.push('\n');
        }
        alarms(&config, csv.as_bytes(), cells.len())
    };
    // Clean runs: the false-alarm rate every fault is detected against.
    let (mut clean_open, mut clean_rows) = (0usize, 0usize);
    let mut clean = Vec::new();
    for &start in &segments {
        let alarms = run(&rows[start..start + SEGMENT_ROWS]);
        let open = alarms[FIRST_TEST_ROW - 1..].iter().filter(|a| **a).count();
        println!(
            "clean segment from row {}: alarm open on {open} rows",
            start + 1
        );
        clean_open += open;
        clean_rows += SEGMENT_ROWS - (FIRST_TEST_ROW - 1);
        clean.push(alarms);
    }
    let clean_far = clean_open as f64 / clean_rows as f64;
    println!(
        "clean runs: {} segments of {SEGMENT_ROWS} rows, alarm open on {:.2}% of monitored rows",
        segments.len(),
        100.0 * clean_far
    );
    println!("{:22} {:12} detected  delay  recall", "reading", "fault");
    // Readings scored by their changes, and those in the level model.
    let change: Vec<&str> = config
        .detector
        .change
        .iter()
        .flat_map(|c| c.readings.iter().map(String::as_str))
        .collect();
    let scored: Vec<&str> = config
        .readings
        .iter()
        .filter(|r| r.required && !change.contains(&r.name.as_str()))
        .map(|r| r.name.as_str())
        .collect();
    let mut weakest_scored: f64 = 1.0;
    let mut weakest_step_or_ramp: f64 = 1.0;
    let mut weakest_change: f64 = 1.0;
    let mut weakest_stuck: f64 = 1.0;
    let mut weakest_vibration_shift: f64 = 1.0;
    for reading in config.readings.iter().map(|r| r.name.as_str()) {
        let Some(col) = columns.iter().position(|c| *c == reading) else {
            panic!("anomaly-free.csv has no column {reading}");
        };
        for fault in FAULTS {
            let (mut detected, mut delays, mut open) = (0, Vec::new(), 0usize);
            for (s, &start) in segments.iter().enumerate() {
                let mut cells = rows[start..start + SEGMENT_ROWS].to_vec();
                let value = |r: &Vec<String>| r[col].parse::<f64>().unwrap();
                let train: Vec<f64> = cells[..300].iter().map(value).collect();
                let diffs: Vec<f64> = train.windows(2).map(|w| w[1] - w[0]).collect();
                let mean = diffs.iter().sum::<f64>() / diffs.len() as f64;
                let var = diffs.iter().map(|d| (d - mean).powi(2)).sum::<f64>()
                    / (diffs.len() - 1) as f64;
                let sigma = (var / 2.0).sqrt().max(f64::MIN_POSITIVE);
                let first = value(&cells[FAULT_START]);
                let mut noise = Normals(s as u64 * 1000 + col as u64);
                for t in 0..FAULT_ROWS {
                    let cell = &mut cells[FAULT_START + t][col];
                    let v = cell.parse::<f64>().unwrap();
                    *cell = inject(fault, t, v, first, sigma, noise.next()).to_string();
                }
                // Only what the fault changed counts: rows where the clean
                // run of the same segment had an alarm open are not credited.
                let alarms = run(&cells);
                let window = FAULT_START..FAULT_START + FAULT_ROWS;
                let caused: Vec<bool> = window.map(|r| alarms[r] && !clean[s][r]).collect();
                if let Some(delay) = caused.iter().position(|a| *a) {
                    detected += 1;
                    delays.push(delay);
                }
                open += caused.iter().filter(|a| **a).count();
            }
            let rate = f64::from(detected) / segments.len() as f64;
            let delay = if delays.is_empty() {
                "-".to_string()
            } else {
                delays.sort_unstable();
                delays[delays.len() / 2].to_string()
            };
            let recall = open as f64 / (segments.len() * FAULT_ROWS) as f64;
            println!(
                "{reading:22} {fault:12} {detected}/{}     {delay:>5}  {recall:.3}",
                segments.len()
            );
            if scored.contains(&reading) && fault != "stuck" {
                weakest_scored = weakest_scored.min(rate);
            }
            if scored.contains(&reading) && (fault == "step" || fault == "ramp") {
                weakest_step_or_ramp = weakest_step_or_ramp.min(rate);
            }
            if fault == "stuck" {
                weakest_stuck = weakest_stuck.min(rate);
            }
            if fault == "big step" && reading.starts_with("Accelerometer") {
                weakest_vibration_shift = weakest_vibration_shift.min(rate);
            }
            if change.contains(&reading) && (fault == "variance" || fault == "impulses") {
                weakest_change = weakest_change.min(rate);
            }
        }
    }
    println!(
        "weakest detection rate on a scored reading (stuck values aside): {weakest_scored:.3}"
    );
    // When this was written: clean runs 18.8% (each segment is a fresh
    // start with its own 300 training rows, as every SKAB experiment is:
    // the honest estimate of the false-alarm rate on unseen experiments),
    // every step and ramp on a level reading found in at least 5 of 6 runs,
    // added noise and impulses on every change reading in 6 of 6, and a
    // reading stuck at its value in 6 of 6 on every reading (the
    // stuck-value channel; 0 to 3 of 6 without it).
    assert!(clean_far < 0.20, "clean false-alarm rate {clean_far:.3}");
    assert!(
        weakest_stuck >= 5.0 / 6.0,
        "a stuck reading was found in only {weakest_stuck:.3} of runs"
    );
    // A big step on a vibration reading: 5 and 6 of 6 runs with the
    // change channels' held shifts (2 of 6, recall 0.01, without).
    assert!(
        weakest_vibration_shift >= 5.0 / 6.0,
        "a big step on a vibration reading was found in only {weakest_vibration_shift:.3} of runs"
    );
    assert!(
        weakest_step_or_ramp >= 5.0 / 6.0,
        "a step or ramp on a level reading was found in only {weakest_step_or_ramp:.3} of runs"
    );
    assert!(
        !change.is_empty() && weakest_change >= 5.0 / 6.0,
        "added noise or impulses on a change reading found in only {weakest_change:.3} of runs"
    );
}
