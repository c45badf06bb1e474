//! The reconnect owner: the one task that polls a monitor's MQTT event loop.
//! It connects, subscribes and checks every SUBACK, admits PUBLISHes into
//! the bounded ingress queue, and after any failure waits on the backoff
//! schedule before the next attempt (rumqttc would otherwise reconnect at
//! once and spin). It is the only place here that does network IO.
//!
//! Back-pressure is the owner not polling: while the queue is full it waits
//! for a slot, rumqttc reads nothing more, QoS 1 acknowledgements stop and
//! the broker holds the backlog. Keep-alive pings stop too, so a model that
//! stalls for longer than about the keep-alive interval can cost the
//! connection; that is then an ordinary outage (reported, retried).

use std::{ops::ControlFlow, sync::Arc, time::Instant};

use chrono::{DateTime, Utc};
use rumqttc::{AsyncClient, ConnAck, Event, EventLoop, Outgoing, Packet, Publish, QoS, SubAck};
use tokio::{
    sync::{
        mpsc::{self, error::TrySendError},
        watch,
    },
    task::JoinHandle,
    time::{sleep, sleep_until},
};
use tracing::{debug, info, warn};

use super::{
    ConnectionEvent, IngestOptions, IngressCounters, LinkStatus, MqttError, RawMessage, diagnose,
    ingress,
    payload::TopicRoutes,
    subscriptions::{SubackOutcome, Subscriptions, TopicSubscription},
};
use crate::config::ReadingConfig;

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
    let (client, eventloop) = AsyncClient::new(options.to_mqtt_options(), request_capacity);
    let mut eventloop = eventloop;
    eventloop
        .network_options
        .set_connection_timeout(options.handshake_timeout.as_secs().max(1));
    let owner = Owner {
        routes: TopicRoutes::new(readings),
        subscriptions: Subscriptions::new(
            readings
                .iter()
                .map(|r| TopicSubscription {
                    topic: r.topic.clone(),
                    required: r.required,
                })
                .collect(),
        ),
        topics,
        options,
        client,
        eventloop,
        queue,
        events: event_tx,
        status: status_tx,
        counters: Arc::clone(&counters),
        stop: stop_rx,
        burst: Vec::with_capacity(BURST),
        last_packet: Utc::now(),
    };
    let task = tokio::spawn(owner.run());
    Ok(Ingestion {
        messages,
        events,
        status,
        counters,
        control: IngestionControl { stop, task },
    })
}

/// How far the current connection got: `established` once every
/// subscription is acknowledged.
#[derive(Default)]
struct Handshake {
    connack_seen: bool,
    established: bool,
}

/// How one connection attempt or session ended.
enum SessionEnd {
    StopRequested,
    ConsumerGone,
    Lost { reason: String, established: bool },
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
    subscriptions: Subscriptions,
    client: AsyncClient,
    eventloop: EventLoop,
    queue: mpsc::Sender<RawMessage>,
    events: mpsc::Sender<ConnectionEvent>,
    status: watch::Sender<LinkStatus>,
    counters: Arc<IngressCounters>,
    stop: watch::Receiver<bool>,
    /// Admitted messages of the current read, not queued yet.
    burst: Vec<RawMessage>,
    /// When the broker last sent anything (message, PINGRESP, ack).
    last_packet: DateTime<Utc>,
}

