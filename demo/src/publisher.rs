//! Plays the simulated plant into an MQTT broker, one tick per
//! `TICK_SECONDS / speed` wall seconds.
//!
//! Payloads carry the wall-clock time of publication (epoch milliseconds),
//! not the simulated time: the worker's alignment policy compares source
//! times with its own clock, and a sped-up simulated clock would run into
//! the future. The simulated clock only decides the values (drift, faults).
//! Each tick's timestamp is at least one millisecond after the previous
//! one, because a reading's watermark rejects a repeated timestamp; that is
//! why the speed is capped at [`MAX_SPEED`].

use std::time::Duration;

use chrono::{DateTime, Utc};
use rumqttc::{AsyncClient, Event, MqttOptions, Outgoing, Packet, QoS};
use serde::Serialize;
use tokio::sync::watch;

use super::{DemoError, FaultWindow, Plant, plant::TICK_SECONDS};

/// Fastest supported speed: one tick per millisecond.
pub const MAX_SPEED: f64 = 1000.0;
/// How long the final flush to the broker may take.
const FLUSH_DEADLINE: Duration = Duration::from_secs(10);

/// Where and how fast to publish.
#[derive(Debug, Clone)]
pub struct PublishOptions {
    pub host: String,
    pub port: u16,
    pub client_id: String,
    /// Simulated seconds per wall second, in (0, [`MAX_SPEED`]].
    pub speed: f64,
    /// Stop after this many ticks; `None` runs until stopped.
    pub max_ticks: Option<u64>,
    /// How many ticks every subscriber has taken in. When set, tick `n`
    /// goes out only once this reaches `n` (or after [`GATE_WAIT_MAX`]), so
    /// the broker never holds two ticks of one topic: rumqttd hands a
    /// lagging subscriber a burst of one topic before the next topic, and
    /// frames would pair values of different ticks. A loaded machine then
    /// slows the simulated clock instead of losing frames.
    pub taken_in: Option<watch::Receiver<u64>>,
}

/// Longest wait for subscribers before a tick goes out anyway (a stopped
/// subscriber must not stop the plant).
pub const GATE_WAIT_MAX: Duration = Duration::from_secs(2);

/// When (in payload time) a fault window began and ended during publishing.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WindowTimes {
    pub window: FaultWindow,
    pub started_at: DateTime<Utc>,
    /// `None` if publishing stopped inside the window.
    pub ended_at: Option<DateTime<Utc>>,
}

/// What was published.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PublishReport {
    /// The plant ticks published, `[first_tick, first_tick + ticks)`.
    pub first_tick: u64,
    pub ticks: u64,
    pub messages: u64,
    pub first_ts: Option<DateTime<Utc>>,
    pub last_ts: Option<DateTime<Utc>>,
    /// Fault windows that began while publishing, with their payload times.
    pub windows: Vec<WindowTimes>,
}

/// The payload radar's ingestion reads: `{"ts": <epoch ms>, "value": v}`.
pub fn payload(ts: DateTime<Utc>, value: f64) -> String {
    serde_json::json!({ "ts": ts.timestamp_millis(), "value": value }).to_string()
}

/// Publishes ticks of `plant` (QoS 1) until `max_ticks` are out or `stop`
/// turns true, then flushes and disconnects.
pub async fn publish_plant(
    plant: &mut Plant,
    options: &PublishOptions,
    mut stop: watch::Receiver<bool>,
) -> Result<PublishReport, DemoError> {
    if !(options.speed.is_finite() && options.speed > 0.0 && options.speed <= MAX_SPEED) {
        return Err(DemoError::Config(format!(
            "speed {} is out of range: use a value above 0 and at most {MAX_SPEED} simulated seconds per second",
            options.speed
        )));
    }
    let mut mqtt = MqttOptions::new(&options.client_id, &options.host, options.port);
    mqtt.set_keep_alive(Duration::from_secs(30));
    let (client, eventloop) = AsyncClient::new(mqtt, 1024);
    let (driver, mut failed, acked) = spawn_driver(eventloop);
    let period = Duration::from_secs_f64(TICK_SECONDS as f64 / options.speed);
    let start = tokio::time::Instant::now();
    let mut report = PublishReport {
        first_tick: plant.next_tick(),
        ticks: 0,
        messages: 0,
        first_ts: None,
        last_ts: None,
        windows: Vec::new(),
    };
    let mut last_ms = i64::MIN;
    let mut gate = options.taken_in.clone();
    let result = loop {
        if options.max_ticks.is_some_and(|max| report.ticks >= max) || *stop.borrow() {
            break Ok(());
        }
        let due = start + period.mul_f64(report.ticks as f64);
        tokio::select! {
            _ = tokio::time::sleep_until(due) => {}
            _ = stop.changed() => continue,
            _ = failed.changed() => {
                let reason = failed.borrow().clone().unwrap_or_default();
                break Err(DemoError::Publish(format!("lost the broker at {}:{}: {reason}", options.host, options.port)));
            }
        }
        if let Some(taken) = gate.as_mut() {
            let wanted = report.ticks;
            let counter_gone = tokio::select! {
                waited = tokio::time::timeout(GATE_WAIT_MAX, taken.wait_for(|n| *n >= wanted)) => {
                    matches!(waited, Ok(Err(_)))
                }
                _ = stop.changed() => continue,
                _ = failed.changed() => {
                    let reason = failed.borrow().clone().unwrap_or_default();
                    break Err(DemoError::Publish(format!("lost the broker at {}:{}: {reason}", options.host, options.port)));
                }
            };
            if counter_gone {
                // Nobody counts any more: publish ungated from now on.
                gate = None;
            }
        }
        publish_tick(plant, &client, &mut report, &mut last_ms).await?;
    };
    finish(client, driver, acked, report, result).await
}

