//! The model actor: runs on a model arbiter (its own OS thread, never the IO
//! arbiter) and strictly serializes everything that touches the detector:
//! payload parsing, alignment, scoring, the fit, health refresh and snapshot
//! encoding. It owns the checkpoint policy because it sees every frame,
//! phase change and coverage change first.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use actix::prelude::*;
use chrono::Utc;
use futures_util::StreamExt;
use radar::{
    detector::AlarmEvent,
    telemetry::{DetectorPhase, ModelOperation, MonitorTelemetry, RejectReason, events},
};
use radar::{
    mqtt::{ConnectionEvent, RawMessage, payload::PayloadFormat},
    runtime::{CheckpointPolicy, MonitorCore, Silence, SilenceChange, Step, Trigger},
    snapshot::{CheckpointKey, ProcessingCounters, SealedSnapshot, SnapshotBinding, seal},
};
use tokio::sync::watch;
use tokio_stream::wrappers::ReceiverStream;

use super::{
    MonitorActor,
    checkpoint::CheckpointActor,
    messages::{
        AttachInput, BatchSettled, CommitReport, Connection, ContinueAlarms, Halt, InputDrained,
        NewResults, Quarantined, SealNow, SealedNow, SnapshotReady,
    },
    view::ModelView,
};
use crate::worker::{Notice, Observer};

/// How often the model checks the clock-driven triggers (max interval,
/// checkpoint timeout, freshness expiry, silence) while one of them can fall
/// due; an idle monitor has no tick at all (see `ModelActor::needs_tick`).
const TICK: Duration = Duration::from_secs(1);

/// At most one `timestamp_unit` log line per monitor this often; the
/// rejections are counted in the metrics every batch regardless.
const UNIT_WARNING_EVERY: Duration = Duration::from_secs(60);

/// The most queued messages handled in one turn of the model actor. What is
/// waiting is taken at once (never waited for), so a busy monitor pays the
/// per-turn costs (metrics, view, span) once per batch, an idle one per
/// message.
const BATCH: usize = 256;

/// The part of the model's processing counters the metrics have been told,
/// so each batch records only the difference, once per batch instead of
/// once per message. Diffing the counters (rather than tallying each step)
/// also catches values whose fate is decided later than their arrival:
/// superseded, expired or pushed out of a partial frame.
#[derive(Debug, Default)]
struct Tally {
    received: u64,
    accepted: u64,
    frames: u64,
    rejected: std::collections::BTreeMap<String, u64>,
}

impl Tally {
    /// Starts from `counters` (restored ones were reported by an earlier
    /// process, so this one's metrics start at zero).
    fn from(counters: &ProcessingCounters) -> Self {
        Self {
            received: counters.observations_received,
            accepted: counters.observations_accepted,
            frames: counters.frames,
            rejected: counters.observations_rejected.clone(),
        }
    }

    fn flush(&mut self, counters: &ProcessingCounters, m: &MonitorTelemetry) {
        let step = |told: &mut u64, now: u64| now.saturating_sub(std::mem::replace(told, now));
        let received = step(&mut self.received, counters.observations_received);
        if received > 0 {
            m.emit(events::ObservationsReceived { count: received });
        }
        let accepted = step(&mut self.accepted, counters.observations_accepted);
        if accepted > 0 {
            m.emit(events::ObservationsAccepted { count: accepted });
        }
        for (label, &now) in &counters.observations_rejected {
            let told = match self.rejected.get_mut(label) {
                Some(told) => told,
                None => self.rejected.entry(label.clone()).or_default(),
            };
            let count = step(told, now);
            if count > 0
                && let Some(&reason) = RejectReason::ALL.iter().find(|r| r.as_str() == label)
            {
                m.emit(events::ObservationsRejected { reason, count });
            }
        }
        let frames = step(&mut self.frames, counters.frames);
        if frames > 0 {
            m.emit(events::FramesEmitted { count: frames });
        }
    }
}

