//! `radar-testkit`: the helpers radar's tests share, written once. A
//! dev-dependency of `radar` and `radar-actors` (and a dependency of the
//! chaos driver and of `radar-bench`, which are test and measuring programs
//! themselves); never part of a release.
//!
//! Layout, one responsibility a module:
//! - [`db`]: a fresh database per test on the shared cluster (or any server).
//! - [`postgres`]: a private PostgreSQL cluster a test may stop, crash,
//!   pause and restart.
//! - [`broker`]: a private Mosquitto on a free port (listener options, kill,
//!   graceful restart) and a scripted fake broker.
//! - [`ingest`]: options, topic prefixes and event reads for tests that
//!   drive `radar::mqtt` in-process.
//! - [`publisher`]: one message with its PUBACK, and a publisher of
//!   complete frames.
//! - [`poll`]: the one poll-until-deadline loop; a timeout says what it
//!   waited for and what it last saw.
//! - [`monitor`]: the monitor-file builder.
//! - [`worker`]: the `radar` command and the worker-process builder.
//! - [`harness`]: one worker test's world (database, broker, directory) and
//!   the CLI reads tests assert on; [`telemetry`]: the synchronous variant
//!   the telemetry tests use.
//! - [`heartbeat`]: status heartbeats handed to a batch as the worker does.
//! - [`rows`]: the snapshot row, other sessions, row locks and a kept
//!   snapshot written back as another writer's successor;
//!   [`audit`]: the write-audit triggers.
//! - [`http`] and [`exposition`]: `/metrics` fetched and parsed.
//! - [`graph`]: the example graph and graph-store fixtures; [`certs`]: a
//!   throwaway certificate authority.
//! - [`workspace`]: the workspace members as the manifests declare them.
//!
//! `anyhow`, `expect` and panics are fine here: a helper that fails says
//! what it did or waited for and what it saw, which is what a red test
//! needs.

pub mod audit;
pub mod broker;
pub mod certs;
pub mod db;
pub mod exposition;
pub mod graph;
pub mod harness;
pub mod heartbeat;
pub mod http;
pub mod ingest;
pub mod monitor;
pub mod poll;
pub mod postgres;
pub mod publisher;
pub mod rows;
pub mod telemetry;
pub mod worker;
pub mod workspace;

/// What the worker tests use most, for `use radar_testkit::prelude::*`.
pub mod prelude {
    pub use crate::{
        audit::{AuditRow, audit, install_write_audit},
        broker::Mosquitto,
        db,
        harness::*,
        ingest::unique_prefix,
        monitor::WARMUP_FRAMES,
        poll::{self, wait_until},
        publisher::Publisher,
        rows::*,
        worker::Worker,
    };
}
