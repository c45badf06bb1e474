//! Which reading a topic belongs to.

use std::collections::HashMap;

use chrono::{DateTime, Utc};

use super::{Payload, PayloadRejection, parse_payload};
use crate::align::Observation;
use crate::config::ReadingConfig;

/// Maps each subscribed topic to the index of its reading in the monitor's
/// `readings` list (the index an `Observation` carries).
#[derive(Debug, Clone, Default)]
pub struct TopicRoutes(HashMap<String, usize>);

impl TopicRoutes {
    /// Routes for the given readings. Topics are unique in a valid monitor;
    /// should one repeat anyway, the first reading keeps it.
    pub fn new(readings: &[ReadingConfig]) -> Self {
        let mut routes = HashMap::with_capacity(readings.len());
        for (index, reading) in readings.iter().enumerate() {
            routes.entry(reading.topic.clone()).or_insert(index);
        }
        Self(routes)
    }

    /// The reading index of a topic, or `UnknownTopic`.
    pub fn route(&self, topic: &str) -> Result<usize, PayloadRejection> {
        self.0
            .get(topic)
            .copied()
            .ok_or(PayloadRejection::UnknownTopic)
    }

    /// Routes and parses one message into an observation received at
    /// `received_at` (this worker's clock). The topic is checked first: a
    /// message nobody subscribed to is not worth parsing.
    pub fn observation(
        &self,
        topic: &str,
        bytes: &[u8],
        max_bytes: usize,
        received_at: DateTime<Utc>,
    ) -> Result<Observation, PayloadRejection> {
        let reading = self.route(topic)?;
        let Payload { ts, value } = parse_payload(bytes, max_bytes)?;
        Ok(Observation {
            reading,
            ts,
            value,
            received_at,
        })
    }
}