/// `timestamp_unit` rejections not yet logged, for one aggregated line.
#[derive(Debug, Default)]
struct UnitMismatches {
    /// The reading and the unit of the first rejection since the last line.
    first: Option<(usize, Option<&'static str>)>,
    count: u64,
    logged_at: Option<Instant>,
}

pub struct ModelActor {
    core: MonitorCore,
    binding: SnapshotBinding,
    key: Arc<CheckpointKey>,
    max_payload_bytes: usize,
    /// The monitor's `[payload]` table, compiled once.
    format: PayloadFormat,
    unit_mismatches: UnitMismatches,
    policy: CheckpointPolicy,
    checkpoint: Addr<CheckpointActor>,
    monitor: Addr<MonitorActor>,
    view: watch::Sender<ModelView>,
    observer: Option<Observer>,
    consumed: u64,
    /// The coverage history as last published; cloned again only when its
    /// version changes, so publishing a view per batch stays cheap.
    coverage: Arc<radar::coverage::CoverageHistory>,
    recovery: Arc<radar::snapshot::RecoveryMetadata>,
    /// Ingestion ended and the last snapshot was sealed: seal nothing more.
    finished: bool,
    /// A terminal state: no scoring, no snapshot, ever.
    halted: bool,
    metrics: MonitorTelemetry,
    /// What the metrics were last told of the core's counters.
    tally: Tally,
    /// Restored and still waiting for the first new frame, which measures
    /// the possible coverage gap since the snapshot's save time.
    gap_pending_since: Option<chrono::DateTime<Utc>>,
    /// Whether required readings went silent while connected (`no_data`).
    silence: Silence,
    /// The clock-driven checks, armed only while something can fall due.
    tick: Option<SpawnHandle>,
    span: tracing::Span,
}

/// Everything a model actor starts with.
pub struct ModelSetup {
    pub core: MonitorCore,
    pub binding: SnapshotBinding,
    pub key: Arc<CheckpointKey>,
    pub max_payload_bytes: usize,
    pub policy: CheckpointPolicy,
    pub checkpoint: Addr<CheckpointActor>,
    pub monitor: Addr<MonitorActor>,
    pub view: watch::Sender<ModelView>,
    pub observer: Option<Observer>,
    pub metrics: MonitorTelemetry,
    pub span: tracing::Span,
}

impl ModelActor {
    pub fn new(setup: ModelSetup) -> Self {
        let coverage = Arc::new(setup.core.coverage().clone());
        let recovery = Arc::new(setup.core.recovery().clone());
        let silence_watch = Silence::new(setup.core.config());
        let format = PayloadFormat::of(setup.core.config().payload.as_ref());
        let tally = Tally::from(setup.core.counters());
        let mut actor = Self {
            coverage,
            recovery,
            core: setup.core,
            binding: setup.binding,
            key: setup.key,
            max_payload_bytes: setup.max_payload_bytes,
            format,
            unit_mismatches: UnitMismatches::default(),
            policy: setup.policy,
            checkpoint: setup.checkpoint,
            monitor: setup.monitor,
            view: setup.view,
            observer: setup.observer,
            consumed: 0,
            finished: false,
            halted: false,
            gap_pending_since: None,
            silence: silence_watch,
            tick: None,
            metrics: setup.metrics,
            tally,
            span: setup.span,
        };
        actor.gap_pending_since = actor.core.recovery().restored_processed_count.and(
            actor
                .core
                .coverage()
                .last_restore()
                .map(|mark| mark.saved_at),
        );
        actor.publish();
        actor
    }

    /// The first view, before the actor exists.
    pub fn initial_view(core: &MonitorCore) -> ModelView {
        view_of(
            core,
            0,
            Arc::new(core.coverage().clone()),
            Arc::new(core.recovery().clone()),
            None,
        )
    }

