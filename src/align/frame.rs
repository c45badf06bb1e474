//! Observations as they arrive and frames as the detector sees them.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// One accepted sensor value on its way to alignment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Observation {
    /// Index of the reading in the monitor's `readings` list.
    pub reading: usize,
    /// The source timestamp carried by the payload.
    pub ts: DateTime<Utc>,
    /// A finite value.
    pub value: f64,
    /// This worker's clock when the network side received the message.
    pub received_at: DateTime<Utc>,
}

/// One aligned observation: a value for every required reading, in the
/// order of the monitor's required readings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Frame {
    /// The newest source timestamp among the frame's values.
    pub ts: DateTime<Utc>,
    /// One finite value per required reading.
    pub values: Vec<f64>,
}
