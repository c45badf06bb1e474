//! Logs through `tracing`: human text by default, JSON for machines.

use radar::config::LogFormat;
use tracing_subscriber::{EnvFilter, fmt};

/// Installs the global subscriber once; `RUST_LOG` filters (default `info`).
/// Logs go to stderr so command output on stdout stays scriptable.
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
}