    /// Records a silence change in the coverage history (a checkpoint trigger).
    fn silence_changed(&mut self, change: Option<SilenceChange>) {
        if let Some(change) = change
            && self.core.record_silence(&change)
        {
            self.policy.request(Trigger::CoverageChange, Instant::now());
        }
    }

    /// The `no_data` detail: which required readings are silent, how long.
    fn no_data(&self) -> Option<String> {
        if !self.silence.is_silent() {
            return None;
        }
        let now = Utc::now();
        // The time each went quiet, not a duration: the view is published
        // on events only once the monitor is idle, so a duration would go
        // stale.
        let silent: Vec<String> = self
            .silence
            .silent_readings(now)
            .iter()
            .map(|(name, quiet)| {
                let since = (now - *quiet).to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
                format!("{name} (nothing since {since})")
            })
            .collect();
        Some(format!(
            "no data from required readings: {}; longer than alignment.silence_ms {} ms",
            silent.join(", "),
            self.core.config().alignment.silence().num_milliseconds()
        ))
    }

    fn publish(&mut self) {
        if self.coverage.version != self.core.coverage().version {
            let now = Arc::new(self.core.coverage().clone());
            for gap in now.closed_since(&self.coverage) {
                if let Some(to) = gap.to {
                    self.metrics.emit(events::CoverageGapClosed {
                        cause: gap.cause,
                        duration: (to - gap.from).to_std().unwrap_or_default(),
                    });
                }
            }
            self.coverage = now;
        }
        let mut view = view_of(
            &self.core,
            self.consumed,
            self.coverage.clone(),
            self.recovery.clone(),
            self.no_data(),
        );
        view.readings_seen = self.silence.last_accepted();
        self.metrics.set_last_accepted(view.readings_seen.clone());
        self.metrics
            .set_held_values(self.core.aligner().held_values());
        self.view.send_replace(view);
    }

    fn seal(&self) -> Result<SealedSnapshot, String> {
        let started = Instant::now();
        let state = self.core.managed_state().map_err(|e| e.to_string())?;
        let sealed = seal(&self.binding, &state, Utc::now(), &self.key).map_err(|e| e.to_string());
        self.metrics.emit(events::ModelOperationFinished {
            operation: ModelOperation::EncodeSnapshot,
            duration: started.elapsed(),
        });
        sealed
    }

    /// Seals and hands a snapshot to the checkpoint actor.
    fn checkpoint_now(&mut self, trigger: Trigger, last: bool) {
        let (_, attempt) = self.policy.started(Instant::now());
        match self.seal() {
            Ok(sealed) => self.checkpoint.do_send(SnapshotReady {
                sealed,
                trigger,
                attempt,
                last,
            }),
            Err(error) => {
                tracing::error!(monitor_id = %self.core.service_id(), %error, "Could not seal a snapshot.");
                self.policy.failed(attempt, Some(trigger), Instant::now());
            }
        }
    }

    /// One line for the `timestamp_unit` rejections since the last one, at
    /// most every [`UNIT_WARNING_EVERY`].
    fn log_unit_mismatches(&mut self) {
        let m = &mut self.unit_mismatches;
        let Some((reading, looks_like)) = m.first else {
            return;
        };
        if m.logged_at
            .is_some_and(|at| at.elapsed() < UNIT_WARNING_EVERY)
        {
            return;
        }
        let name = self
            .core
            .config()
            .readings
            .get(reading)
            .map_or("?", |r| r.name.as_str());
        self.metrics.emit(events::TimestampUnitMismatch {
            reading: name,
            configured: self.format.unit().as_str(),
            looks_like,
            count: m.count,
        });
        *m = UnitMismatches {
            logged_at: Some(Instant::now()),
            ..UnitMismatches::default()
        };
    }

    /// A graph node failed uncertainly: nothing is sealed or scored again.
    fn quarantined(&self) -> bool {
        self.core.quarantine().is_some()
    }

