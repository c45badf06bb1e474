//! The ingestion actor: owns the MQTT reconnect owner of one monitor (a
//! task on the IO arbiter that admits messages into the bounded queue) and
//! relays its connection events to the model, which records outages in
//! the coverage history.

use actix::prelude::*;
use radar::{
    mqtt::{ConnectionEvent, IngestionControl},
    telemetry::{MonitorTelemetry, events},
};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use uuid::Uuid;

use super::model::{Connection, ModelActor};

pub struct IngestionActor {
    service_id: Uuid,
    control: Option<IngestionControl>,
    model: Addr<ModelActor>,
    events: Option<mpsc::Receiver<ConnectionEvent>>,
    metrics: MonitorTelemetry,
    span: tracing::Span,
}

/// Stops ingestion: unsubscribe, disconnect, close the queue. Resolves when done.
#[derive(Message)]
#[rtype(result = "()")]
pub struct StopIngestion;

impl IngestionActor {
    pub fn new(
        service_id: Uuid,
        control: IngestionControl,
        events: mpsc::Receiver<ConnectionEvent>,
        model: Addr<ModelActor>,
        metrics: MonitorTelemetry,
        span: tracing::Span,
    ) -> Self {
        Self {
            span,
            metrics,
            service_id,
            control: Some(control),
            model,
            events: Some(events),
        }
    }
}

impl Actor for IngestionActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        let _span = self.span.clone().entered();
        if let Some(events) = self.events.take() {
            ctx.add_stream(ReceiverStream::new(events));
        }
    }
}

impl StreamHandler<ConnectionEvent> for IngestionActor {
    fn handle(&mut self, event: ConnectionEvent, _: &mut Self::Context) {
        let _span = self.span.clone().entered();
        match &event {
            ConnectionEvent::Connected { attempt, .. } => {
                tracing::info!(monitor_id = %self.service_id, attempt, "Connected: every subscription is acknowledged.")
            }
            ConnectionEvent::Disconnected { reason, .. } => {
                tracing::warn!(monitor_id = %self.service_id, %reason, "Lost the MQTT connection; the outage is recorded as a coverage gap.")
            }
            ConnectionEvent::SubscriptionRefused {
                topic, required, ..
            } => {
                tracing::error!(monitor_id = %self.service_id, %topic, required, "The broker refused a subscription; check the broker's ACL for this topic.")
            }
            ConnectionEvent::Retrying {
                next_attempt,
                retry_in,
                reason,
                ..
            } => {
                tracing::warn!(monitor_id = %self.service_id, next_attempt, retry_in_s = retry_in.as_secs_f64(), %reason, "MQTT connection attempt failed; retrying.")
            }
            ConnectionEvent::Stopped { .. } => {
                tracing::info!(monitor_id = %self.service_id, "MQTT ingestion stopped.")
            }
        }
        self.metrics.emit(events::ConnectionChanged(&event));
        self.model.do_send(Connection { event });
    }

    fn finished(&mut self, _: &mut Self::Context) {}
}

impl Handler<StopIngestion> for IngestionActor {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, _: StopIngestion, _: &mut Self::Context) -> Self::Result {
        let _span = self.span.clone().entered();
        let control = self.control.take();
        Box::pin(async move {
            if let Some(control) = control {
                control.stop().await;
            }
        })
    }
}