/// Runs the event loop beside the tick loop: it counts the broker's
/// acknowledgements and ends on the first error (the broker went away, sent
/// on the first receiver) or when the final disconnect has gone out.
fn spawn_driver(
    mut eventloop: rumqttc::EventLoop,
) -> (
    tokio::task::JoinHandle<()>,
    watch::Receiver<Option<String>>,
    watch::Receiver<u64>,
) {
    let (failed_tx, failed) = watch::channel(None::<String>);
    let (acked_tx, acked) = watch::channel(0u64);
    let driver = tokio::spawn(async move {
        loop {
            match eventloop.poll().await {
                Ok(Event::Incoming(Packet::PubAck(_))) => acked_tx.send_modify(|n| *n += 1),
                Ok(Event::Outgoing(Outgoing::Disconnect)) => {
                    // One more poll writes the buffered DISCONNECT out.
                    let _ = eventloop.poll().await;
                    return;
                }
                Ok(_) => {}
                Err(e) => {
                    let _ = failed_tx.send(Some(e.to_string()));
                    return;
                }
            }
        }
    });
    (driver, failed, acked)
}

/// Publishes one plant tick, every reading at one payload time that is
/// newer than the last tick's.
async fn publish_tick(
    plant: &mut Plant,
    client: &AsyncClient,
    report: &mut PublishReport,
    last_ms: &mut i64,
) -> Result<(), DemoError> {
    let now_ms = Utc::now().timestamp_millis();
    *last_ms = now_ms.max(last_ms.saturating_add(1));
    let ts = DateTime::from_timestamp_millis(*last_ms).unwrap_or_default();
    note_windows(plant, report, ts);
    for sample in plant.step() {
        let Some(topic) = plant.topic(&sample) else {
            continue;
        };
        client
            .publish(topic, QoS::AtLeastOnce, false, payload(ts, sample.value))
            .await
            .map_err(|e| DemoError::Publish(format!("cannot queue a message: {e}")))?;
        report.messages += 1;
    }
    report.first_ts.get_or_insert(ts);
    report.last_ts = Some(ts);
    report.ticks += 1;
    Ok(())
}

/// Disconnects only once the broker has acknowledged every message, so the
/// last ticks are not lost with the connection.
async fn finish(
    client: AsyncClient,
    driver: tokio::task::JoinHandle<()>,
    mut acked: watch::Receiver<u64>,
    report: PublishReport,
    result: Result<(), DemoError>,
) -> Result<PublishReport, DemoError> {
    let messages = report.messages;
    let flushed = tokio::time::timeout(FLUSH_DEADLINE, acked.wait_for(|n| *n >= messages))
        .await
        .is_ok_and(|r| r.is_ok());
    let _ = client.disconnect().await;
    let _ = tokio::time::timeout(FLUSH_DEADLINE, driver).await;
    match (result, flushed) {
        (Err(e), _) => Err(e),
        (Ok(()), true) => Ok(report),
        (Ok(()), false) => Err(DemoError::Publish(format!(
            "the broker acknowledged only {} of {messages} messages within {}s",
            *acked.borrow(),
            FLUSH_DEADLINE.as_secs()
        ))),
    }
}

/// Records the payload time of fault windows starting or ending at the
/// tick about to be published.
fn note_windows(plant: &Plant, report: &mut PublishReport, ts: DateTime<Utc>) {
    let tick = plant.next_tick();
    for times in &mut report.windows {
        if times.window.end_tick == tick {
            times.ended_at = Some(ts);
        }
    }
    for machine in 0..plant.machines().len() {
        if let Some(window) = plant.active_fault(machine, tick)
            && window.start_tick == tick
        {
            report.windows.push(WindowTimes {
                window,
                started_at: ts,
                ended_at: None,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_carry_epoch_milliseconds_and_the_value() {
        let ts = DateTime::from_timestamp_millis(1_767_254_400_123).unwrap();
        let text = payload(ts, 4.25);
        let parsed: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(parsed["ts"], 1_767_254_400_123i64);
        assert_eq!(parsed["value"], 4.25);
    }
}