impl Owner {
    async fn run(mut self) {
        let monitor = self.options.monitor.clone();
        // Attempts and backoff waits in the current outage; both restart
        // when an established connection drops.
        let mut attempts: u32 = 0;
        let mut waits: u32 = 0;
        loop {
            attempts = attempts.saturating_add(1);
            self.counters.connect_attempt();
            let (reason, established) = match self.session(attempts).await {
                SessionEnd::StopRequested | SessionEnd::ConsumerGone => break,
                SessionEnd::Lost {
                    reason,
                    established,
                } => (reason, established),
            };
            if established {
                // A link that died silently is noticed only by the
                // keep-alive: the outage began at the last sign of life.
                let silent_ms = (Utc::now() - self.last_packet).num_milliseconds().max(0);
                warn!(
                    monitor_id = %monitor, reason = %reason, silent_before_ms = silent_ms,
                    "MQTT connection lost; the outage is dated from the last packet received; reconnecting on the backoff schedule."
                );
                attempts = 0;
                waits = 0;
                self.set_status(false, 0, Some(reason.clone()));
                self.emit(ConnectionEvent::Disconnected {
                    at: self.last_packet,
                    reason: reason.clone(),
                })
                .await;
            } else {
                self.set_status(false, attempts, Some(reason.clone()));
            }
            let retry_in = self.options.backoff.delay(waits);
            waits = waits.saturating_add(1);
            warn!(
                monitor_id = %monitor, reason = %reason, failed_attempts = attempts,
                retry_in_ms = u64::try_from(retry_in.as_millis()).unwrap_or(u64::MAX),
                "MQTT ingestion not connected; retrying after the backoff."
            );
            self.emit(ConnectionEvent::Retrying {
                at: Utc::now(),
                next_attempt: attempts.saturating_add(1),
                retry_in,
                reason,
            })
            .await;
            tokio::select! {
                biased;
                () = stop_requested(&mut self.stop) => break,
                () = sleep(retry_in) => {}
            }
        }
        self.stop_gracefully().await;
    }

    /// One connection: connect, subscribe, then stream until it fails or
    /// ingestion ends. `attempt` is this attempt's number in the outage.
    /// Messages the broker delivered (and rumqttc acknowledged) are queued
    /// whatever ends the session; at a stop only as far as the queue has
    /// room, as before a stop nothing waits for the model any more.
    async fn session(&mut self, attempt: u32) -> SessionEnd {
        let end = self.stream(attempt).await;
        match end {
            SessionEnd::Lost { .. } => match self.queue_burst().await {
                Admission::Done => end,
                Admission::StopRequested => SessionEnd::StopRequested,
                Admission::ConsumerGone => SessionEnd::ConsumerGone,
            },
            SessionEnd::StopRequested => {
                self.queue_burst_if_room();
                end
            }
            SessionEnd::ConsumerGone => end,
        }
    }

    async fn stream(&mut self, attempt: u32) -> SessionEnd {
        let mut handshake = Handshake::default();
        let deadline = tokio::time::Instant::now() + self.options.handshake_timeout;
        loop {
            let polled = tokio::select! {
                biased;
                () = stop_requested(&mut self.stop) => return SessionEnd::StopRequested,
                () = sleep_until(deadline), if !handshake.established => {
                    let waiting = self.subscriptions.unacknowledged().join(", ");
                    self.eventloop.clean();
                    return SessionEnd::Lost {
                        reason: format!(
                            "no CONNACK or SUBACK within {:?} (waiting for: {waiting})",
                            self.options.handshake_timeout
                        ),
                        established: handshake.established,
                    };
                }
                polled = self.eventloop.poll() => polled,
            };
            let event = match polled {
                Ok(event) => {
                    if matches!(event, Event::Incoming(_)) {
                        self.last_packet = Utc::now();
                    }
                    event
                }
                Err(e) => {
                    return SessionEnd::Lost {
                        reason: self.describe(&e, handshake.connack_seen),
                        established: handshake.established,
                    };
                }
            };
            if let ControlFlow::Break(end) = self.on_event(event, attempt, &mut handshake).await {
                return end;
            }
            // The read is used up (the next poll waits on the socket), or
            // the burst is full: queue what it delivered.
            if !self.burst.is_empty()
                && (self.eventloop.state.events.is_empty() || self.burst.len() >= BURST)
            {
                match self.queue_burst().await {
                    Admission::Done => {}
                    Admission::StopRequested => return SessionEnd::StopRequested,
                    Admission::ConsumerGone => return SessionEnd::ConsumerGone,
                }
            }
        }
    }

    /// One event of the connection; `Break` ends the session.
    async fn on_event(
        &mut self,
        event: Event,
        attempt: u32,
        handshake: &mut Handshake,
    ) -> ControlFlow<SessionEnd> {
        match event {
            Event::Incoming(Packet::ConnAck(ack)) => {
                return self.on_connack(&ack, attempt, handshake).await;
            }
            Event::Outgoing(Outgoing::Subscribe(pkid)) => {
                self.subscriptions.on_subscribe_sent(pkid);
            }
            Event::Incoming(Packet::SubAck(ack)) => {
                return self.on_suback(&ack, attempt, handshake).await;
            }
            Event::Incoming(Packet::Publish(publish)) => self.admit(publish),
            _ => {}
        }
        ControlFlow::Continue(())
    }

