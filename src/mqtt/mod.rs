//! MQTT ingestion of one monitor: connection options, the reconnect owner
//! that subscribes and checks every SUBACK, and the bounded ingress queue
//! that carries raw payloads to the model side.
//!
//! # Layout
//! - [`payload`]: parsing a message body and routing its topic (pure).
//! - `options`: broker URL, client id, limits ([`IngestOptions`]).
//! - `backoff`: the reconnect schedule ([`Backoff`]), pure.
//! - `subscriptions`: which SUBACKs are still missing, pure.
//! - `ingress`: stamping, topic mapping and size check of a PUBLISH, and the
//!   shared counters.
//! - [`session`]: the reconnect session as a pure state machine: inputs
//!   from the event loop in, actions out (no IO, no clock, no client).
//! - `owner`: the task that owns the rumqttc event loop ([`spawn`]) and
//!   carries out the session's actions: the one place that does IO.
//! - `pointer`: a JSON pointer resolved over raw message text (pure).
//! - `diagnose`: a failed attempt as a sentence an operator can act on (pure).
//! - `events`: what the owner reports ([`ConnectionEvent`], [`LinkStatus`]).

pub mod payload;
pub mod session;

mod backoff;
mod diagnose;
mod error;
mod events;
mod ingress;
mod options;
mod owner;
mod pointer;
mod subscriptions;

pub use backoff::Backoff;
pub use error::MqttError;
pub use events::{ConnectionEvent, LinkStatus};
pub use ingress::{IngressCounters, IngressCounts, RawMessage, admit};
pub use options::{BrokerAddress, IngestOptions, MqttTls, client_id};
pub use owner::{Ingestion, IngestionControl, spawn};
pub use subscriptions::{SubackOutcome, Subscriptions, TopicSubscription};
