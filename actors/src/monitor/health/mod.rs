//! A monitor's health: reads only what the other actors published (never
//! waits on the model), gathers the facts its state follows from
//! ([`radar::telemetry::HealthFacts`]: the one derivation, shared with the
//! health board), detects stalls, and writes the operational status. Its
//! database write compares the snapshot signature without taking the row
//! lock, so a heartbeat lands even while an evidence transaction is blocked.
//!
//! - `beat`: one monitor's beat (assessment, metrics, the record to write).
//! - `driver`: the worker's one timer that beats every monitor.
//! - `grid`: which monitors a tick beats.
//! - `record`: the status record and whether the last one written is current.
//! - this file: the actor that registers a monitor with the driver and
//!   writes its final status.

mod beat;
mod driver;
mod grid;
mod record;

use std::{sync::Arc, time::Duration};

use actix::prelude::*;
use chrono::Utc;
use radar::mqtt::{IngressCounters, LinkStatus};
use radar::store::{HealthOutcome, HealthReporter};
use radar::telemetry::{HealthFacts, MonitorState, MonitorTelemetry};
use tokio::sync::watch;
use uuid::Uuid;

use beat::Health;
pub use driver::HealthBeats;
use driver::{Shared, lock};
use record::Views;

use super::{
    MonitorActor,
    messages::Halt,
    view::{CheckpointView, ModelView},
};

/// How often a monitor's health is assessed; a record that changed is
/// written on the beat that sees the change.
pub const HEARTBEAT: Duration = Duration::from_secs(2);
/// How often the status row of a monitor whose record has not changed is
/// refreshed (its `heartbeat_at` moved on, its token checked): an idle
/// monitor costs its database one row this often, not one every
/// [`HEARTBEAT`]. Readers that judge an owner by its row's age
/// (`OWNER_SILENT_FOR`, the chaos check's bound) allow several of these.
pub const REFRESH_EVERY: Duration = Duration::from_secs(10);
/// Queued input that has not moved for this long means the model is stalled.
pub const STALL_AFTER: Duration = Duration::from_secs(10);

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

/// A monitor's health: its beats are the worker's driver's (see
/// [`HealthBeats`]); the actor only registers them and answers the
/// monitor's halt and final report.
pub struct HealthActor {
    health: Shared,
    beats: HealthBeats,
}

impl HealthActor {
    pub fn new(
        service_id: Uuid,
        inputs: HealthInputs,
        reporter: Option<HealthReporter>,
        beats: HealthBeats,
        monitor: Addr<MonitorActor>,
        metrics: MonitorTelemetry,
        span: tracing::Span,
    ) -> Self {
        let health = Health::new(
            service_id,
            inputs,
            reporter,
            beats.batched(),
            monitor.recipient(),
            metrics,
            span,
        );
        Self {
            health: Arc::new(std::sync::Mutex::new(health)),
            beats,
        }
    }
}

impl Actor for HealthActor {
    type Context = Context<Self>;

    fn started(&mut self, _: &mut Self::Context) {
        self.beats.register(&self.health);
    }

    fn stopped(&mut self, _: &mut Self::Context) {
        self.beats.unregister(&self.health);
    }
}

impl Handler<Halt> for HealthActor {
    type Result = ();

    fn handle(&mut self, _: Halt, ctx: &mut Self::Context) {
        // Halted first: a beat the driver takes before the actor is gone
        // writes nothing.
        lock(&self.health).halted = true;
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
        let mut health = lock(&self.health);
        health.halted = true;
        let reporter = Arc::clone(&health.reporter);
        let ended = HealthFacts {
            ended: Some(MonitorState::from(&msg.reason)),
            ..HealthFacts::default()
        };
        let mut record = health.record(ended, Utc::now());
        record.connected = false;
        if let radar::runtime::ExitReason::Stopped = msg.reason {
        } else {
            record.last_error = Some(msg.reason.to_string());
        }
        let service_id = health.service_id;
        drop(health);
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
