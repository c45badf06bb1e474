//! The ingestion side of the MQTT tests: options with a shrunk backoff,
//! unique topic prefixes, readings named after their topics, and reads of
//! the connection events and admitted messages `radar::mqtt::spawn` sends.

use std::time::Duration;

use anyhow::{Context, Result, bail};
use tokio::time::{Instant, timeout};

/// Ingestion options for tests: shrunk backoff, short handshake timeout.
pub fn test_options(url: &str) -> radar::mqtt::IngestOptions {
    let monitor = uuid::Uuid::new_v4();
    let mut options = radar::mqtt::IngestOptions::new(url, "test-worker", monitor)
        .unwrap_or_else(|e| panic!("test URL {url} rejected: {e}"));
    options.backoff = radar::mqtt::Backoff {
        initial: Duration::from_millis(50),
        max: Duration::from_millis(400),
    };
    options.handshake_timeout = Duration::from_secs(3);
    options
}

/// A topic prefix no other test (or run) uses.
pub fn unique_prefix() -> String {
    format!("radar-test/{}", uuid::Uuid::new_v4().simple())
}

/// The next item of a channel, or an error naming `what` after `within`.
async fn next<T>(
    channel: &mut tokio::sync::mpsc::Receiver<T>,
    within: Duration,
    what: &str,
) -> Result<T> {
    match timeout(within, channel.recv()).await {
        Ok(Some(item)) => Ok(item),
        Ok(None) => bail!("the channel of {what}s closed"),
        Err(_) => bail!("no {what} within {within:?}"),
    }
}

/// The next connection event, or an error after `within`.
pub async fn next_event(
    events: &mut tokio::sync::mpsc::Receiver<radar::mqtt::ConnectionEvent>,
    within: Duration,
) -> Result<radar::mqtt::ConnectionEvent> {
    next(events, within, "connection event").await
}

/// Events until one matches, failing after `within`; returns all seen.
pub async fn events_until(
    events: &mut tokio::sync::mpsc::Receiver<radar::mqtt::ConnectionEvent>,
    within: Duration,
    done: impl Fn(&radar::mqtt::ConnectionEvent) -> bool,
) -> Result<Vec<radar::mqtt::ConnectionEvent>> {
    let deadline = Instant::now() + within;
    let mut seen = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let event = next_event(events, left)
            .await
            .with_context(|| format!("events so far: {seen:#?}"))?;
        let stop = done(&event);
        seen.push(event);
        if stop {
            return Ok(seen);
        }
    }
}

/// The next admitted message, or an error after `within`.
pub async fn next_message(
    messages: &mut tokio::sync::mpsc::Receiver<radar::mqtt::RawMessage>,
    within: Duration,
) -> Result<radar::mqtt::RawMessage> {
    next(messages, within, "admitted message").await
}

/// Readings named after their topics; all required unless listed in `optional`.
pub fn readings(topics: &[String], optional: &[&str]) -> Vec<radar::config::ReadingConfig> {
    topics
        .iter()
        .map(|t| radar::config::ReadingConfig {
            name: t.rsplit('/').next().unwrap_or(t).to_string(),
            topic: t.clone(),
            required: !optional.contains(&t.as_str()),
        })
        .collect()
}
