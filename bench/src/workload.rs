//! The data every benchmark feeds radar: monitor definitions, sensor
//! payloads and deterministic signals, so the criterion benches and the
//! end-to-end harness measure the same shapes.

use chrono::{DateTime, SecondsFormat, SubsecRound, TimeDelta, Utc};
use radar::{
    align::Observation,
    config::MonitorConfig,
    runtime::{MonitorCore, no_snapshot},
    snapshot::{CheckpointKey, SnapshotBinding},
};
use radar_testkit::monitor::MonitorFile;
use uuid::Uuid;

/// A detector that starts monitoring after 40 frames, as in the worker tests.
pub const TRAINING_FRAMES: usize = 20;
pub const CALIBRATION_FRAMES: usize = 20;

/// The name of reading `i`: `r0`, `r1`, ...
pub fn reading_name(i: usize) -> String {
    format!("r{i}")
}

/// The topic of reading `i` of the monitor under `prefix`.
pub fn topic(prefix: &str, reading: usize) -> String {
    format!("{prefix}/{}", reading_name(reading))
}

/// A monitor of `readings` required readings under `prefix`. The age limit
/// is generous (10 min) so a backlog in the broker is measured as slower
/// throughput, not as rejected observations.
pub fn monitor_toml(
    name: &str,
    prefix: &str,
    readings: usize,
    training_frames: usize,
    calibration_frames: usize,
) -> String {
    let file = (0..readings).fold(MonitorFile::new(name), |file, i| {
        file.reading(&reading_name(i), &topic(prefix, i))
    });
    file.max_age_ms(600_000)
        .max_skew_ms(1000)
        .detector(training_frames as u32, calibration_frames as u32)
        .alarm(3, 5, 10)
        .to_toml()
}

/// The validated monitor of [`monitor_toml`].
pub fn monitor_config(
    name: &str,
    prefix: &str,
    readings: usize,
    training_frames: usize,
    calibration_frames: usize,
) -> anyhow::Result<MonitorConfig> {
    MonitorConfig::from_toml(&monitor_toml(
        name,
        prefix,
        readings,
        training_frames,
        calibration_frames,
    ))
    .map_err(|e| anyhow::anyhow!("the benchmark monitor is invalid: {e}"))
}

/// A sensor payload: RFC 3339 source time in microseconds, so a monitor can
/// receive far more than 1000 frames per second without its source clock
/// running ahead of the wall clock.
pub fn payload(ts: DateTime<Utc>, value: f64) -> String {
    format!(
        r#"{{"ts":"{}","value":{value:.6}}}"#,
        ts.to_rfc3339_opts(SecondsFormat::Micros, true)
    )
}

/// Deterministic noise around a level per reading (a linear congruential
/// generator: reproducible across runs, no dependency).
#[derive(Debug, Clone)]
pub struct Signal {
    state: u64,
}

impl Signal {
    pub fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// The next value of reading `reading`: its level plus noise in [0, 1).
    pub fn value(&mut self, reading: usize) -> f64 {
        self.state = self
            .state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let unit = (self.state >> 11) as f64 / (1u64 << 53) as f64;
        10.0 * (reading as f64 + 1.0) + unit
    }

    /// One frame of `width` values.
    pub fn frame(&mut self, width: usize) -> Vec<f64> {
        (0..width).map(|r| self.value(r)).collect()
    }
}

/// Source times that strictly increase at the payload's precision
/// (microseconds) and stay at or behind the wall clock whenever the wall
/// clock allows it.
#[derive(Debug, Default, Clone)]
pub struct SourceClock {
    last: Option<DateTime<Utc>>,
}

impl SourceClock {
    pub fn next_time(&mut self) -> DateTime<Utc> {
        // Two readings of the clock within one microsecond would print as
        // the same payload time: the second frame would be stale.
        let now = Utc::now().trunc_subsecs(6);
        let ts = match self.last {
            Some(last) if now <= last => last + TimeDelta::microseconds(1),
            _ => now,
        };
        self.last = Some(ts);
        ts
    }
}

/// The key every benchmark signs with (not a production key).
pub fn bench_key() -> CheckpointKey {
    CheckpointKey::new(b"radar-bench-key-radar-bench-key-0123456789".to_vec())
}

/// A monitor's model side fed `frames` complete frames through the real
/// path (payload parsing, alignment, detector), one source millisecond
/// apart, as the model thread would see them.
pub fn fed_core(config: MonitorConfig, frames: usize, seed: u64) -> anyhow::Result<MonitorCore> {
    let start = Utc::now() - TimeDelta::seconds(60);
    let mut core = MonitorCore::fresh(Uuid::from_u64_pair(0, seed), config, start)?;
    let width = core.config().readings.len();
    let mut signal = Signal::new(seed);
    for n in 0..frames {
        let ts = start + TimeDelta::microseconds(n as i64 * 10);
        feed_frame(&mut core, ts, &signal.frame(width))?;
    }
    Ok(core)
}

