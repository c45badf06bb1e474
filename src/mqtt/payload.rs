//! Sensor payload parsing: turns the bytes of one MQTT message into a source
//! timestamp and a finite value, or names exactly why it cannot.
//!
//! The default shape is one JSON object with exactly two members:
//! `{"ts": <RFC 3339 string | integer epoch milliseconds>, "value": <number>}`.
//! The parser is strict on purpose: a sensor that adds fields, sends a value
//! as a string or repeats a key is misconfigured, and counting that under a
//! named reason is more useful than guessing what it meant. Checks run in a
//! fixed order (size, JSON syntax, shape, members, `ts`, `value`), so each
//! payload has exactly one reason.
//!
//! A monitor's `[payload]` table ([`PayloadMapping`]) names other fields (JSON
//! pointers) and the unit of a numeric source time ([`PayloadFormat`]). Two
//! top-level members keep the strict shape; a nested pointer reads its field
//! out of whatever else the document holds. A number that is a plausible
//! epoch time (2000 to 2100) only in another unit than the configured one,
//! such as epoch seconds where milliseconds are configured, is
//! `timestamp_unit`, not a date in 1970 that alignment would call too old.

use std::fmt;
use std::sync::LazyLock;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::pointer;

use crate::config::{PayloadMapping, TimeUnit};

/// One sensor value as the payload carried it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Payload {
    /// The source timestamp.
    pub ts: DateTime<Utc>,
    /// Always finite.
    pub value: f64,
}

/// Why an incoming MQTT message was not turned into an observation.
/// `as_str()` gives the stable `reason` label of the rejection metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PayloadRejection {
    /// Larger than the configured limit; not parsed at all.
    TooLarge,
    /// Not UTF-8 JSON, truncated, nested too deeply or followed by garbage.
    NotJson,
    /// Valid JSON, but not an object.
    NotAnObject,
    /// A member other than `ts` and `value`.
    UnknownField,
    /// `ts` or `value` appears more than once.
    DuplicateField,
    MissingTs,
    MissingValue,
    /// `ts` is neither an RFC 3339 string nor an integer number of epoch
    /// milliseconds that a timestamp can represent.
    BadTs,
    /// `value` is a string (including "NaN" or "inf"), boolean, null, array
    /// or object.
    ValueNotANumber,
    /// `value` is a number literal too large for an `f64` (e.g. `1e999`).
    ValueNotFinite,
    /// The topic belongs to no reading of the monitor (see [`TopicRoutes`]).
    UnknownTopic,
    /// `ts` is a number that cannot be in the configured unit: it is a
    /// plausible epoch time only in another unit (see [`PayloadFormat`]), or
    /// a number where `rfc3339` is configured.
    TimestampUnit,
}

impl PayloadRejection {
    /// Every reason, for registering metric series up front.
    pub const ALL: [PayloadRejection; 12] = [
        Self::TooLarge,
        Self::NotJson,
        Self::NotAnObject,
        Self::UnknownField,
        Self::DuplicateField,
        Self::MissingTs,
        Self::MissingValue,
        Self::BadTs,
        Self::ValueNotANumber,
        Self::ValueNotFinite,
        Self::UnknownTopic,
        Self::TimestampUnit,
    ];

    /// The stable metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::TooLarge => "too_large",
            Self::NotJson => "not_json",
            Self::NotAnObject => "not_an_object",
            Self::UnknownField => "unknown_field",
            Self::DuplicateField => "duplicate_field",
            Self::MissingTs => "missing_ts",
            Self::MissingValue => "missing_value",
            Self::BadTs => "bad_ts",
            Self::ValueNotANumber => "value_not_a_number",
            Self::ValueNotFinite => "value_not_finite",
            Self::UnknownTopic => "unknown_topic",
            Self::TimestampUnit => "timestamp_unit",
        }
    }
}

impl fmt::Display for PayloadRejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::error::Error for PayloadRejection {}

/// Parses one message body in the default shape (`{"ts": .., "value": ..}`,
/// epoch milliseconds). Bodies longer than `max_bytes` are rejected before
/// any parsing, so a flood of huge messages costs only their length.
pub fn parse_payload(bytes: &[u8], max_bytes: usize) -> Result<Payload, PayloadRejection> {
    DEFAULT_FORMAT.parse(bytes, max_bytes)
}

static DEFAULT_FORMAT: LazyLock<PayloadFormat> = LazyLock::new(PayloadFormat::default);