    /// The broker accepted the connection: subscribe to every topic not
    /// yet acknowledged (none left when the session was kept).
    async fn on_connack(
        &mut self,
        ack: &ConnAck,
        attempt: u32,
        handshake: &mut Handshake,
    ) -> ControlFlow<SessionEnd> {
        handshake.connack_seen = true;
        debug!(monitor_id = %self.options.monitor, session_present = ack.session_present, "MQTT CONNACK received; subscribing.");
        for topic in self.subscriptions.on_connected() {
            if let Err(e) = self.client.try_subscribe(topic, QoS::AtLeastOnce) {
                self.eventloop.clean();
                return ControlFlow::Break(SessionEnd::Lost {
                    reason: format!("could not queue a SUBSCRIBE: {e}"),
                    established: handshake.established,
                });
            }
        }
        if self.subscriptions.announce_if_complete() {
            handshake.established = true;
            self.on_established(attempt).await;
        }
        ControlFlow::Continue(())
    }

    /// A SUBACK: the connection is established once every subscription is
    /// acknowledged; a refused required reading drops the connection.
    async fn on_suback(
        &mut self,
        ack: &SubAck,
        attempt: u32,
        handshake: &mut Handshake,
    ) -> ControlFlow<SessionEnd> {
        match self.subscriptions.on_suback(ack.pkid, &ack.return_codes) {
            SubackOutcome::Progress => {}
            SubackOutcome::AllAcknowledged => {
                handshake.established = true;
                self.on_established(attempt).await;
            }
            SubackOutcome::Refused { topic } => {
                let error = MqttError::SubscriptionRefused {
                    monitor: self.options.monitor.clone(),
                    topic: topic.clone(),
                };
                warn!(monitor_id = %self.options.monitor, topic = %topic, "MQTT broker refused a subscription; the monitor stays disconnected.");
                self.counters.subscription_refused();
                self.emit(ConnectionEvent::SubscriptionRefused {
                    at: Utc::now(),
                    topic,
                    required: true,
                })
                .await;
                // Drop the connection: the retry starts a new one.
                self.eventloop.clean();
                return ControlFlow::Break(SessionEnd::Lost {
                    reason: error.to_string(),
                    established: handshake.established,
                });
            }
            SubackOutcome::OptionalRefused { topic } => {
                warn!(monitor_id = %self.options.monitor, topic = %topic, "MQTT broker refused an optional reading's subscription; frames do not need it.");
                self.counters.subscription_refused();
                self.emit(ConnectionEvent::SubscriptionRefused {
                    at: Utc::now(),
                    topic,
                    required: false,
                })
                .await;
            }
            SubackOutcome::Unexpected { pkid } => {
                warn!(monitor_id = %self.options.monitor, pkid, "MQTT SUBACK for no pending SUBSCRIBE ignored.");
            }
        }
        ControlFlow::Continue(())
    }

    fn describe(&self, error: &rumqttc::ConnectionError, connack_seen: bool) -> String {
        let login = self.options.credentials.as_ref();
        diagnose::describe(
            error,
            diagnose::Attempt {
                username: login.map(|l| l.username.as_str()),
                password_sent: login.is_some_and(|l| l.password.is_some()),
                tls: self.options.tls.is_some(),
                connack_seen,
            },
        )
    }

    async fn on_established(&mut self, attempt: u32) {
        info!(monitor_id = %self.options.monitor, topics = self.topics.len(), attempt, "MQTT subscriptions acknowledged; monitor connected.");
        self.counters.connected();
        self.set_status(true, 0, None);
        self.emit(ConnectionEvent::Connected {
            at: Utc::now(),
            attempt,
        })
        .await;
    }

    /// Stamps and checks one PUBLISH and adds it to the burst.
    fn admit(&mut self, publish: Publish) {
        let (received_at, received_instant) = (Utc::now(), Instant::now());
        self.counters.received();
        match ingress::admit(
            &self.routes,
            self.options.max_payload_bytes,
            publish,
            received_at,
            received_instant,
        ) {
            Ok(message) => self.burst.push(message),
            Err(why) => {
                debug!(monitor_id = %self.options.monitor, reason = why.as_str(), "MQTT message rejected.");
                self.counters.rejected(why);
            }
        }
    }

