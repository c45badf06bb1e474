//! `radar detect` is the operator's backtest: on the frames a worker
//! scored, it must give the worker's scores, flags and alarms bit for bit,
//! or a backtest says nothing about what the worker would have done. For a
//! monitor file and for a graph run: only the worker's runtime core runs
//! graphs, so the second test fails if `radar detect` stops driving it.

use std::{collections::BTreeMap, fmt::Write as _, time::Duration};

use chrono::{DateTime, Utc};
use diesel::sql_types::{Double, Timestamptz, Uuid as SqlUuid};
use diesel_async::RunQueryDsl;
use radar_testkit::{graph::small_graph, monitor, prelude::*};
use serde_json::Value;
use uuid::Uuid;

const START: Duration = Duration::from_secs(30);

/// Frames: 40 train and calibrate (the test monitor's 20 + 20), then
/// normal ones with two anomalous stretches in `a` between them.
const FRAMES: usize = 160;

fn anomalous(frame: usize) -> bool {
    (80..92).contains(&frame) || (120..126).contains(&frame)
}

/// Deterministic values per frame: noise around a level per reading, and
/// a shift of `a` on the anomalous frames.
fn values() -> Vec<[f64; 2]> {
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    let mut noise = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 11) as f64 / (1u64 << 53) as f64
    };
    (0..FRAMES)
        .map(|i| {
            let shift = if anomalous(i) { 40.0 } else { 0.0 };
            [10.0 + noise() + shift, 20.0 + noise()]
        })
        .collect()
}

#[derive(Debug, diesel::QueryableByName)]
struct Evidence {
    #[diesel(sql_type = Timestamptz)]
    frame_ts: DateTime<Utc>,
    #[diesel(sql_type = Double)]
    score: f64,
    #[diesel(sql_type = Double)]
    threshold: f64,
    #[diesel(sql_type = Double)]
    p_value: f64,
}

#[derive(Debug, diesel::QueryableByName)]
struct Alarm {
    #[diesel(sql_type = Timestamptz)]
    opened_at: DateTime<Utc>,
    #[diesel(sql_type = diesel::sql_types::Nullable<Timestamptz>)]
    closed_at: Option<DateTime<Utc>>,
}

/// Scores, threshold and p-value of one flagged frame, as exact bits.
type Scored = (u64, u64, u64);

/// Flagged frames by source time (ms).
type Flagged = BTreeMap<i64, Scored>;

/// Alarms as (opened, closed) source times (ms).
type Spans = Vec<(i64, Option<i64>)>;

fn bits(score: f64, threshold: f64, p_value: f64) -> Scored {
    (score.to_bits(), threshold.to_bits(), p_value.to_bits())
}

/// What the worker committed: flagged frames by source time (ms), and
/// alarms as (opened, closed) source times.
async fn committed(h: &Harness, id: Uuid) -> (Flagged, Spans) {
    let mut conn = h.connect().await;
    let evidence: Vec<Evidence> = diesel::sql_query(
        "SELECT frame_ts, score, threshold, p_value FROM radar_evidence \
         WHERE service_id = $1 ORDER BY frame_ts",
    )
    .bind::<SqlUuid, _>(id)
    .load(&mut conn)
    .await
    .expect("read evidence");
    let alarms: Vec<Alarm> = diesel::sql_query(
        "SELECT opened_at, closed_at FROM radar_alarms WHERE service_id = $1 ORDER BY opened_at",
    )
    .bind::<SqlUuid, _>(id)
    .load(&mut conn)
    .await
    .expect("read alarms");
    (
        evidence
            .iter()
            .map(|e| {
                (
                    e.frame_ts.timestamp_millis(),
                    bits(e.score, e.threshold, e.p_value),
                )
            })
            .collect(),
        alarms
            .iter()
            .map(|a| {
                (
                    a.opened_at.timestamp_millis(),
                    a.closed_at.map(|t| t.timestamp_millis()),
                )
            })
            .collect(),
    )
}

