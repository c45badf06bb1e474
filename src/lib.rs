//! radar: streaming anomaly detection over MQTT sensor streams, with signed,
//! fenced recovery snapshots in PostgreSQL.
//!
//! # Layout
//! - [`config`]: worker settings (environment, key rules) and monitor definitions.
//! - [`align`]: admission of observations, watermarks and frames (pure).
//! - [`coverage`]: the versioned history of covered time and gaps (pure).
//! - [`detector`]: phases, static fit, calibrated threshold, alarms (pure).
//! - [`graph`]: graph definitions, the semantics hash, the executor and quarantine (pure).
//! - [`mqtt`]: per-monitor MQTT ingestion: reconnect owner, SUBACK checks,
//!   bounded ingress queue; [`mqtt::payload`] parses message bodies and routes
//!   topics to readings (pure).
//! - [`replay`]: a CSV file through the worker's runtime core, for backtests.
//! - [`runtime`]: a monitor's model side as a pure runtime (inputs in,
//!   effects out) with its lifecycle, the core it drives, checkpoint
//!   triggers, the start plan, shard assignment and exit reasons (pure).
//! - [`snapshot`]: signed recovery snapshots and their verification (pure).
//! - [`store`]: PostgreSQL: migrations and ledger, monitors, snapshots.
//! - [`telemetry`]: metric names, internal events, the monitor board behind readiness.
//! - [`tls`]: rustls client configurations for the broker and PostgreSQL.
//!
//! This crate has no actor runtime; `radar-actors` drives it.
//!
//! # Workspace
//! - `radar` (`src/`, this crate): the pure domain, the PostgreSQL store and MQTT ingestion.
//! - `radar-actors` (`actors/`): the actix actors and the `radar` binary.
//! - `radar-demo` (`demo/`): the simulated plant, its monitors and the embedded
//!   broker of `radar demo`.
//! - `radar-testkit` (`testkit/`): the helpers every test shares.
//! - `radar-bench` (`bench/`): benchmarks and the `radar-bench` harness.
//! - `radar-chaos` (`chaos/`): the fault-injection driver of `scripts/chaos`.

pub mod align;
pub mod config;
pub mod coverage;
pub mod detector;
pub mod graph;
pub mod mqtt;
pub mod replay;
pub mod runtime;
pub mod snapshot;
pub mod store;
pub mod telemetry;
pub mod tls;
