//! radar-bench: radar measured against the physical limits of the machine
//! it runs on.
//!
//! # Layout
//! - [`workload`]: monitor definitions, payloads, signals and real model
//!   states shared by the criterion benches (`benches/`) and the harness.
//! - [`mqtt`]: the frame publisher and the bare rumqttc subscribers (the
//!   ingest ceiling).
//! - [`db`]: a database of its own per benchmark, and its monitors.
//! - [`worker`]: a real `radar worker` process: readiness, metrics, /proc.
//! - [`ingest`], [`checkpoint`], [`recovery`], [`idle`]: the scenarios of the
//!   `radar-bench` binary, each measuring the product beside its ceiling
//!   in one run.
//! - [`system`], [`http`], [`stats`]: the machine, /proc, HTTP and numbers.
//! - `broker`: the private Mosquitto of the tests (`radar-testkit`).

pub use radar_testkit::broker;
pub mod checkpoint;
pub mod db;
pub mod http;
pub mod idle;
pub mod ingest;
pub mod mqtt;
pub mod recovery;
pub mod stats;
pub mod system;
pub mod worker;
pub mod workload;