/// Where one field sits in the document.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Field {
    /// A top-level member, its name unescaped (`/a~1b` is member `a/b`).
    Member(String),
    /// A deeper JSON pointer, as written.
    Pointer(String),
}

impl Field {
    fn new(pointer: &str) -> Self {
        let token = &pointer[pointer.len().min(1)..];
        if pointer.starts_with('/') && !token.contains('/') {
            Self::Member(pointer::unescape(token))
        } else {
            Self::Pointer(pointer.to_string())
        }
    }
}

/// A monitor's compiled `[payload]` table: how to find value and source
/// time in a message and how to read a numeric source time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PayloadFormat {
    ts: Field,
    value: Field,
    unit: TimeUnit,
}

impl Default for PayloadFormat {
    fn default() -> Self {
        Self::new(&PayloadMapping::default())
    }
}

impl PayloadFormat {
    /// The format of a validated mapping (see `PayloadMapping::validate`).
    pub fn new(mapping: &PayloadMapping) -> Self {
        Self {
            ts: Field::new(&mapping.ts),
            value: Field::new(&mapping.value),
            unit: mapping.ts_unit,
        }
    }

    /// The format of a monitor's optional table.
    pub fn of(mapping: Option<&PayloadMapping>) -> Self {
        mapping.map(Self::new).unwrap_or_default()
    }

    /// The configured unit of a numeric source time.
    pub fn unit(&self) -> TimeUnit {
        self.unit
    }

    /// Parses one message body. Bodies longer than `max_bytes` are rejected
    /// before any parsing.
    pub fn parse(&self, bytes: &[u8], max_bytes: usize) -> Result<Payload, PayloadRejection> {
        if bytes.len() > max_bytes {
            return Err(PayloadRejection::TooLarge);
        }
        let (ts, value) = self.fields(bytes)?;
        Ok(Payload {
            ts: parse_ts(&ts, self.unit)?,
            value: parse_value(&value)?,
        })
    }

    /// For a message rejected as `timestamp_unit`: the unit its source time
    /// looks like (`s`, `ms`, `us` or `ns`), if any does.
    pub fn unit_hint(&self, bytes: &[u8]) -> Option<&'static str> {
        let (ts, _) = self.fields(bytes).ok()?;
        let whole = ts.split('.').next()?.parse::<i64>().ok()?;
        Scale::plausible(whole).map(Scale::as_str)
    }

    /// The raw JSON text of the source time and the value.
    fn fields<'a>(
        &self,
        bytes: &'a [u8],
    ) -> Result<(std::borrow::Cow<'a, str>, std::borrow::Cow<'a, str>), PayloadRejection> {
        use std::borrow::Cow;
        if let (Field::Member(ts_name), Field::Member(value_name)) = (&self.ts, &self.value) {
            let top: Top<'_> =
                serde_json::from_slice(bytes).map_err(|_| PayloadRejection::NotJson)?;
            let Top::Object(members) = top else {
                return Err(PayloadRejection::NotAnObject);
            };
            let mut ts = None;
            let mut value = None;
            for (key, raw) in members {
                let slot = if key == *ts_name {
                    &mut ts
                } else if key == *value_name {
                    &mut value
                } else {
                    return Err(PayloadRejection::UnknownField);
                };
                if slot.replace(raw).is_some() {
                    return Err(PayloadRejection::DuplicateField);
                }
            }
            let ts = ts.ok_or(PayloadRejection::MissingTs)?;
            let value = value.ok_or(PayloadRejection::MissingValue)?;
            return Ok((Cow::Borrowed(ts.get()), Cow::Borrowed(value.get())));
        }
        // A nested field: the rest of the document is the plant's business.
        // Both fields keep their text as sent (see `pointer`).
        let doc: &RawValue =
            serde_json::from_slice(bytes).map_err(|_| PayloadRejection::NotJson)?;
        if !doc.get().starts_with(['{', '[']) {
            return Err(PayloadRejection::NotAnObject);
        }
        let find = |field: &Field| match field {
            Field::Member(name) => pointer::child(doc, name),
            Field::Pointer(path) => pointer::resolve(doc, path),
        };
        let ts = find(&self.ts).ok_or(PayloadRejection::MissingTs)?;
        let value = find(&self.value).ok_or(PayloadRejection::MissingValue)?;
        Ok((Cow::Borrowed(ts.get()), Cow::Borrowed(value.get())))
    }
}

mod routes;
#[cfg(test)]
mod tests;
mod time;
mod top;

pub use routes::TopicRoutes;
use time::{Scale, parse_ts, parse_value};
use top::Top;
