//! The network side's admission of a PUBLISH: stamp it with this worker's
//! receipt clocks, map its topic to a reading, refuse oversized payloads.
//! Parsing the payload is left to the model side ([`RawMessage::observation`]).
//! Counters are atomics so a health reader can read them without asking the
//! ingestion task.

use std::{
    sync::atomic::{AtomicU64, Ordering},
    time::{Duration, Instant},
};

use bytes::Bytes;
use chrono::{DateTime, TimeDelta, Utc};
use rumqttc::Publish;

use super::payload::{Payload, PayloadFormat, PayloadRejection, TopicRoutes};
use crate::align::Observation;

/// One message admitted into the ingress queue, payload still unparsed.
#[derive(Debug, Clone, PartialEq)]
pub struct RawMessage {
    /// Index of the reading in the monitor's `readings` list.
    pub reading: usize,
    pub payload: Bytes,
    /// The broker delivered it as a retained message.
    pub retained: bool,
    /// Wall clock at receipt, for policies against source timestamps.
    pub received_at: DateTime<Utc>,
    /// Monotonic clock at receipt, so the model side can tell how long the
    /// message waited in the queue.
    pub received_instant: Instant,
}

impl RawMessage {
    /// How long the message has waited since receipt, on the monotonic clock.
    pub fn queued_for(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.received_instant)
    }

    /// This worker's processing time on the wall clock: the receipt time
    /// plus the monotonic time spent queued, so a wall-clock step while the
    /// message waited cannot make it look younger or older than it is.
    pub fn processing_time(&self, now: Instant) -> DateTime<Utc> {
        let queued = TimeDelta::from_std(self.queued_for(now)).unwrap_or(TimeDelta::MAX);
        self.received_at
            .checked_add_signed(queued)
            .unwrap_or(DateTime::<Utc>::MAX_UTC)
    }

    /// Parses the payload, in the monitor's format, into an observation of
    /// this message's reading, on the model side (parsing never runs on the
    /// network task).
    pub fn observation(
        &self,
        format: &PayloadFormat,
        max_payload_bytes: usize,
    ) -> Result<Observation, PayloadRejection> {
        let Payload { ts, value } = format.parse(&self.payload, max_payload_bytes)?;
        Ok(Observation {
            reading: self.reading,
            ts,
            value,
            received_at: self.received_at,
        })
    }
}

/// Decides whether a PUBLISH enters the queue, given the receipt clocks.
/// Rejects only what the network side can tell without parsing: a topic of
/// no reading (`UnknownTopic`) and an oversized payload (`TooLarge`).
pub fn admit(
    routes: &TopicRoutes,
    max_payload_bytes: usize,
    publish: Publish,
    received_at: DateTime<Utc>,
    received_instant: Instant,
) -> Result<RawMessage, PayloadRejection> {
    let reading = routes.route(&publish.topic)?;
    if publish.payload.len() > max_payload_bytes {
        return Err(PayloadRejection::TooLarge);
    }
    Ok(RawMessage {
        reading,
        payload: publish.payload,
        retained: publish.retain,
        received_at,
        received_instant,
    })
}

/// Running counts of the network side, shared with health readers.
#[derive(Debug, Default)]
pub struct IngressCounters {
    received: AtomicU64,
    admitted: AtomicU64,
    unknown_topic: AtomicU64,
    too_large: AtomicU64,
    /// Messages that found the queue full and had to wait for a slot.
    queue_full_waits: AtomicU64,
    /// Total time the network side spent waiting for a slot.
    queue_blocked_micros: AtomicU64,
    /// The most messages ever seen waiting in the queue.
    queue_peak: AtomicU64,
    connect_attempts: AtomicU64,
    connections: AtomicU64,
    subscription_refusals: AtomicU64,
}

/// A copy of the counters at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IngressCounts {
    pub received: u64,
    pub admitted: u64,
    pub unknown_topic: u64,
    pub too_large: u64,
    pub queue_full_waits: u64,
    pub queue_blocked_micros: u64,
    pub queue_peak: u64,
    pub connect_attempts: u64,
    pub connections: u64,
    pub subscription_refusals: u64,
}

impl IngressCounters {
    pub fn snapshot(&self) -> IngressCounts {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        IngressCounts {
            received: get(&self.received),
            admitted: get(&self.admitted),
            unknown_topic: get(&self.unknown_topic),
            too_large: get(&self.too_large),
            queue_full_waits: get(&self.queue_full_waits),
            queue_blocked_micros: get(&self.queue_blocked_micros),
            queue_peak: get(&self.queue_peak),
            connect_attempts: get(&self.connect_attempts),
            connections: get(&self.connections),
            subscription_refusals: get(&self.subscription_refusals),
        }
    }

