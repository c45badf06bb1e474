//! The health actor: reads only what the other actors published (never
//! waits on the model), decides the monitor's state, detects stalls, and
//! writes the operational status. Its database write compares the snapshot
//! signature without taking the row lock, so a heartbeat lands even while an
//! evidence transaction is blocked.

mod grid;
mod record;

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use actix::prelude::*;
use chrono::Utc;
use radar::telemetry::{MonitorTelemetry, RejectReason, events};
use radar::{
    mqtt::{IngressCounters, LinkStatus},
    store::{HealthOutcome, HealthRecord, HealthReporter, Heartbeats},
};
use tokio::sync::{Mutex, watch};
use uuid::Uuid;

pub use grid::first_beat;
use record::{Documents, Views};

use super::{
    MonitorActor,
    handlers::LostOwnership,
    messages::Halt,
    view::{CheckpointView, ModelView},
};

/// How often a monitor reports its health.
pub const HEARTBEAT: Duration = Duration::from_secs(2);
/// Queued input that has not moved for this long means the model is stalled.
pub const STALL_AFTER: Duration = Duration::from_secs(10);

/// The state label of a running monitor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunState {
    /// Not connected yet since it started.
    Starting,
    Running,
    Disconnected,
    /// Queued input is not progressing.
    Stalled,
    /// Checkpoints stopped committing; the model does not advance.
    CheckpointStalled,
    /// A graph node failed uncertainly; the failure is being recorded.
    Quarantined,
    /// Connected, but required readings delivered nothing for too long.
    NoData,
}

impl RunState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Starting => "starting",
            Self::Running => "running",
            Self::Disconnected => "disconnected",
            Self::Stalled => "stalled",
            Self::CheckpointStalled => "checkpoint_stalled",
            Self::Quarantined => "quarantined",
            Self::NoData => "no_data",
        }
    }
}

/// What the health actor reads.
pub struct HealthInputs {
    pub model: watch::Receiver<ModelView>,
    pub checkpoint: watch::Receiver<CheckpointView>,
    pub link: watch::Receiver<LinkStatus>,
    pub ingress: Arc<IngressCounters>,
}

impl HealthInputs {
    /// Runs `f` on the current views of the model, checkpoint and link,
    /// borrowed for the call only.
    fn with_views<R>(&self, f: impl FnOnce(&Views<'_>) -> R) -> R {
        let model = self.model.borrow();
        let checkpoint = self.checkpoint.borrow();
        let link = self.link.borrow();
        f(&Views {
            model: &model,
            checkpoint: &checkpoint,
            link: &link,
        })
    }
}

pub struct HealthActor {
    service_id: Uuid,
    inputs: HealthInputs,
    /// Held by a heartbeat while it writes, so the final report waits for
    /// one in flight instead of finding no reporter and writing nothing.
    /// `None`: writes disabled, or ownership lost.
    reporter: Arc<Mutex<Option<HealthReporter>>>,
    /// The worker's heartbeat batch: periodic writes go there, written
    /// with every other monitor's; `None`: each writes on its own.
    heartbeats: Option<Heartbeats>,
    monitor: Addr<MonitorActor>,
    ever_connected: bool,
    /// Messages consumed at the last check, and when that number last moved.
    progress: (u64, Instant),
    /// The state last assessed, to log and emit transitions once.
    state: RunState,
    /// Network-side rejections (unknown topic, too large) already counted
    /// in metrics; the model never sees those messages.
    network_rejected: (u64, u64),
    halted: bool,
    /// The recovery and coverage documents as last serialized: a record
    /// shares them (no copy, no serialization) until the model publishes
    /// new ones.
    documents: Documents,
    /// The record of the last heartbeat written: while the monitor's
    /// state is still that record, a heartbeat hands it in again as
    /// unchanged (no record built, its row's heartbeat time refreshed).
    written: Option<Arc<HealthRecord>>,
    metrics: MonitorTelemetry,
    span: tracing::Span,
}

impl HealthActor {
    pub fn new(
        service_id: Uuid,
        inputs: HealthInputs,
        reporter: Option<HealthReporter>,
        heartbeats: Option<Heartbeats>,
        monitor: Addr<MonitorActor>,
        metrics: MonitorTelemetry,
        span: tracing::Span,
    ) -> Self {
        Self {
            span,
            metrics,
            service_id,
            inputs,
            reporter: Arc::new(Mutex::new(reporter)),
            heartbeats,
            monitor,
            ever_connected: false,
            progress: (0, Instant::now()),
            state: RunState::Starting,
            network_rejected: (0, 0),
            halted: false,
            documents: Documents::default(),
            written: None,
        }
    }

