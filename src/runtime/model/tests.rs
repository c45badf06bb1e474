//! The model runtime on its own: which inputs produce which effects, with
//! the clocks driven by the test.

use std::{
    cell::Cell,
    rc::Rc,
    sync::Arc,
    time::{Duration, Instant},
};

use chrono::{DateTime, Utc};
use opentelemetry::metrics::{MeterProvider, noop::NoopMeterProvider};
use uuid::Uuid;

use super::{
    Clock, CommitOutcome, Effect, ModelRuntime, ModelSetup, ModelView, Notice, Output,
    SnapshotHandoff,
};
use crate::{
    config::MonitorConfig,
    mqtt::{ConnectionEvent, RawMessage},
    runtime::{
        CheckpointLimits, CheckpointPolicy, ExitReason, FIRST_RETRY, MonitorCore, Trigger,
        core::tests::{at, config, frame_observations},
    },
    snapshot::{CheckpointKey, SnapshotBinding},
    store::PendingResults,
    telemetry::{METER_NAME, Telemetry},
};

/// Clocks the test moves by hand; clones share them.
#[derive(Clone)]
struct TestClock {
    wall: Rc<Cell<DateTime<Utc>>>,
    now: Rc<Cell<Instant>>,
}

impl TestClock {
    fn new() -> Self {
        Self {
            wall: Rc::new(Cell::new(at(0))),
            now: Rc::new(Cell::new(Instant::now())),
        }
    }

    fn advance(&self, by: Duration) {
        self.now.set(self.now.get() + by);
        self.wall
            .set(self.wall.get() + chrono::TimeDelta::from_std(by).unwrap());
    }
}

impl Clock for TestClock {
    fn wall(&self) -> DateTime<Utc> {
        self.wall.get()
    }

    fn now(&self) -> Instant {
        self.now.get()
    }
}

const ID: Uuid = Uuid::from_u128(0x5eed);

fn limits() -> CheckpointLimits {
    CheckpointLimits {
        interval_frames: 10,
        max_interval: Duration::from_secs(30),
        timeout: Duration::from_secs(30),
    }
}

type Runtime = ModelRuntime<Vec<Effect>, TestClock>;

/// What one input did: its effects in order, the last view it published.
#[derive(Debug)]
struct Out {
    effects: Vec<Effect>,
    view: Option<ModelView>,
    needs_tick: bool,
    tick_not_before: Option<DateTime<Utc>>,
}

/// Takes the effects `output`'s input left in `rt`'s sink.
fn collect(rt: &mut Runtime, output: Output) -> Out {
    let mut effects = std::mem::take(&mut rt.effects);
    let mut view = None;
    effects.retain(|e| match e {
        Effect::Publish(v) => {
            view = Some(v.clone());
            false
        }
        _ => true,
    });
    Out {
        effects,
        view,
        needs_tick: output.needs_tick,
        tick_not_before: output.tick_not_before,
    }
}

/// Runs one input of `rt` and collects what it did.
macro_rules! run {
    ($rt:ident . $($call:tt)*) => {{
        let output = $rt.$($call)*;
        collect(&mut $rt, output)
    }};
}

/// The checkpoint before subscribing: whether one was sealed, and what
/// the input did.
fn checkpoint_now(rt: &mut Runtime) -> (Result<(), String>, Out) {
    let (handed, output) = rt.checkpoint_now(Trigger::BeforeSubscribing);
    (handed, collect(rt, output))
}

fn runtime_of(config: MonitorConfig, core: MonitorCore, clock: &TestClock) -> Runtime {
    runtime_observed(config, core, clock, true)
}

/// [`runtime_of`], with or without an observer listening.
fn runtime_observed(
    config: MonitorConfig,
    core: MonitorCore,
    clock: &TestClock,
    observed: bool,
) -> Runtime {
    let telemetry = Telemetry::new(&NoopMeterProvider::new().meter(METER_NAME));
    ModelRuntime::with_clock(
        ModelSetup {
            binding: SnapshotBinding::for_monitor(core.service_id(), &config),
            core,
            key: Arc::new(CheckpointKey::new(
                b"test-key-test-key-test-key-0123456789".to_vec(),
            )),
            max_payload_bytes: 1024,
            policy: CheckpointPolicy::new(limits()),
            metrics: telemetry.monitor(ID, "model"),
            observed,
        },
        Vec::new(),
        clock.clone(),
    )
}

/// A fresh monitor of two readings (20 training and 20 calibration frames).
fn runtime(clock: &TestClock) -> Runtime {
    let core = MonitorCore::fresh(ID, config(), at(0)).unwrap();
    runtime_of(config(), core, clock)
}