    pub(crate) fn received(&self) {
        self.received.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn admitted(&self, queued_now: usize) {
        self.admitted.fetch_add(1, Ordering::Relaxed);
        self.queue_peak.fetch_max(
            u64::try_from(queued_now).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
    }

    /// Counts a network-side rejection. `admit` produces only these two
    /// reasons; the parse reasons are counted by the model side.
    pub(crate) fn rejected(&self, why: PayloadRejection) {
        let counter = match why {
            PayloadRejection::UnknownTopic => &self.unknown_topic,
            PayloadRejection::TooLarge => &self.too_large,
            _ => return,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn waited_for_queue(&self, micros: u64) {
        self.queue_full_waits.fetch_add(1, Ordering::Relaxed);
        self.queue_blocked_micros
            .fetch_add(micros, Ordering::Relaxed);
    }

    pub(crate) fn connect_attempt(&self) {
        self.connect_attempts.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn connected(&self) {
        self.connections.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn subscription_refused(&self) {
        self.subscription_refusals.fetch_add(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rumqttc::QoS;

    fn map() -> TopicRoutes {
        let reading = |name: &str| crate::config::ReadingConfig {
            name: name.into(),
            topic: format!("plant/{name}"),
            required: true,
        };
        TopicRoutes::new(&[reading("t1"), reading("t2")])
    }

    fn publish(topic: &str, payload: &[u8]) -> Publish {
        Publish::new(topic, QoS::AtLeastOnce, payload.to_vec())
    }

    #[test]
    fn a_known_topic_is_admitted_with_its_reading_and_receipt_clocks() {
        let now = Utc::now();
        let instant = Instant::now();
        let mut p = publish("plant/t2", b"{}");
        p.retain = true;
        let m = admit(&map(), 16, p, now, instant).unwrap();
        assert_eq!((m.reading, m.retained), (1, true));
        assert_eq!((m.received_at, m.received_instant), (now, instant));
        assert_eq!(&m.payload[..], b"{}");
    }

    #[test]
    fn processing_time_adds_the_monotonic_time_spent_queued() {
        let received_instant = Instant::now();
        let received_at = Utc::now();
        let m = admit(
            &map(),
            16,
            publish("plant/t1", b"{}"),
            received_at,
            received_instant,
        )
        .unwrap();
        let later = received_instant + Duration::from_millis(1500);
        assert_eq!(m.queued_for(later), Duration::from_millis(1500));
        assert_eq!(
            m.processing_time(later),
            received_at + TimeDelta::milliseconds(1500)
        );
        // At the receipt instant itself nothing was queued yet.
        assert_eq!(m.processing_time(received_instant), received_at);
    }

    #[test]
    fn the_model_side_parses_the_payload_into_an_observation_of_its_reading() {
        let received_at = Utc::now();
        let body = br#"{"ts": 1795986000000, "value": 21.5}"#;
        let m = admit(
            &map(),
            64,
            publish("plant/t2", body),
            received_at,
            Instant::now(),
        )
        .unwrap();
        let obs = m.observation(&PayloadFormat::default(), 64).unwrap();
        assert_eq!(
            (obs.reading, obs.value, obs.received_at),
            (1, 21.5, received_at)
        );
        assert_eq!(obs.ts.timestamp_millis(), 1_795_986_000_000);
        let bad = admit(
            &map(),
            64,
            publish("plant/t1", b"nan"),
            received_at,
            Instant::now(),
        )
        .unwrap();
        assert_eq!(
            bad.observation(&PayloadFormat::default(), 64).unwrap_err(),
            PayloadRejection::NotJson
        );
    }

    #[test]
    fn an_unknown_topic_is_rejected() {
        let r = admit(
            &map(),
            16,
            publish("plant/t3", b"{}"),
            Utc::now(),
            Instant::now(),
        );
        assert_eq!(r.unwrap_err().as_str(), "unknown_topic");
    }

    #[test]
    fn payload_size_limit_is_inclusive() {
        let at_limit = admit(
            &map(),
            4,
            publish("plant/t1", b"1234"),
            Utc::now(),
            Instant::now(),
        );
        assert!(at_limit.is_ok());
        let over = admit(
            &map(),
            4,
            publish("plant/t1", b"12345"),
            Utc::now(),
            Instant::now(),
        );
        assert_eq!(over.unwrap_err(), PayloadRejection::TooLarge);
    }

    #[test]
    fn counters_count_by_reason_and_keep_the_queue_peak() {
        let c = IngressCounters::default();
        c.received();
        c.rejected(PayloadRejection::TooLarge);
        c.rejected(PayloadRejection::UnknownTopic);
        c.admitted(3);
        c.admitted(1);
        c.waited_for_queue(10);
        let s = c.snapshot();
        assert_eq!(
            (s.received, s.too_large, s.unknown_topic, s.admitted),
            (1, 1, 1, 2)
        );
        assert_eq!(
            (s.queue_peak, s.queue_full_waits, s.queue_blocked_micros),
            (3, 1, 10)
        );
    }
}
