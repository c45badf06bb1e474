//! Scoring cost per frame by number of readings: the detector alone
//! (`detector_score`), and the model thread's whole step for one frame
//! (`model_step`: one JSON payload per reading parsed, then alignment,
//! watermarks, the detector, alarms and evidence), as the worker runs it.
//!
//! `cargo bench -p radar-bench --bench detector`

use std::hint::black_box;

use chrono::{TimeDelta, Utc};
use criterion::{BatchSize, BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use radar::{
    align::{Frame, Observation},
    detector::{Detector, Phase},
    mqtt::payload::parse_payload,
};
use radar_bench::workload::{self, Signal};

const WIDTHS: [usize; 6] = [2, 4, 8, 16, 32, 64];

/// A fitted detector of `width` readings.
fn fitted(width: usize) -> Detector {
    let config = workload::monitor_config("bench", "bench/d", width, 200.max(4 * width), 200)
        .expect("valid monitor");
    let frames = config.detector.training_frames + config.detector.calibration_frames + 1;
    let core = workload::fed_core(config, frames, 3).expect("a fitted core");
    assert_eq!(core.phase(), Phase::Monitoring);
    core.detector()
        .expect("a monitor without a graph runs the built-in detector")
        .clone()
}

fn score(c: &mut Criterion) {
    let mut group = c.benchmark_group("detector_score");
    group.throughput(Throughput::Elements(1));
    for width in WIDTHS {
        let mut detector = fitted(width);
        let mut signal = Signal::new(9);
        let start = Utc::now();
        let mut n = 0i64;
        group.bench_function(BenchmarkId::from_parameter(width), |b| {
            b.iter(|| {
                n += 1;
                let frame = Frame {
                    ts: start + TimeDelta::microseconds(n),
                    values: signal.frame(width),
                };
                black_box(detector.process(&frame))
            })
        });
    }
    group.finish();
}

fn model_step(c: &mut Criterion) {
    let mut group = c.benchmark_group("model_step");
    group.throughput(Throughput::Elements(1));
    for width in WIDTHS {
        let config = workload::monitor_config("bench", "bench/m", width, 200.max(4 * width), 200)
            .expect("valid monitor");
        let warmup = config.detector.training_frames + config.detector.calibration_frames + 1;
        let mut core = workload::fed_core(config, warmup, 4).expect("a fitted core");
        let mut signal = Signal::new(11);
        // Source times continue from the warmup's and stay in the past, so
        // the age and future checks pass as they do live.
        let mut ts = Utc::now() - TimeDelta::seconds(30);
        group.bench_function(BenchmarkId::from_parameter(width), |b| {
            // The payloads are made outside the timed part: the publisher's
            // work, not the model's.
            b.iter_batched(
                || {
                    ts += TimeDelta::microseconds(1);
                    let bodies: Vec<String> = signal
                        .frame(width)
                        .into_iter()
                        .map(|value| workload::payload(ts, value))
                        .collect();
                    (ts, bodies)
                },
                |(ts, bodies)| {
                    for (reading, body) in bodies.iter().enumerate() {
                        let parsed = parse_payload(body.as_bytes(), 4096).map(|p| Observation {
                            reading,
                            ts: p.ts,
                            value: p.value,
                            received_at: ts,
                        });
                        black_box(core.ingest(parsed, ts));
                    }
                },
                BatchSize::SmallInput,
            )
        });
    }
    group.finish();
}

criterion_group!(benches, score, model_step);
criterion_main!(benches);
