//! The reconnect owner: the one task that polls a monitor's MQTT event loop.
//! It feeds what the event loop reports to the monitor's [`Session`] (the
//! pure state machine that decides when to subscribe, when the monitor is
//! connected, when to drop the connection and how long to back off) and
//! carries out the session's actions: subscribing, admitting PUBLISHes into
//! the bounded ingress queue, reporting, waiting before the next attempt
//! (rumqttc would otherwise reconnect at once and spin). It is the only
//! place here that does network IO.
//!
//! - `run`: the loop (the next input, the actions, the graceful stop).
//! - `actions`: carrying out one action.
//! - `admission`: the burst and the queue.
//! - `status`: the link status and the event channel.
//!
//! Back-pressure is the owner not polling: while the queue is full it waits
//! for a slot, rumqttc reads nothing more, QoS 1 acknowledgements stop and
//! the broker holds the backlog. Keep-alive pings stop too, so a model that
//! stalls for longer than about the keep-alive interval can cost the
//! connection; that is then an ordinary outage (reported, retried).

use std::{collections::VecDeque, sync::Arc};

use chrono::Utc;
use rumqttc::{AsyncClient, EventLoop};
use tokio::{
    sync::{mpsc, watch},
    task::JoinHandle,
};
use tracing::warn;

use super::{
    ConnectionEvent, IngestOptions, IngressCounters, LinkStatus, MqttError, RawMessage,
    payload::TopicRoutes,
    session::{Session, SessionConfig},
    subscriptions::TopicSubscription,
};
use crate::config::ReadingConfig;

mod actions;
mod admission;
mod run;
mod status;

/// Room in the connection-event channel; events are rare, so a full channel
/// means the monitor stopped reading them and the owner waits.
const EVENT_CAPACITY: usize = 64;

/// Most admitted messages held back before they are queued. rumqttc reads
/// every packet the socket has ready in one go; what one read delivered is
/// queued together, so the model thread is woken about once per read
/// instead of once per message.
const BURST: usize = 64;

/// A running ingestion: the queue and event receivers for the model side,
/// the status and counters for health, and the control to stop it.
pub struct Ingestion {
    /// Admitted messages; ends (returns `None`) after the owner stopped.
    pub messages: mpsc::Receiver<RawMessage>,
    pub events: mpsc::Receiver<ConnectionEvent>,
    pub status: watch::Receiver<LinkStatus>,
    pub counters: Arc<IngressCounters>,
    pub control: IngestionControl,
}