    /// Decides the state from the published views.
    fn assess(&mut self) -> RunState {
        // Borrowed, not cloned: the view holds strings and a list of
        // readings, and nothing here outlives the borrow.
        let model = self.inputs.model.borrow();
        let connected = self.inputs.link.borrow().connected;
        let admitted = self.inputs.ingress.snapshot().admitted;
        let queued = admitted.saturating_sub(model.consumed);
        if model.consumed != self.progress.0 {
            self.progress = (model.consumed, Instant::now());
        }
        self.ever_connected |= connected;
        if model.quarantine.is_some() {
            RunState::Quarantined
        } else if queued > 0 && self.progress.1.elapsed() >= STALL_AFTER {
            RunState::Stalled
        } else if model.suspended {
            RunState::CheckpointStalled
        } else if connected && model.no_data.is_some() {
            RunState::NoData
        } else if connected {
            RunState::Running
        } else if self.ever_connected {
            RunState::Disconnected
        } else {
            RunState::Starting
        }
    }

    /// Emits the network side's rejections since the last heartbeat, so
    /// they are counted by reason like every other rejection.
    fn count_network_rejections(&mut self, unknown_topic: u64, too_large: u64) {
        let (seen_unknown, seen_large) = self.network_rejected;
        for (reason, count) in [
            (
                RejectReason::UnknownTopic,
                unknown_topic.saturating_sub(seen_unknown),
            ),
            (RejectReason::TooLarge, too_large.saturating_sub(seen_large)),
        ] {
            if count > 0 {
                self.metrics.emit(events::ObservationsReceived { count });
                self.metrics
                    .emit(events::ObservationsRejected { reason, count });
            }
        }
        self.network_rejected = (unknown_topic, too_large);
    }

    fn record(&mut self, state: RunState) -> HealthRecord {
        let documents = &mut self.documents;
        self.inputs
            .with_views(|views| documents.record(state, views, Utc::now()))
    }

    /// The record `state` has now, and whether it is the one last written
    /// (then shared, not rebuilt). Without the worker's batch every record
    /// is written in full, so none is taken as unchanged.
    fn current(&mut self, state: RunState) -> (Arc<HealthRecord>, bool) {
        if self.heartbeats.is_some()
            && let Some(written) = &self.written
        {
            let documents = &self.documents;
            if self
                .inputs
                .with_views(|views| documents.unchanged(written, state, views))
            {
                return (Arc::clone(written), true);
            }
        }
        (Arc::new(self.record(state)), false)
    }