fn message(clock: &TestClock, reading: usize, ts: DateTime<Utc>, value: f64) -> RawMessage {
    let ms = ts.timestamp_millis();
    RawMessage {
        reading,
        payload: format!(r#"{{"ts":{ms},"value":{value}}}"#).into(),
        retained: false,
        received_at: ts,
        received_instant: clock.now(),
    }
}

/// Frame `i` of the repeatable signal; `outlier` puts reading 0 far off.
fn frame(clock: &TestClock, i: i64, outlier: bool) -> Vec<RawMessage> {
    frame_observations(i)
        .iter()
        .map(|o| {
            let value = if outlier && o.reading == 0 {
                1e4
            } else {
                o.value
            };
            message(clock, o.reading, o.ts, value)
        })
        .collect()
}

fn commits(out: &Out) -> Vec<&SnapshotHandoff> {
    out.effects
        .iter()
        .filter_map(|e| match e {
            Effect::Commit(h) => Some(h),
            _ => None,
        })
        .collect()
}

fn results(out: &Out) -> Vec<&PendingResults> {
    out.effects
        .iter()
        .filter_map(|e| match e {
            Effect::Results(r) => Some(r),
            _ => None,
        })
        .collect()
}

fn settle(h: &SnapshotHandoff, committed: bool) -> CommitOutcome {
    CommitOutcome {
        committed,
        attempt: h.attempt,
        trigger: Some(h.trigger),
        wall: at(0),
    }
}

#[test]
fn an_idle_model_needs_no_tick_and_a_tick_changes_nothing() {
    let clock = TestClock::new();
    let mut rt = runtime(&clock);
    assert!(!rt.needs_tick(), "nothing can fall due before any input");
    let out = run!(rt.tick());
    assert!(out.effects.is_empty(), "{:?}", out.effects);
    assert!(!out.needs_tick);
    assert!(out.view.is_some(), "a tick publishes the view");
}

#[test]
fn the_frame_interval_emits_one_commit_at_the_tenth_frame() {
    let clock = TestClock::new();
    let mut rt = runtime(&clock);
    // The first frame closes the start's coverage gap: a checkpoint of its own.
    let out = run!(rt.ingest(frame(&clock, 0, false)));
    let first = commits(&out);
    assert_eq!(first.len(), 1, "{:?}", out.effects);
    assert_eq!(first[0].trigger, Trigger::CoverageChange);
    let first = first[0].clone();
    run!(rt.committed(settle(&first, true)));
    for i in 1..10 {
        let out = run!(rt.ingest(frame(&clock, i, false)));
        assert!(commits(&out).is_empty(), "frame {i} committed early");
        assert!(out.needs_tick, "an uncommitted frame can fall due by time");
    }
    let out = run!(rt.ingest(frame(&clock, 10, false)));
    let handed = commits(&out);
    assert_eq!(handed.len(), 1, "{:?}", out.effects);
    assert_eq!(handed[0].trigger, Trigger::FrameInterval);
    assert!(!handed[0].last);
    assert_eq!(out.view.map(|v| (v.consumed, v.processed)), Some((22, 11)));
}

#[test]
fn a_commit_outcome_settles_the_attempt_and_a_failed_one_is_retried() {
    let clock = TestClock::new();
    let mut rt = runtime(&clock);
    let (handed, out) = checkpoint_now(&mut rt);
    handed.unwrap();
    let first = commits(&out)[0].clone();
    assert!(out.needs_tick, "the attempt waits for its outcome");

    let out = run!(rt.committed(settle(&first, true)));
    assert!(out.effects.is_empty());
    assert!(
        !out.needs_tick,
        "a settled attempt leaves nothing to wait for"
    );

    let (_, out) = checkpoint_now(&mut rt);
    let second = commits(&out)[0].clone();
    assert_ne!(second.attempt, first.attempt);
    let out = run!(rt.committed(settle(&second, false)));
    assert!(commits(&out).is_empty(), "no retry before the pause");
    assert!(out.needs_tick, "a failed attempt is retried by time");
    clock.advance(FIRST_RETRY);
    let out = run!(rt.tick());
    let retried = commits(&out);
    assert_eq!(retried.len(), 1, "{:?}", out.effects);
    assert_eq!(retried[0].trigger, Trigger::BeforeSubscribing);
}

#[test]
fn only_a_live_model_emits_a_commit_and_a_drained_one_never_again() {
    let clock = TestClock::new();
    let mut rt = runtime(&clock);
    run!(rt.ingest(frame(&clock, 0, false)));
    let out = run!(rt.input_ended());
    let handed = commits(&out);
    assert_eq!(handed.len(), 1);
    assert!(handed[0].last);
    assert_eq!(handed[0].trigger, Trigger::Shutdown);
    let last = handed[0].clone();
    assert!(matches!(out.effects.last(), Some(Effect::Drained)));
    assert!(!out.needs_tick, "a drained model has nothing to fall due");

    let out = run!(rt.ingest(frame(&clock, 1, false)));
    assert!(out.effects.is_empty(), "{:?}", out.effects);
    assert_eq!(out.view.map(|v| v.consumed), Some(2), "nothing consumed");
    let (handed, out) = checkpoint_now(&mut rt);
    assert!(handed.is_err());
    assert!(out.effects.is_empty());
    clock.advance(Duration::from_secs(60));
    assert!(run!(rt.tick()).effects.is_empty());
    let disconnected = ConnectionEvent::Disconnected {
        at: clock.wall(),
        reason: "test".into(),
    };
    assert!(run!(rt.connection(&disconnected)).effects.is_empty());
    assert!(
        run!(rt.input_ended()).effects.is_empty(),
        "drained only once"
    );

    rt.halt(ExitReason::OwnershipLost {
        detail: "a successor committed".into(),
    });
    assert!(rt.lifecycle().has_ended());
    for out in [
        run!(rt.ingest(frame(&clock, 2, false))),
        run!(rt.committed(settle(&last, true))),
        run!(rt.connection(&disconnected)),
        run!(rt.tick()),
    ] {
        assert!(
            out.effects.is_empty() && out.view.is_none() && !out.needs_tick,
            "ended: nothing, not even a view: {out:?}"
        );
    }
    assert!(checkpoint_now(&mut rt).0.is_err());
}

#[test]
fn a_connection_change_checkpoints_at_once_while_live() {
    let clock = TestClock::new();
    let mut rt = runtime(&clock);
    let out = run!(rt.connection(&ConnectionEvent::Disconnected {
        at: clock.wall(),
        reason: "test".into(),
    }));
    let handed = commits(&out);
    assert_eq!(handed.len(), 1, "{:?}", out.effects);
    assert_eq!(handed[0].trigger, Trigger::CoverageChange);
}

/// Flagged frames after the fit produce evidence; it leaves in the
/// snapshot sealed in the same batch or in that batch's one `Results`.
#[test]
fn results_leave_with_a_commit_or_once_at_the_end_of_their_batch() {
    let clock = TestClock::new();
    let mut rt = runtime(&clock);
    let mut flagged = 0;
    let mut evidence = 0;
    for i in 0..60 {
        let out = run!(rt.ingest(frame(&clock, i, i >= 45)));
        flagged += flags(&out);
        evidence += evidence_in(&out);
        assert!(results(&out).len() <= 1);
        assert!(
            rt.results.is_empty(),
            "frame {i}: results kept past their batch"
        );
    }
    assert!(flagged > 0, "the outliers are flagged");
    assert_eq!(evidence, flagged, "each flagged frame's evidence left once");
    assert!(rt.results.is_empty(), "nothing kept past its batch");
}

/// Without an observer the runtime hands on no notice, and the same frames
/// leave the same evidence: notices are for an observer only.
#[test]
fn an_unobserved_runtime_gives_no_notices_and_the_same_evidence() {
    let evidence_of = |observed: bool| {
        let clock = TestClock::new();
        let core = MonitorCore::fresh(ID, config(), at(0)).unwrap();
        let mut rt = runtime_observed(config(), core, &clock, observed);
        let (mut notices, mut evidence) = (0, 0);
        for i in 0..60 {
            let out = run!(rt.ingest(frame(&clock, i, i >= 45)));
            notices += out
                .effects
                .iter()
                .filter(|e| matches!(e, Effect::Notice(_)))
                .count();
            evidence += evidence_in(&out);
        }
        (notices, evidence)
    };
    let (watched, evidence) = evidence_of(true);
    assert!(watched > 0 && evidence > 0, "the outliers are noticed");
    assert_eq!(evidence_of(false), (0, evidence));
}

fn flags(out: &Out) -> usize {
    out.effects
        .iter()
        .filter(|e| matches!(e, Effect::Notice(Notice::Flagged { .. })))
        .count()
}

fn evidence_in(out: &Out) -> usize {
    let handed: usize = commits(out).iter().map(|h| h.results.evidence.len()).sum();
    let left: usize = results(out).iter().map(|r| r.evidence.len()).sum();
    handed + left
}

mod clock;
mod props;
#[cfg(feature = "fault-injection")]
mod quarantine;
