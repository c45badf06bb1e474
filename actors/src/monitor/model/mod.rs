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
use radar::telemetry::{MonitorTelemetry, RejectReason, events};
use radar::{
    mqtt::payload::PayloadFormat,
    runtime::{CheckpointPolicy, Facts, Lifecycle, MonitorCore, Silence},
    snapshot::{CheckpointKey, ProcessingCounters, SnapshotBinding},
    store::PendingResults,
};
use tokio::sync::watch;

use super::{MonitorActor, checkpoint::CheckpointActor, view::ModelView};
use crate::worker::Observer;

mod handlers;
mod seal;
mod state;
mod timers;

pub use handlers::{
    AttachInput, BatchSettled, CheckpointNow, CommitReport, Connection, ContinueAlarms,
};

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
    /// The monitor's id, for the log lines of every state (a halted
    /// lifecycle keeps nothing else).
    id: uuid::Uuid,
    /// The model and what its state still allows: only a live one ingests,
    /// fits or seals.
    lifecycle: Lifecycle,
    binding: SnapshotBinding,
    key: Arc<CheckpointKey>,
    max_payload_bytes: usize,
    /// The monitor's `[payload]` table, compiled once.
    format: PayloadFormat,
    unit_mismatches: UnitMismatches,
    policy: CheckpointPolicy,
    checkpoint: Addr<CheckpointActor>,
    /// Alarms and evidence of the batch being handled, not yet sent: the
    /// next snapshot sealed in the batch carries them, or one `NewResults`
    /// at the batch's end.
    results: PendingResults,
    monitor: Addr<MonitorActor>,
    view: watch::Sender<ModelView>,
    observer: Option<Observer>,
    consumed: u64,
    /// The coverage history as last published; cloned again only when its
    /// version changes, so publishing a view per batch stays cheap.
    coverage: Arc<radar::coverage::CoverageHistory>,
    recovery: Arc<radar::snapshot::RecoveryMetadata>,
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
        let gap_pending_since = setup.core.recovery().restored_processed_count.and(
            setup
                .core
                .coverage()
                .last_restore()
                .map(|mark| mark.saved_at),
        );
        let mut actor = Self {
            coverage,
            recovery,
            id: setup.core.service_id(),
            lifecycle: Lifecycle::new(setup.core),
            binding: setup.binding,
            key: setup.key,
            max_payload_bytes: setup.max_payload_bytes,
            format,
            unit_mismatches: UnitMismatches::default(),
            policy: setup.policy,
            checkpoint: setup.checkpoint,
            results: PendingResults::default(),
            monitor: setup.monitor,
            view: setup.view,
            observer: setup.observer,
            consumed: 0,
            gap_pending_since,
            silence: silence_watch,
            tick: None,
            metrics: setup.metrics,
            tally,
            span: setup.span,
        };
        actor.publish();
        actor
    }

    /// The first view, before the actor exists.
    pub fn initial_view(core: &MonitorCore) -> ModelView {
        view_of(
            Facts::from(core),
            core.quarantine(),
            0,
            Arc::new(core.coverage().clone()),
            Arc::new(core.recovery().clone()),
            None,
        )
    }
}

impl Actor for ModelActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        let _span = self.span.clone().entered();
        self.arm(ctx);
    }
}

fn view_of(
    core: Facts<'_>,
    quarantine: Option<&radar::graph::FailureDiagnostics>,
    consumed: u64,
    coverage: Arc<radar::coverage::CoverageHistory>,
    recovery: Arc<radar::snapshot::RecoveryMetadata>,
    no_data: Option<String>,
) -> ModelView {
    ModelView {
        no_data,
        phase: core.phase(),
        processed: core.processed(),
        buffered: core.buffered_frames(),
        consumed,
        suspended: core.is_suspended(),
        quarantine: quarantine.map(|d| {
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