/// What `radar detect --json` prints for the same frames, in the same
/// shape: flagged frames and alarm spans (an alarm opens on the first
/// frame with `alarm_open` and closes on the first frame without it).
/// `model` is the option (`--config` or `--graph`) and its file's text.
fn backtest(h: &Harness, model: (&str, &str), rows: &[(i64, [f64; 2])]) -> (Flagged, Spans, usize) {
    let dir = tempfile::tempdir().expect("temporary directory");
    let (config, data) = (dir.path().join("model"), dir.path().join("d.csv"));
    std::fs::write(&config, model.1).expect("write the monitor or graph file");
    let mut csv = String::from("ts,a,b\n");
    for (ts, [a, b]) in rows {
        writeln!(csv, "{ts},{a},{b}").expect("format a row");
    }
    std::fs::write(&data, csv).expect("write the CSV");
    let out = h.radar(&[
        "detect",
        model.0,
        config.to_str().expect("utf-8 path"),
        "--csv",
        data.to_str().expect("utf-8 path"),
        "--time-column",
        "ts",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let records: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON record"))
        .collect();
    let ms = |r: &Value| {
        DateTime::parse_from_rfc3339(r["ts"].as_str().expect("ts"))
            .expect("an RFC 3339 ts")
            .timestamp_millis()
    };
    let mut flagged = BTreeMap::new();
    let mut alarms: Spans = Vec::new();
    for record in &records {
        if record["flagged"] == true {
            let f = |k: &str| record[k].as_f64().expect("a number");
            flagged.insert(ms(record), bits(f("score"), f("threshold"), f("p_value")));
        }
        let open = record["alarm_open"] == true;
        match alarms.last_mut() {
            Some((_, closed @ None)) if !open => *closed = Some(ms(record)),
            Some((_, None)) => {}
            _ if open => alarms.push((ms(record), None)),
            _ => {}
        }
    }
    (flagged, alarms, records.len())
}

/// The test frames, 10 ms apart from now on.
fn rows() -> Vec<(i64, [f64; 2])> {
    timed(values())
}

/// `values`, 10 ms apart from now on.
fn timed(values: Vec<[f64; 2]>) -> Vec<(i64, [f64; 2])> {
    let start = Utc::now().timestamp_millis();
    values
        .into_iter()
        .enumerate()
        .map(|(i, v)| (start + 10 * i as i64, v))
        .collect()
}

/// The frames of [`values`] without their shifts, and with `b` frozen at
/// its value of frame 80 over the first anomalous stretch (a stuck
/// sensor: its level is ordinary, only the repeats are not).
fn frozen_values() -> Vec<[f64; 2]> {
    let mut values = values();
    let frozen = values[80][1];
    for (i, v) in values.iter_mut().enumerate() {
        if anomalous(i) {
            v[0] -= 40.0;
        }
        if (80..92).contains(&i) {
            v[1] = frozen;
        }
    }
    values
}

/// Publishes `rows` as readings `a` and `b` under `prefix` to the running
/// monitor `id`, waits until it processed every frame and stops the
/// worker (its last snapshot commits every pending result); what it
/// committed.
async fn worker_scores(
    h: &Harness,
    mut worker: Worker,
    id: Uuid,
    prefix: &str,
    rows: &[(i64, [f64; 2])],
) -> (Flagged, Spans) {
    let mut publisher = Publisher::connect(h.broker.port).await;
    for (ts, [a, b]) in rows {
        publisher.raw(&format!("{prefix}/a"), *ts, *a, false).await;
        publisher.raw(&format!("{prefix}/b"), *ts, *b, false).await;
    }
    publisher.flush(START).await;
    h.wait_status(id, START, "every frame processed", |s| {
        processed(s) == FRAMES as u64
    })
    .await;
    worker.stop_cleanly(START).await;
    committed(h, id).await
}

/// The worker's and the backtest's flagged frames and alarms are the same,
/// and not trivially: at least `min_flagged` frames flagged, and as many
/// alarms as `alarms` allows.
fn assert_same(
    worker: (Flagged, Spans),
    detect: (Flagged, Spans, usize),
    min_flagged: usize,
    alarms: std::ops::RangeInclusive<usize>,
) {
    let ((worker_flagged, worker_alarms), (detect_flagged, detect_alarms, frames)) =
        (worker, detect);
    assert_eq!(frames, FRAMES, "one record per frame");
    assert!(
        worker_flagged.len() >= min_flagged,
        "the anomalous stretches are flagged: {worker_flagged:?}"
    );
    assert!(
        alarms.contains(&worker_alarms.len()),
        "alarms on the stretches: {worker_alarms:?}"
    );
    assert_eq!(
        detect_flagged, worker_flagged,
        "the same frames flagged with the same score, threshold and p-value bits"
    );
    assert_eq!(detect_alarms, worker_alarms, "the same alarms");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn detect_gives_the_workers_scores_flags_and_alarms_on_the_same_frames() {
    let h = Harness::new("detect_matches_worker").await;
    let (id, prefix) = h.create_monitor("backtest");
    let worker = h.spawn_worker("w-backtest", &[], &[]);
    h.wait_status(id, START, "the monitor runs", |s| state(s) == "running")
        .await;
    let rows = rows();
    let scored = worker_scores(&h, worker, id, &prefix, &rows).await;
    let monitor = monitor::two_readings("backtest", &prefix);
    // One alarm per stretch.
    assert_same(
        scored,
        backtest(&h, ("--config", &monitor), &rows),
        12,
        2..=2,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn detect_gives_the_workers_stuck_value_flags_and_alarms_on_the_same_frames() {
    let h = Harness::new("detect_matches_worker_stuck").await;
    let stuck = "[detector.stuck]\nfalse_alarm_rate = 0.05";
    let (id, prefix) = h.create_monitor_edited("stuck", |file, _| file.table(stuck));
    let worker = h.spawn_worker("w-stuck", &[], &[]);
    h.wait_status(id, START, "the monitor runs", |s| state(s) == "running")
        .await;
    let rows = timed(frozen_values());
    let scored = worker_scores(&h, worker, id, &prefix, &rows).await;
    let monitor = radar_testkit::monitor::two_readings_file("stuck", &prefix)
        .table(stuck)
        .to_toml();
    // `b` frozen for 12 frames: each repeat is flagged (one repeat in 40
    // fitting frames of continuous noise is already below 0.05 / 2) and
    // an alarm opens on the stretch; the level model's own 5% adds a few
    // flags elsewhere and at most one alarm of its own. The p-values
    // compared bit for bit are the three-channel Bonferroni combination.
    let frame = |ts: &i64| (ts - rows[0].0) / 10;
    let repeats: Vec<i64> = scored
        .0
        .keys()
        .map(frame)
        .filter(|f| (80..92).contains(f))
        .collect();
    assert_eq!(
        repeats,
        (81..92).collect::<Vec<_>>(),
        "every repeat of the frozen value is flagged"
    );
    assert!(
        scored
            .1
            .iter()
            .any(|(opened, _)| (81..92).contains(&frame(opened))),
        "an alarm opens while `b` is frozen: {:?}",
        scored.1
    );
    assert_same(
        scored,
        backtest(&h, ("--config", &monitor), &rows),
        11,
        1..=2,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn detect_gives_a_graph_runs_scores_flags_and_alarms_on_the_same_frames() {
    let h = Harness::new("detect_matches_worker_graph").await;
    let prefix = unique_prefix();
    let graph = small_graph("backtest-graph", &prefix, None);
    h.publish_graph(&graph);
    let ids = h.activate("backtest-graph", 1);
    let monitor = ids.service.to_string();
    let worker = h.spawn_worker("w-backtest-graph", &[], &["--monitor", &monitor]);
    h.wait_status(ids.service, START, "the graph run runs", |s| {
        state(s) == "running"
    })
    .await;
    worker.wait_log("Admitted graph run", START).await;
    let rows = rows();
    let scored = worker_scores(&h, worker, ids.service, &prefix, &rows).await;
    let file = serde_json::to_string_pretty(&graph).expect("graph JSON");
    // The graph's detector sees `a` through a rolling mean of 3 and its
    // alarm node closes after 10 quiet frames: fewer flagged frames than
    // the plain monitor's, and a stretch may open and close an alarm twice.
    assert_same(scored, backtest(&h, ("--graph", &file), &rows), 8, 2..=4);
}
