//! radar-demo: the embedded demo of `radar demo`: a simulated plant, its
//! monitors, an in-process MQTT broker and a publisher that plays the plant
//! into the broker. It uses the `radar` library (monitor definitions, the
//! aligner and detector, the store); `radar-actors` runs it with a worker.
//!
//! # Layout
//! - `plant`: the pure, seeded simulation (noise, correlated readings,
//!   daily drift, scheduled faults with their windows).
//! - `monitors`: one valid monitor definition per simulated machine.
//! - `offline`: the plant through the worker's runtime core (`MonitorCore`),
//!   in simulated time (the demo's expectations, checked without IO).
//! - `broker`: an embedded rumqttd broker on a free loopback port.
//! - `database`: the demo's own database and its stable monitors.
//! - `publisher`: plays the plant into a broker at a chosen speed.

mod broker;
mod database;
mod monitors;
mod offline;
mod plant;
mod publisher;
mod rng;

pub use broker::{EmbeddedBroker, start_embedded_broker, start_embedded_broker_on};
pub use database::{
    DEFAULT_DEMO_DATABASE, DemoDatabase, DemoMonitor, MonitorOrigin, ReplaceReason,
    check_database_name, demo_monitors, in_memory_id, in_memory_monitors, prepare_database, redact,
    with_database,
};
pub use monitors::{
    CALIBRATION_FRAMES, TRAINING_FRAMES, detector_settings, monitor_config, monitor_configs,
    monitor_toml,
};
pub use offline::{OfflineAlarm, OfflineRun, run_offline, tick_time};
pub use plant::{
    DAY_SECONDS, FaultKind, FaultWindow, LEAK_BAR_PER_SECOND, Machine, Plant, PlantConfig,
    READINGS, ReadingSpec, STEP_AMPERES, Sample, TICK_SECONDS, leak_drop,
};
pub use publisher::{
    GATE_WAIT_MAX, MAX_SPEED, PublishOptions, PublishReport, WindowTimes, payload, publish_plant,
};

/// Why the demo cannot go on.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    #[error("demo configuration: {0}")]
    Config(String),
    #[error("embedded MQTT broker: {0}")]
    Broker(String),
    #[error("demo publisher: {0}")]
    Publish(String),
    #[error("PostgreSQL is not reachable at {0}")]
    Unreachable(String),
    #[error("demo database: {0}")]
    Database(String),
    #[error("offline run of demo monitor {monitor:?}: {reason}")]
    Offline { monitor: String, reason: String },
}