    fn checkpoint_if_due(&mut self) {
        if self.finished || self.halted || self.quarantined() {
            return;
        }
        if let Some(trigger) = self.policy.due(Instant::now()) {
            self.checkpoint_now(trigger, false);
        }
    }

    fn record(&mut self, step: &Step) {
        let m = &self.metrics;
        if let Some(frame) = &step.frame
            && let Some(saved_at) = self.gap_pending_since.take()
        {
            let gap = (frame.ts - saved_at).to_std().unwrap_or_default();
            m.emit(events::PossibleGapMeasured { gap });
        }
        if let Some(verdict) = &step.verdict {
            m.emit(events::FrameScored {
                score: verdict.score,
                flagged: verdict.flagged,
            });
            match verdict.alarm_event {
                Some(AlarmEvent::Opened { .. }) => m.emit(events::AlarmOpened),
                Some(AlarmEvent::Closed { .. }) => m.emit(events::AlarmClosed),
                None => {}
            }
        }
        if let (Some(observer), Some(scored)) = (&self.observer, &step.scored) {
            notify(observer, self.core.service_id(), scored);
        }
        if let Some(phase) = step.phase_changed {
            m.emit(events::DetectorPhaseChanged {
                phase: DetectorPhase::from(phase),
            });
        }
    }

    /// Acts on one step's outcome; the caller publishes the view.
    fn after_step(&mut self, step: Step) {
        if let Some(diagnostics) = step.quarantined {
            // No checkpoint is due any more: the monitor records the failure.
            self.monitor.do_send(Quarantined { diagnostics });
            return;
        }
        if !step.results.is_empty() {
            self.checkpoint.do_send(NewResults {
                results: step.results,
            });
        }
        if step.frame.is_some() {
            self.policy.on_frames(1, Instant::now());
        }
        if step.coverage_changed {
            self.policy.request(Trigger::CoverageChange, Instant::now());
        }
        if step.phase_changed.is_some() {
            self.policy.request(Trigger::PhaseChange, Instant::now());
        }
        if step.fit_due {
            // The snapshot before the fit keeps the training and calibration
            // frames, so a fit cut short by a crash reruns from them.
            self.checkpoint_now(Trigger::PhaseChange, false);
            let started = Instant::now();
            match self.core.fit() {
                Ok(_) => {
                    self.metrics.emit(events::ModelOperationFinished {
                        operation: ModelOperation::Fit,
                        duration: started.elapsed(),
                    });
                    self.metrics.emit(events::DetectorPhaseChanged {
                        phase: DetectorPhase::from(self.core.phase()),
                    });
                    tracing::info!(monitor_id = %self.core.service_id(), "Fitted the detector; monitoring starts.");
                    self.policy.request(Trigger::PhaseChange, Instant::now());
                }
                Err(error) => {
                    tracing::error!(monitor_id = %self.core.service_id(), %error, "The static fit failed.")
                }
            }
        }
        self.checkpoint_if_due();
    }

    /// Whether time passing alone can change anything: a checkpoint that
    /// can fall due or stall, required readings that can fall silent, held
    /// values that can expire. When none can, only a message (a batch, a
    /// commit report, a connection event) changes the state, and each of
    /// those re-arms the tick through [`ModelActor::arm`].
    fn needs_tick(&self) -> bool {
        !(self.halted || self.finished || self.quarantined())
            && (!self.policy.quiet()
                || self.silence.can_change()
                || self.core.aligner().held_values() > 0)
    }

    /// Starts the tick if something can fall due and it is not running.
    fn arm(&mut self, ctx: &mut Context<Self>) {
        if self.tick.is_none() && self.needs_tick() {
            self.tick = Some(ctx.run_interval(TICK, |act, ctx| act.tick(ctx)));
        }
    }

    fn tick(&mut self, ctx: &mut Context<Self>) {
        let _span = self.span.clone().entered();
        self.checks();
        if !self.needs_tick()
            && let Some(tick) = self.tick.take()
        {
            ctx.cancel_future(tick);
        }
    }