/// Stops the owner. Dropping it also stops the owner.
pub struct IngestionControl {
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl IngestionControl {
    /// Asks the owner to unsubscribe, disconnect and end.
    pub fn request_stop(&self) {
        self.stop.send_replace(true);
    }

    /// Requests the stop and waits until the owner has ended and dropped the
    /// queue sender.
    pub async fn stop(self) {
        self.request_stop();
        if let Err(e) = self.task.await {
            warn!(error = %e, "MQTT ingestion task ended abnormally.");
        }
    }
}

/// Starts the reconnect owner of one monitor as a task on the current Tokio
/// runtime (an actix arbiter runs one), so it must be called inside it.
/// Messages carry the index of their reading in `readings`.
pub fn spawn(options: IngestOptions, readings: &[ReadingConfig]) -> Result<Ingestion, MqttError> {
    options.validate()?;
    let topics: Vec<String> = readings.iter().map(|r| r.topic.clone()).collect();
    let (queue, messages) = mpsc::channel(options.queue_capacity);
    let (event_tx, events) = mpsc::channel(EVENT_CAPACITY);
    let (status_tx, status) = watch::channel(LinkStatus {
        connected: false,
        since: Utc::now(),
        failed_attempts: 0,
        last_error: None,
    });
    let (stop, stop_rx) = watch::channel(false);
    let counters = Arc::new(IngressCounters::default());
    // Per connection the owner queues one request per topic, and at shutdown
    // one per topic plus a DISCONNECT; nothing else goes through the channel.
    let request_capacity = topics.len().saturating_mul(2).saturating_add(8);
    let mut mqtt_options = options.to_mqtt_options();
    // The monitor never publishes, so rumqttc's in-flight window only
    // numbers its SUBSCRIBE and UNSUBSCRIBE packets (ids cycle through
    // 1..=inflight). As many as the request channel holds keeps every id on
    // the wire distinct, where rumqttc's default of 100 would fill a
    // 100-slot table of outgoing publishes (about 7 KiB per monitor) that
    // stays empty.
    mqtt_options.set_inflight(u16::try_from(request_capacity).unwrap_or(u16::MAX));
    let (client, eventloop) = connection(mqtt_options, request_capacity, options.handshake_timeout);
    let (session, first) = Session::new(
        SessionConfig {
            monitor: options.monitor.clone(),
            topics: readings
                .iter()
                .map(|r| TopicSubscription {
                    topic: r.topic.clone(),
                    required: r.required,
                })
                .collect(),
            backoff: options.backoff,
            handshake_timeout: options.handshake_timeout,
        },
        run::now(),
    );
    let owner = Owner {
        routes: TopicRoutes::new(readings),
        session,
        topics,
        options,
        client,
        eventloop,
        queue,
        events: event_tx,
        status: status_tx,
        counters: Arc::clone(&counters),
        stop: stop_rx,
        // Grows to what the monitor's bursts need; an idle monitor reserves
        // nothing.
        burst: Vec::new(),
    };
    let task = tokio::spawn(owner.run(first));
    Ok(Ingestion {
        messages,
        events,
        status,
        counters,
        control: IngestionControl { stop, task },
    })
}

/// The client and event loop of one monitor's connection.
fn connection(
    mqtt_options: rumqttc::MqttOptions,
    request_capacity: usize,
    handshake_timeout: std::time::Duration,
) -> (AsyncClient, EventLoop) {
    let (client, mut eventloop) = AsyncClient::new(mqtt_options, request_capacity);
    eventloop
        .network_options
        .set_connection_timeout(handshake_timeout.as_secs().max(1));
    // rumqttc reserves room for 100 events (about 14 KiB) in every event
    // loop. The packets of one socket read land there and the owner takes
    // them before the next read, so an empty queue that grows to what the
    // monitor's reads deliver holds the same events; an idle monitor then
    // reserves nothing.
    eventloop.state.events = VecDeque::new();
    (client, eventloop)
}

/// Whether the messages reached the queue or ingestion must end.
enum Admission {
    Done,
    StopRequested,
    ConsumerGone,
}

struct Owner {
    options: IngestOptions,
    topics: Vec<String>,
    routes: TopicRoutes,
    session: Session,
    client: AsyncClient,
    eventloop: EventLoop,
    queue: mpsc::Sender<RawMessage>,
    events: mpsc::Sender<ConnectionEvent>,
    status: watch::Sender<LinkStatus>,
    counters: Arc<IngressCounters>,
    stop: watch::Receiver<bool>,
    /// Admitted messages of the current read, not queued yet.
    burst: Vec<RawMessage>,
}

/// Resolves once a stop was requested or the control was dropped.
async fn stop_requested(stop: &mut watch::Receiver<bool>) {
    loop {
        if *stop.borrow_and_update() {
            return;
        }
        if stop.changed().await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_new_connection_reserves_no_event_queue() {
        let options = rumqttc::MqttOptions::new("radar-test", "127.0.0.1", 1883);
        let (_client, eventloop) = connection(options, 10, Duration::from_secs(7));
        assert_eq!(eventloop.state.events.capacity(), 0);
        assert_eq!(
            eventloop.network_options.connection_timeout(),
            7,
            "the handshake timeout bounds the connection attempt"
        );
    }
}
