//! The network side's admission of a PUBLISH: stamp it with this worker's
//! receipt clocks, map its topic to a reading, refuse oversized payloads.
//! Parsing the payload is left to the model side. Counters are atomics so a
//! health reader can read them without asking the ingestion task.

use std::{
    collections::HashMap,
    sync::atomic::{AtomicU64, Ordering},
    time::{Duration, Instant},
};

use bytes::Bytes;
use chrono::{DateTime, TimeDelta, Utc};
use rumqttc::Publish;

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
}

/// Why the network side dropped a message before the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IngressRejection {
    /// The topic belongs to no reading of this monitor.
    UnknownTopic,
    /// The payload is larger than the configured limit.
    TooLarge,
}

impl IngressRejection {
    /// The counter label.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::UnknownTopic => "unknown_topic",
            Self::TooLarge => "too_large",
        }
    }
}

/// Topic -> reading index of one monitor.
#[derive(Debug, Clone, Default)]
pub struct TopicMap(HashMap<String, usize>);

impl TopicMap {
    pub fn new<'a>(topics: impl IntoIterator<Item = &'a str>) -> Self {
        Self(
            topics
                .into_iter()
                .enumerate()
                .map(|(i, t)| (t.to_string(), i))
                .collect(),
        )
    }

    pub fn reading(&self, topic: &str) -> Option<usize> {
        self.0.get(topic).copied()
    }
}

/// Decides whether a PUBLISH enters the queue, given the receipt clocks.
pub fn admit(
    topics: &TopicMap,
    max_payload_bytes: usize,
    publish: Publish,
    received_at: DateTime<Utc>,
    received_instant: Instant,
) -> Result<RawMessage, IngressRejection> {
    let reading = topics
        .reading(&publish.topic)
        .ok_or(IngressRejection::UnknownTopic)?;
    if publish.payload.len() > max_payload_bytes {
        return Err(IngressRejection::TooLarge);
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

    pub(crate) fn rejected(&self, why: IngressRejection) {
        let counter = match why {
            IngressRejection::UnknownTopic => &self.unknown_topic,
            IngressRejection::TooLarge => &self.too_large,
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

    fn map() -> TopicMap {
        TopicMap::new(["plant/t1", "plant/t2"])
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
        assert_eq!(over.unwrap_err(), IngressRejection::TooLarge);
    }

    #[test]
    fn counters_count_by_reason_and_keep_the_queue_peak() {
        let c = IngressCounters::default();
        c.received();
        c.rejected(IngressRejection::TooLarge);
        c.rejected(IngressRejection::UnknownTopic);
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