    fn checks(&mut self) {
        if self.halted || self.finished || self.quarantined() {
            return;
        }
        let now = Instant::now();
        let wall = Utc::now();
        // Expired values (and values cleared when a stall ended) reach the
        // metrics through the counters.
        self.core.expire(wall);
        self.tally.flush(self.core.counters(), &self.metrics);
        if self.policy.stalled(now) && !self.core.is_suspended() {
            tracing::warn!(
                monitor_id = %self.core.service_id(),
                seconds = self.policy.waiting(now).as_secs(),
                "No checkpoint committed within the timeout; the model stops advancing until one does."
            );
            if self.core.suspend(wall) {
                self.policy.request(Trigger::CoverageChange, Instant::now());
            }
        }
        let change = self.silence.check(wall);
        self.silence_changed(change);
        self.checkpoint_if_due();
        self.publish();
    }
}

impl Actor for ModelActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        let _span = self.span.clone().entered();
        self.arm(ctx);
    }
}

impl StreamHandler<Vec<RawMessage>> for ModelActor {
    fn handle(&mut self, messages: Vec<RawMessage>, ctx: &mut Self::Context) {
        let _span = self.span.clone().entered();
        for message in messages {
            if self.halted || self.quarantined() {
                // Quarantined: no graph call after the failing one.
                break;
            }
            self.consumed += 1;
            let now = message.processing_time(Instant::now());
            let parsed = message.observation(&self.format, self.max_payload_bytes);
            if parsed == Err(radar::mqtt::payload::PayloadRejection::TimestampUnit) {
                let m = &mut self.unit_mismatches;
                m.count += 1;
                if m.first.is_none() {
                    m.first = Some((message.reading, self.format.unit_hint(&message.payload)));
                }
            }
            let reading = parsed.as_ref().ok().map(|o| (o.reading, o.received_at));
            let step = self.core.ingest(parsed, now);
            if step.rejected.is_none()
                && let Some((reading, received_at)) = reading
            {
                self.silence.accepted(reading, received_at);
            }
            if step.frame.is_some() {
                let change = self.silence.frame(now);
                self.silence_changed(change);
            }
            self.record(&step);
            self.after_step(step);
        }
        self.tally.flush(self.core.counters(), &self.metrics);
        self.log_unit_mismatches();
        self.publish();
        self.arm(ctx);
    }

    /// The queue ended because ingestion stopped: take the last snapshot,
    /// unless quarantined (a quarantined monitor never seals again).
    fn finished(&mut self, _: &mut Self::Context) {
        let _span = self.span.clone().entered();
        if self.halted || self.finished || self.quarantined() {
            return;
        }
        self.checkpoint_now(Trigger::Shutdown, true);
        self.finished = true;
        self.publish();
        self.monitor.do_send(InputDrained);
    }
}

impl Handler<AttachInput> for ModelActor {
    type Result = ();

    fn handle(&mut self, msg: AttachInput, ctx: &mut Self::Context) {
        let _span = self.span.clone().entered();
        ctx.add_stream(ReceiverStream::new(msg.messages).ready_chunks(BATCH));
    }
}

impl Handler<SealNow> for ModelActor {
    type Result = Result<SealedNow, String>;

    fn handle(&mut self, msg: SealNow, ctx: &mut Self::Context) -> Self::Result {
        let _span = self.span.clone().entered();
        if self.halted {
            return Err("the monitor is halted".into());
        }
        if self.quarantined() {
            return Err("the monitor is quarantined; it never exports a snapshot again".into());
        }
        self.policy.request(msg.trigger, Instant::now());
        let (_, attempt) = self.policy.started(Instant::now());
        // The stall clock runs from here until the commit report.
        self.arm(ctx);
        let sealed = self.seal()?;
        Ok(SealedNow { sealed, attempt })
    }
}

impl Handler<ContinueAlarms> for ModelActor {
    type Result = ();