    fn beat(&mut self, ctx: &mut Context<Self>) {
        let _span = self.span.clone().entered();
        if self.halted {
            return;
        }
        let state = self.assess();
        let previous = self.state;
        if previous != state {
            tracing::info!(monitor_id = %self.service_id, state = state.as_str(), "Monitor state changed.");
            match (previous, state) {
                (_, RunState::Stalled) => self.metrics.emit(events::MonitorStalled {
                    detail: "queued input is not progressing",
                }),
                (_, RunState::CheckpointStalled) => self.metrics.emit(events::MonitorStalled {
                    detail: "checkpoints are not committing; the model does not advance",
                }),
                (RunState::Stalled | RunState::CheckpointStalled, _) => {
                    self.metrics.emit(events::MonitorStallCleared)
                }
                _ => {}
            }
            if state == RunState::NoData {
                let detail = self.inputs.model.borrow().no_data.clone();
                self.metrics.emit(events::NoDataChanged {
                    detail: detail.as_deref(),
                });
            } else if previous == RunState::NoData {
                self.metrics.emit(events::NoDataChanged { detail: None });
            }
        }
        let ingress = self.inputs.ingress.snapshot();
        self.count_network_rejections(ingress.unknown_topic, ingress.too_large);
        let queued = ingress
            .admitted
            .saturating_sub(self.inputs.model.borrow().consumed);
        self.metrics.set_queue_depth(queued as usize);
        self.state = state;
        // The previous heartbeat is still writing: this one is skipped.
        let Ok(mut slot) = self.reporter.clone().try_lock_owned() else {
            return;
        };
        let Some(reporter) = slot.take() else {
            return;
        };
        let (record, unchanged) = self.current(state);
        let heartbeats = self.heartbeats.clone();
        async move {
            let outcome = match heartbeats {
                Some(heartbeats) if unchanged => {
                    heartbeats
                        .submit_unchanged(reporter, Arc::clone(&record), Utc::now())
                        .await
                }
                Some(heartbeats) => heartbeats.submit(reporter, Arc::clone(&record)).await,
                None => reporter.report(&record).await,
            };
            (slot, outcome, record)
        }
        .into_actor(self)
        .map(|(mut slot, outcome, record), act, _| {
            let _span = act.span.clone().entered();
            match outcome {
                HealthOutcome::Written(reporter) => {
                    *slot = Some(reporter);
                    act.written = Some(record);
                }
                HealthOutcome::Failed { reporter, error } => {
                    tracing::warn!(monitor_id = %act.service_id, %error, "Could not write the monitor's health status.");
                    *slot = Some(reporter);
                }
                HealthOutcome::OwnershipLost(lost) => {
                    act.monitor.do_send(LostOwnership { lost });
                }
            }
        })
        .spawn(ctx);
    }
}

impl Actor for HealthActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        let _span = self.span.clone().entered();
        self.beat(ctx);
        let first = first_beat(self.service_id, tokio::time::Instant::now());
        ctx.run_interval_at(first, HEARTBEAT, |act, ctx| act.beat(ctx));
    }
}

impl Handler<Halt> for HealthActor {
    type Result = ();

    fn handle(&mut self, _: Halt, ctx: &mut Self::Context) {
        let _span = self.span.clone().entered();
        self.halted = true;
        ctx.stop();
    }
}

/// Monitor -> health: write one last status row with the exit state.
#[derive(Message)]
#[rtype(result = "()")]
pub struct FinalReport {
    pub reason: radar::runtime::ExitReason,
}

impl Handler<FinalReport> for HealthActor {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, msg: FinalReport, _: &mut Self::Context) -> Self::Result {
        let _span = self.span.clone().entered();
        self.halted = true;
        let reporter = self.reporter.clone();
        let mut record = self.record(RunState::Running);
        record.state = msg.reason.state().to_string();
        record.connected = false;
        if let radar::runtime::ExitReason::Stopped = msg.reason {
        } else {
            record.last_error = Some(msg.reason.to_string());
        }
        let service_id = self.service_id;
        Box::pin(async move {
            // Waits for a heartbeat in flight: it would otherwise hold the
            // reporter, and could land after the final row.
            let mut slot = reporter.lock_owned().await;
            if let Some(reporter) = slot.take()
                && let HealthOutcome::Failed { error, .. } = reporter.report(&record).await
            {
                tracing::warn!(monitor_id = %service_id, %error, "Could not write the final status.");
            }
        })
    }
}
