//! Logs through `tracing`: human text by default, JSON for machines.

use radar::config::LogFormat;
use tracing_subscriber::{EnvFilter, fmt};

/// Installs the global subscriber once; `RUST_LOG` filters (default `info`).
/// Logs go to stderr so command output on stdout stays scriptable.
pub fn init(format: LogFormat) {
    init_with(format, "info", &[]);
}

/// Like [`init`] with another default filter, plus `always` directives for
/// targets that `RUST_LOG` does not name.
pub fn init_with(format: LogFormat, default: &str, always: &[&str]) {
    let from_env = std::env::var("RUST_LOG")
        .ok()
        .filter(|v| !v.trim().is_empty());
    let mut directives = from_env.clone().unwrap_or_else(|| default.to_string());
    for directive in always {
        let target = directive.split('=').next().unwrap_or(directive);
        if !from_env.as_deref().is_some_and(|env| env.contains(target)) {
            directives.push(',');
            directives.push_str(directive);
        }
    }
    let filter = EnvFilter::try_new(&directives).unwrap_or_else(|_| EnvFilter::new(default));
    let builder = fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
}