    fn handle(&mut self, msg: ContinueAlarms, _: &mut Self::Context) {
        self.core.continue_alarms_after(msg.after);
    }
}

impl Handler<CommitReport> for ModelActor {
    type Result = ();

    fn handle(&mut self, msg: CommitReport, ctx: &mut Self::Context) {
        let _span = self.span.clone().entered();
        if self.halted {
            return;
        }
        if msg.committed {
            self.policy.committed(msg.attempt);
            if self.core.resume(msg.wall) {
                tracing::info!(monitor_id = %self.core.service_id(), "A checkpoint committed again; the model advances.");
                self.policy.request(Trigger::CoverageChange, Instant::now());
            }
        } else {
            self.policy.failed(msg.attempt, msg.trigger, Instant::now());
        }
        self.publish();
        self.arm(ctx);
    }
}

impl Handler<BatchSettled> for ModelActor {
    type Result = ();

    fn handle(&mut self, msg: BatchSettled, ctx: &mut Self::Context) {
        if self.halted {
            return;
        }
        if msg.committed {
            self.policy.batch_committed();
        } else {
            self.policy.batch_failed(msg.started);
        }
        self.arm(ctx);
    }
}

impl Handler<Connection> for ModelActor {
    type Result = ();

    fn handle(&mut self, msg: Connection, ctx: &mut Self::Context) {
        let _span = self.span.clone().entered();
        if self.halted {
            return;
        }
        let mut changed = self.core.record_connection(&msg.event);
        match &msg.event {
            ConnectionEvent::Connected { at, .. } => self.silence.connected(*at),
            ConnectionEvent::Disconnected { at, .. } => {
                if let Some(change) = self.silence.disconnected(*at) {
                    changed |= self.core.record_silence(&change);
                }
            }
            _ => {}
        }
        if changed {
            self.policy.request(Trigger::CoverageChange, Instant::now());
            self.checkpoint_if_due();
        }
        self.publish();
        self.arm(ctx);
    }
}

impl Handler<Halt> for ModelActor {
    type Result = ();

    fn handle(&mut self, msg: Halt, ctx: &mut Self::Context) {
        let _span = self.span.clone().entered();
        tracing::info!(monitor_id = %self.core.service_id(), reason = %msg.reason, "Model halted.");
        self.halted = true;
        ctx.stop();
    }
}

/// Tells an observer about a flagged frame and an alarm event, in that order.
fn notify(observer: &Observer, monitor_id: uuid::Uuid, scored: &radar::detector::Scored) {
    if let Some(evidence) = &scored.evidence {
        observer.notify(Notice::Flagged {
            monitor_id,
            ts: evidence.ts,
            contributions: evidence.contributions.clone(),
        });
    }
    match scored.alarm_event {
        Some(AlarmEvent::Opened {
            seq,
            ts,
            peak_score,
        }) => observer.notify(Notice::AlarmOpened {
            monitor_id,
            seq,
            ts,
            peak_score,
        }),
        Some(AlarmEvent::Closed {
            seq,
            ts,
            peak_score,
        }) => observer.notify(Notice::AlarmClosed {
            monitor_id,
            seq,
            ts,
            peak_score,
        }),
        None => {}
    }
}

fn view_of(
    core: &MonitorCore,
    consumed: u64,
    coverage: Arc<radar::coverage::CoverageHistory>,
    recovery: Arc<radar::snapshot::RecoveryMetadata>,
    no_data: Option<String>,
) -> ModelView {
    ModelView {
        no_data,
        phase: core.phase(),
        processed: core.processed(),
        buffered: core.detector().map_or((0, 0), |d| d.buffered_frames()),
        consumed,
        suspended: core.is_suspended(),
        quarantine: core.quarantine().map(|d| {
            format!(
                "node {:?} ({}) failed uncertainly: {}",
                d.failed_node, d.node_type, d.reason
            )
        }),
        coverage,
        recovery,
        readings_seen: Vec::new(),
    }
}