    /// Queues the burst in order. While the queue is full the owner waits
    /// here and does not poll, so the broker stops delivering.
    async fn queue_burst(&mut self) -> Admission {
        let mut burst = std::mem::take(&mut self.burst);
        let mut outcome = Admission::Done;
        for message in burst.drain(..) {
            match self.queue.try_send(message) {
                Ok(()) => {}
                Err(TrySendError::Closed(_)) => {
                    outcome = Admission::ConsumerGone;
                    break;
                }
                Err(TrySendError::Full(message)) => {
                    let blocked = Instant::now();
                    tokio::select! {
                        biased;
                        () = stop_requested(&mut self.stop) => {
                            outcome = Admission::StopRequested;
                            break;
                        }
                        sent = self.queue.send(message) => {
                            if sent.is_err() {
                                outcome = Admission::ConsumerGone;
                                break;
                            }
                        }
                    }
                    let micros = u64::try_from(blocked.elapsed().as_micros()).unwrap_or(u64::MAX);
                    self.counters.waited_for_queue(micros);
                }
            }
            self.count_admitted();
        }
        // Empty (the drain dropped what was not queued); its allocation
        // serves the next burst.
        self.burst = burst;
        outcome
    }

    /// At a stop: queues what fits without waiting for the model.
    fn queue_burst_if_room(&mut self) {
        let mut burst = std::mem::take(&mut self.burst);
        for message in burst.drain(..) {
            if self.queue.try_send(message).is_err() {
                break;
            }
            self.count_admitted();
        }
    }

    /// One message entered the queue; records how full it is now.
    fn count_admitted(&self) {
        let queued = self.options.queue_capacity - self.queue.capacity();
        self.counters.admitted(queued);
    }

    /// Unsubscribes and disconnects if a connection is up, bounded by the
    /// handshake timeout; then the owner ends and drops the queue sender.
    async fn stop_gracefully(mut self) {
        let monitor = self.options.monitor.clone();
        if self.eventloop.network.is_some() {
            for topic in &self.topics {
                if let Err(e) = self.client.try_unsubscribe(topic.as_str()) {
                    debug!(monitor_id = %monitor, error = %e, "MQTT UNSUBSCRIBE not queued.");
                }
            }
            if let Err(e) = self.client.try_disconnect() {
                debug!(monitor_id = %monitor, error = %e, "MQTT DISCONNECT not queued.");
            }
            let deadline = tokio::time::Instant::now() + self.options.handshake_timeout;
            loop {
                tokio::select! {
                    () = sleep_until(deadline) => {
                        warn!(monitor_id = %monitor, "MQTT DISCONNECT not sent in time; closing the socket.");
                        break;
                    }
                    polled = self.eventloop.poll() => match polled {
                        Ok(Event::Outgoing(Outgoing::Disconnect)) | Err(_) => break,
                        // Ingestion has ended: late messages are not admitted.
                        Ok(_) => {}
                    },
                }
            }
        }
        self.set_status(false, 0, None);
        info!(monitor_id = %monitor, "MQTT ingestion stopped.");
        // Never wait here: the monitor may have stopped reading events.
        let _ = self
            .events
            .try_send(ConnectionEvent::Stopped { at: Utc::now() });
    }

    fn set_status(&self, connected: bool, failed_attempts: u32, last_error: Option<String>) {
        self.status.send_modify(|s| {
            if s.connected != connected {
                s.since = Utc::now();
            }
            s.connected = connected;
            s.failed_attempts = failed_attempts;
            if last_error.is_some() || connected {
                s.last_error = last_error;
            }
        });
    }

    /// Sends an event, waiting while the channel is full (events are rare and
    /// must not be lost) unless a stop is requested. A monitor that dropped
    /// the receiver does not want them.
    async fn emit(&mut self, event: ConnectionEvent) {
        tokio::select! {
            biased;
            _ = self.events.send(event) => {}
            () = stop_requested(&mut self.stop) => {}
        }
    }
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
