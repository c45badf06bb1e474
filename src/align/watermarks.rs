//! Per-reading watermarks: the highest accepted source timestamp.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// The highest accepted source timestamp of each reading, by reading name.
/// Survives restarts inside the snapshot, so retained or replayed messages
/// cannot advance a restored detector.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Watermarks(pub BTreeMap<String, DateTime<Utc>>);