/// Offers one frame to `core` as `width` observations received at `ts`;
/// runs the fit when it becomes due through the core's own "checkpoint,
/// then fit" step (a benchmark's model keeps no snapshot).
pub fn feed_frame(core: &mut MonitorCore, ts: DateTime<Utc>, values: &[f64]) -> anyhow::Result<()> {
    for (reading, value) in values.iter().enumerate() {
        let observation = Observation {
            reading,
            ts,
            value: *value,
            received_at: ts,
        };
        let step = core.ingest(Ok(observation), ts);
        if let Some(reason) = step.rejected {
            anyhow::bail!("the benchmark frame was rejected: {}", reason.as_str());
        }
        core.fit_when_due(&step, no_snapshot)?;
    }
    Ok(())
}

/// Training frames of the monitors behind [`state_of_size`]: more than a
/// 64 KiB snapshot buffers (about 3,400 two-reading frames).
pub const SIZED_TRAINING_FRAMES: usize = 10_000;

/// A monitor's model side whose snapshot payload has a chosen size.
pub struct SizedState {
    pub core: MonitorCore,
    /// The payload size actually reached (at or a little above the target).
    pub payload_bytes: usize,
}

/// A real snapshot state of at least `bytes` payload bytes: a monitor of
/// two readings whose detector is still buffering training frames (the
/// largest state a monitor carries, before its fit replaces the frames).
pub fn state_of_size(bytes: usize, seed: u64) -> anyhow::Result<SizedState> {
    let config = monitor_config("bench-sized", "bench/sized", 2, SIZED_TRAINING_FRAMES, 1000)?;
    state_of_size_for(config, bytes, seed, Uuid::from_u64_pair(1, seed))
}

/// [`state_of_size`] for a given monitor and service id (the store checks
/// that a snapshot belongs to the row it replaces).
pub fn state_of_size_for(
    config: MonitorConfig,
    bytes: usize,
    seed: u64,
    service_id: Uuid,
) -> anyhow::Result<SizedState> {
    let start = Utc::now() - TimeDelta::seconds(60);
    let mut core = MonitorCore::fresh(service_id, config, start)?;
    let width = core.config().readings.len();
    let mut signal = Signal::new(seed);
    let mut n = 0i64;
    loop {
        let payload_bytes = core.managed_state()?.encode()?.len();
        if payload_bytes >= bytes {
            return Ok(SizedState {
                core,
                payload_bytes,
            });
        }
        // About 19 bytes per buffered two-reading frame: close the gap in
        // a few steps without overshooting by much.
        let frames = ((bytes - payload_bytes) / 40).max(1);
        for _ in 0..frames {
            n += 1;
            let ts = start + TimeDelta::microseconds(n * 10);
            feed_frame(&mut core, ts, &signal.frame(width))?;
        }
    }
}

/// The binding of a benchmark monitor's snapshots.
pub fn binding(core: &MonitorCore) -> SnapshotBinding {
    SnapshotBinding::for_monitor(core.service_id(), core.config())
}

#[cfg(test)]
mod tests {
    use radar::{detector::Phase, mqtt::payload::parse_payload};

    use super::*;

    #[test]
    fn the_benchmark_monitor_is_valid_for_any_width() {
        for width in [1, 2, 64] {
            let config = monitor_config("m", "bench/x", width, 200, 20).unwrap();
            assert_eq!(config.readings.len(), width);
            assert_eq!(
                config.readings[width - 1].topic,
                topic("bench/x", width - 1)
            );
        }
    }

    #[test]
    fn payloads_parse_back_to_their_microsecond_time_and_value() {
        let ts = Utc::now();
        let parsed = parse_payload(payload(ts, 12.5).as_bytes(), 4096).unwrap();
        assert_eq!(parsed.ts.timestamp_micros(), ts.timestamp_micros());
        assert_eq!(parsed.value, 12.5);
    }

    #[test]
    fn source_times_strictly_increase_as_printed() {
        let mut clock = SourceClock::default();
        let printed: Vec<_> = (0..10_000)
            .map(|_| {
                parse_payload(payload(clock.next_time(), 1.0).as_bytes(), 4096)
                    .unwrap()
                    .ts
            })
            .collect();
        assert!(printed.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn sized_states_reach_their_size_without_overshooting_much() {
        for bytes in [4096, 65536] {
            let sized = state_of_size(bytes, 1).unwrap();
            assert!(sized.payload_bytes >= bytes, "{}", sized.payload_bytes);
            assert!(
                sized.payload_bytes < bytes + bytes / 20,
                "{}",
                sized.payload_bytes
            );
            assert_eq!(sized.core.phase(), Phase::Training);
        }
    }

    #[test]
    fn a_core_fed_past_warmup_is_monitoring() {
        let config = monitor_config("m", "bench/x", 3, 20, 20).unwrap();
        let core = fed_core(config, 45, 7).unwrap();
        assert_eq!(core.phase(), Phase::Monitoring);
        assert_eq!(core.processed(), 45);
    }
}
