//! Snapshot encode+sign and verify+decode, per size: 4 KiB and 64 KiB
//! snapshots of a detector still buffering its training frames, and the
//! real snapshots of monitoring detectors of 2, 8 and 32 readings.
//!
//! `cargo bench -p radar-bench --bench snapshot`

use std::hint::black_box;

use chrono::Utc;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use radar::{
    runtime::MonitorCore,
    snapshot::{LoadOutcome, open, seal},
};
use radar_bench::workload::{self, SizedState};

fn cases() -> Vec<(String, MonitorCore)> {
    let mut cases = Vec::new();
    for (label, bytes) in [("4KiB", 4 * 1024), ("64KiB", 64 * 1024)] {
        let SizedState { core, .. } =
            workload::state_of_size(bytes, 1).expect("a state of the requested size");
        cases.push((format!("training-{label}"), core));
    }
    for readings in [2, 8, 32] {
        let config = workload::monitor_config("bench", "bench/s", readings, 100, 100)
            .expect("valid monitor");
        // Past the fit and a full health window: what a long-running
        // monitor checkpoints.
        let core = workload::fed_core(config, 1300, 2).expect("a monitoring core");
        cases.push((format!("monitoring-{readings}r"), core));
    }
    cases
}

fn snapshot(c: &mut Criterion) {
    let key = workload::bench_key();
    let mut group = c.benchmark_group("snapshot");
    for (label, core) in cases() {
        let binding = workload::binding(&core);
        let sealed = seal(&binding, &core.managed_state().unwrap(), Utc::now(), &key).unwrap();
        let size = sealed.bytes.payload.len() as u64;
        eprintln!("snapshot {label}: payload {size} bytes");
        group.throughput(Throughput::Bytes(size));
        group.bench_with_input(BenchmarkId::new("encode_sign", &label), &core, |b, core| {
            b.iter(|| {
                let state = core.managed_state().unwrap();
                black_box(seal(&binding, &state, Utc::now(), &key).unwrap())
            })
        });
        group.bench_with_input(
            BenchmarkId::new("verify_decode", &label),
            &sealed.bytes,
            |b, bytes| {
                b.iter(|| match open(black_box(bytes), &binding, &key) {
                    LoadOutcome::Restored(r) => black_box(r),
                    other => panic!("the benchmark snapshot did not open: {other:?}"),
                })
            },
        );
    }
    group.finish();
}

criterion_group!(benches, snapshot);
criterion_main!(benches);
