//! Scoring cost per frame by number of readings: the detector alone
//! (`detector_score`), and the model thread's whole step for one frame
//! (`model_step`: one JSON payload per reading parsed, then alignment,
//! watermarks, the detector, alarms and evidence), as the worker runs it.
//!
//! `cargo bench -p radar-bench --bench detector`

use std::{
    cell::RefCell,
    hint::black_box,
    rc::Rc,
    sync::Arc,
    time::{Duration, Instant},
};

use chrono::{TimeDelta, Utc};
use criterion::{BatchSize, BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use opentelemetry::metrics::MeterProvider;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use radar::{
    align::{Frame, Observation},
    config::MonitorConfig,
    detector::{Detector, Phase},
    mqtt::{ConnectionEvent, RawMessage, payload::parse_payload},
    runtime::{
        CheckpointLimits, CheckpointPolicy, CommitOutcome, Effect, Effects, ModelRuntime,
        ModelSetup, MonitorCore, Trigger,
    },
    snapshot::{CheckpointKey, SnapshotBinding},
    telemetry::{METER_NAME, Telemetry},
};
use radar_bench::workload::{self, Signal};

const WIDTHS: [usize; 6] = [2, 4, 8, 16, 32, 64];

/// A monitor of `width` readings on topics under `prefix` and its core,
/// fed one frame past its fit (so it is monitoring).
fn fitted_core(prefix: &str, width: usize, seed: u64) -> (MonitorConfig, MonitorCore) {
    let config = workload::monitor_config("bench", prefix, width, 200.max(4 * width), 200)
        .expect("valid monitor");
    let frames = config.detector.training_frames + config.detector.calibration_frames + 1;
    let core = workload::fed_core(config.clone(), frames, seed).expect("a fitted core");
    assert_eq!(core.phase(), Phase::Monitoring);
    (config, core)
}

/// A fitted detector of `width` readings.
fn fitted(width: usize) -> Detector {
    let (_, core) = fitted_core("bench/d", width, 3);
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
        let (_, mut core) = fitted_core("bench/m", width, 4);
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

/// What a benchmark's model runtime asked of the checkpoint side.
#[derive(Default)]
struct Pending {
    commits: Vec<CommitOutcome>,
    batches: usize,
}

/// Where a benchmark's model runtime puts its effects: views and notices
/// are dropped (the worker hands a view to its slot, replacing the last);
/// checkpoints and evidence batches are noted, to be answered as committed
/// as the checkpoint side does.
#[derive(Clone, Default)]
struct Settle(Rc<RefCell<Pending>>);

impl Effects for Settle {
    fn effect(&mut self, effect: Effect) {
        let mut pending = self.0.borrow_mut();
        match effect {
            Effect::Commit(handoff) => pending.commits.push(CommitOutcome {
                committed: true,
                attempt: handoff.attempt,
                trigger: Some(handoff.trigger),
                wall: Utc::now(),
            }),
            Effect::Results(_) => pending.batches += 1,
            _ => {}
        }
    }
}

impl Settle {
    /// Answers what the last input asked of the checkpoint side.
    fn answer(&self, rt: &mut ModelRuntime<Settle>) {
        loop {
            let next = self.0.borrow_mut().commits.pop();
            let Some(outcome) = next else { break };
            let _ = rt.committed(outcome);
        }
        let batches = std::mem::take(&mut self.0.borrow_mut().batches);
        for _ in 0..batches {
            let _ = rt.batch_settled(true, Instant::now());
        }
    }
}

/// The model thread's whole work for one batch of one frame, as the worker
/// runs it at K = 1000 (one frame per wake-up): the model runtime parses,
/// aligns and scores, records its counters into an OpenTelemetry SDK meter
/// (through the worker's Prometheus exporter), checkpoints at the worker's default
/// triggers (sealed and answered as committed) and publishes its view.
fn model_batch(c: &mut Criterion) {
    // The worker's exporter (its registry is never read here).
    let exporter = opentelemetry_prometheus::exporter()
        .build()
        .expect("a Prometheus exporter");
    let provider = SdkMeterProvider::builder().with_reader(exporter).build();
    let telemetry = Telemetry::new(&provider.meter(METER_NAME));
    let mut group = c.benchmark_group("model_batch");
    group.throughput(Throughput::Elements(1));
    for width in [2, 8] {
        let (config, core) = fitted_core("bench/b", width, 5);
        let id = core.service_id();
        let setup = ModelSetup {
            binding: SnapshotBinding::for_monitor(id, &config),
            core,
            key: Arc::new(CheckpointKey::new(vec![7; 32])),
            max_payload_bytes: 4096,
            policy: CheckpointPolicy::new(CheckpointLimits {
                interval_frames: 1000,
                max_interval: Duration::from_secs(30),
                timeout: Duration::from_secs(30),
            }),
            metrics: telemetry.monitor(id, "bench"),
            observed: false,
        };
        let sink = Settle::default();
        let mut rt = ModelRuntime::new(setup, sink.clone());
        let _ = rt.checkpoint_now(Trigger::BeforeSubscribing);
        sink.answer(&mut rt);
        let _ = rt.connection(&ConnectionEvent::Connected {
            at: Utc::now(),
            attempt: 1,
        });
        sink.answer(&mut rt);
        let before = rt.view().expect("a live model");
        let mut signal = Signal::new(13);
        let mut ts = Utc::now() - TimeDelta::seconds(30);
        group.bench_function(BenchmarkId::from_parameter(width), |b| {
            b.iter_batched(
                || {
                    ts += TimeDelta::microseconds(1);
                    let (received_at, received_instant) = (Utc::now(), Instant::now());
                    signal
                        .frame(width)
                        .into_iter()
                        .enumerate()
                        .map(|(reading, value)| RawMessage {
                            reading,
                            payload: workload::payload(ts, value).into(),
                            retained: false,
                            received_at,
                            received_instant,
                        })
                        .collect::<Vec<_>>()
                },
                |batch| {
                    let _ = black_box(rt.ingest(batch));
                    sink.answer(&mut rt);
                },
                BatchSize::SmallInput,
            )
        });
        // Every message measured made its frame: nothing was rejected.
        let after = rt.view().expect("the benchmark's model stopped");
        assert_eq!(
            (after.processed - before.processed) * width as u64,
            after.consumed - before.consumed,
            "the benchmark's frames were not all scored"
        );
    }
    group.finish();
}

criterion_group!(benches, score, model_step, model_batch);
criterion_main!(benches);
