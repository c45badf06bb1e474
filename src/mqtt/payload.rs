//! Sensor payload parsing: turns the bytes of one MQTT message into a source
//! timestamp and a finite value, or names exactly why it cannot.
//!
//! The accepted shape is one JSON object with exactly two members:
//! `{"ts": <RFC 3339 string | integer epoch milliseconds>, "value": <number>}`.
//! The parser is strict on purpose: a sensor that adds fields, sends a value
//! as a string or repeats a key is misconfigured, and counting that under a
//! named reason is more useful than guessing what it meant. Checks run in a
//! fixed order (size, JSON syntax, shape, members, `ts`, `value`), so each
//! payload has exactly one reason.

use std::collections::HashMap;
use std::fmt;

use chrono::{DateTime, Utc};
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::align::Observation;
use crate::config::ReadingConfig;

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
}

impl PayloadRejection {
    /// Every reason, for registering metric series up front.
    pub const ALL: [PayloadRejection; 11] = [
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
        }
    }
}

impl fmt::Display for PayloadRejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::error::Error for PayloadRejection {}

/// Parses one message body. Bodies longer than `max_bytes` are rejected
/// before any parsing, so a flood of huge messages costs only their length.
pub fn parse_payload(bytes: &[u8], max_bytes: usize) -> Result<Payload, PayloadRejection> {
    if bytes.len() > max_bytes {
        return Err(PayloadRejection::TooLarge);
    }
    let top: Top<'_> = serde_json::from_slice(bytes).map_err(|_| PayloadRejection::NotJson)?;
    let Top::Object(members) = top else {
        return Err(PayloadRejection::NotAnObject);
    };
    let mut ts = None;
    let mut value = None;
    for (key, raw) in members {
        let slot = match key.as_str() {
            "ts" => &mut ts,
            "value" => &mut value,
            _ => return Err(PayloadRejection::UnknownField),
        };
        if slot.replace(raw).is_some() {
            return Err(PayloadRejection::DuplicateField);
        }
    }
    let ts = ts.ok_or(PayloadRejection::MissingTs)?;
    let value = value.ok_or(PayloadRejection::MissingValue)?;
    Ok(Payload {
        ts: parse_ts(ts.get())?,
        value: parse_value(value.get())?,
    })
}

fn parse_ts(raw: &str) -> Result<DateTime<Utc>, PayloadRejection> {
    if raw.starts_with('"') {
        let text: String = serde_json::from_str(raw).map_err(|_| PayloadRejection::BadTs)?;
        return DateTime::parse_from_rfc3339(&text)
            .map(|ts| ts.with_timezone(&Utc))
            .map_err(|_| PayloadRejection::BadTs);
    }
    // Integer literals only: `1.7e12` or `1700000000000.5` are not whole
    // milliseconds, and silently rounding them would hide a sensor bug.
    let millis: i64 = raw.parse().map_err(|_| PayloadRejection::BadTs)?;
    DateTime::from_timestamp_millis(millis).ok_or(PayloadRejection::BadTs)
}

fn parse_value(raw: &str) -> Result<f64, PayloadRejection> {
    // serde_json validated the JSON grammar; anything not starting like a
    // number is a string, literal, array or object.
    if !raw.starts_with(|c: char| c == '-' || c.is_ascii_digit()) {
        return Err(PayloadRejection::ValueNotANumber);
    }
    // Rust's float parser rounds out-of-range literals to infinity instead
    // of failing, which is exactly the case to catch here.
    let value: f64 = raw.parse().map_err(|_| PayloadRejection::ValueNotANumber)?;
    if value.is_finite() {
        Ok(value)
    } else {
        Err(PayloadRejection::ValueNotFinite)
    }
}

/// The top level of a message: an object's members in order (duplicates
/// kept, values unparsed), or any other JSON value.
enum Top<'a> {
    Object(Vec<(String, &'a RawValue)>),
    Other,
}

impl<'de: 'a, 'a> Deserialize<'de> for Top<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(TopVisitor)
    }
}

struct TopVisitor;

impl<'de> Visitor<'de> for TopVisitor {
    type Value = Top<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut members = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            members.push((key, map.next_value::<&'de RawValue>()?));
        }
        Ok(Top::Object(members))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        // Drain the array so that a malformed tail still counts as `not_json`.
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Top::Other)
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Ok(Top::Other)
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
        Ok(Top::Other)
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
        Ok(Top::Other)
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Ok(Top::Other)
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
        Ok(Top::Other)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(Top::Other)
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{SecondsFormat, TimeZone};
    use proptest::prelude::*;

    const LIMIT: usize = 1024;

    fn parse(text: &str) -> Result<Payload, PayloadRejection> {
        parse_payload(text.as_bytes(), LIMIT)
    }

    #[test]
    fn epoch_milliseconds_and_rfc3339_name_the_same_instant() {
        let expected = Utc.with_ymd_and_hms(2026, 11, 29, 21, 0, 0).unwrap();
        let millis = expected.timestamp_millis();
        let from_millis = parse(&format!(r#"{{"ts": {millis}, "value": 1.5}}"#)).unwrap();
        let from_text = parse(r#"{"value": 1.5, "ts": "2026-11-29T22:00:00+01:00"}"#).unwrap();
        assert_eq!(
            from_millis,
            Payload {
                ts: expected,
                value: 1.5
            }
        );
        assert_eq!(from_text, from_millis);
    }

    #[test]
    fn integers_negative_numbers_and_exponents_are_accepted_values() {
        for (text, value) in [
            ("3", 3.0),
            ("-2.5", -2.5),
            ("1e3", 1000.0),
            ("-0", 0.0),
            ("1e-999", 0.0),
        ] {
            let payload = parse(&format!(r#"{{"ts": 0, "value": {text}}}"#)).unwrap();
            assert_eq!(payload.value, value, "{text}");
        }
    }

    #[test]
    fn a_message_exactly_at_the_size_limit_is_parsed_and_one_byte_more_is_not() {
        let body = r#"{"ts":0,"value":1}"#;
        assert!(parse_payload(body.as_bytes(), body.len()).is_ok());
        assert_eq!(
            parse_payload(body.as_bytes(), body.len() - 1),
            Err(PayloadRejection::TooLarge)
        );
    }

    #[test]
    fn every_payload_of_the_bad_corpus_is_rejected_for_its_reason() {
        use PayloadRejection::*;
        let huge = format!(r#"{{"ts": 0, "value": 1, "pad": "{}"}}"#, "x".repeat(LIMIT));
        let limit = 100_000;
        let deep = format!("{}{}", "[".repeat(5000), "]".repeat(5000));
        let deep_ts = format!(r#"{{"ts": {deep}, "value": 1}}"#);
        let deep_open = "[".repeat(5000);
        let corpus: Vec<(&[u8], PayloadRejection)> = vec![
            (huge.as_bytes(), TooLarge),
            (b"", NotJson),
            (b"   ", NotJson),
            (b"not json", NotJson),
            (b"{", NotJson),
            (br#"{"ts": 0, "value": 1"#, NotJson),
            (br#"{"ts": 0, "value": 1}}"#, NotJson),
            (br#"{"ts": 0, "value": 1} trailing"#, NotJson),
            (br#"{'ts': 0, 'value': 1}"#, NotJson),
            (br#"{"ts": 0, "value": NaN}"#, NotJson),
            (br#"{"ts": 0, "value": Infinity}"#, NotJson),
            (br#"{"ts": 0, "value": -Infinity}"#, NotJson),
            (br#"{"ts": 0, "value": +1}"#, NotJson),
            (br#"{"ts": 0, "value": 01}"#, NotJson),
            (br#"{"ts": 0, "value": 1.}"#, NotJson),
            (b"{\"ts\": 0, \"value\": \xff}", NotJson),
            (deep_open.as_bytes(), NotJson),
            (b"[]", NotAnObject),
            (deep.as_bytes(), NotAnObject),
            (br#"[{"ts": 0, "value": 1}]"#, NotAnObject),
            (b"null", NotAnObject),
            (b"true", NotAnObject),
            (b"42", NotAnObject),
            (b"-1.5", NotAnObject),
            (br#""a string""#, NotAnObject),
            (br#"{"ts": 0, "value": 1, "unit": "C"}"#, UnknownField),
            (br#"{"TS": 0, "value": 1}"#, UnknownField),
            (br#"{"ts": 0, "ts": 1, "value": 1}"#, DuplicateField),
            (br#"{"ts": 0, "value": 1, "value": 2}"#, DuplicateField),
            (b"{}", MissingTs),
            (br#"{"value": 1}"#, MissingTs),
            (br#"{"ts": 0}"#, MissingValue),
            (br#"{"ts": null, "value": 1}"#, BadTs),
            (br#"{"ts": "yesterday", "value": 1}"#, BadTs),
            (br#"{"ts": "2026-11-29", "value": 1}"#, BadTs),
            (br#"{"ts": "2026-11-29T21:00:00", "value": 1}"#, BadTs),
            (br#"{"ts": "2026-13-01T00:00:00Z", "value": 1}"#, BadTs),
            (br#"{"ts": "1700000000000", "value": 1}"#, BadTs),
            (br#"{"ts": 1700000000000.5, "value": 1}"#, BadTs),
            (br#"{"ts": 1.7e12, "value": 1}"#, BadTs),
            (br#"{"ts": 99999999999999999999, "value": 1}"#, BadTs),
            (br#"{"ts": 9223372036854775807, "value": 1}"#, BadTs),
            (br#"{"ts": true, "value": 1}"#, BadTs),
            (br#"{"ts": [0], "value": 1}"#, BadTs),
            (deep_ts.as_bytes(), BadTs),
            (br#"{"ts": 0, "value": "1.5"}"#, ValueNotANumber),
            (br#"{"ts": 0, "value": "NaN"}"#, ValueNotANumber),
            (br#"{"ts": 0, "value": "inf"}"#, ValueNotANumber),
            (br#"{"ts": 0, "value": null}"#, ValueNotANumber),
            (br#"{"ts": 0, "value": true}"#, ValueNotANumber),
            (br#"{"ts": 0, "value": [1]}"#, ValueNotANumber),
            (br#"{"ts": 0, "value": {"v": 1}}"#, ValueNotANumber),
            (br#"{"ts": 0, "value": 1e999}"#, ValueNotFinite),
            (br#"{"ts": 0, "value": -1e999}"#, ValueNotFinite),
            (
                br#"{"ts": 0, "value": 1797693134862315708145274237317043567981e270}"#,
                ValueNotFinite,
            ),
        ];
        assert!(corpus.len() >= 30);
        for (bytes, reason) in corpus {
            assert_eq!(
                parse_payload(bytes, if reason == TooLarge { LIMIT } else { limit }),
                Err(reason),
                "{}",
                String::from_utf8_lossy(&bytes[..bytes.len().min(80)])
            );
        }
    }

    #[test]
    fn labels_are_distinct_snake_case_and_match_serde() {
        let labels: std::collections::HashSet<_> =
            PayloadRejection::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(labels.len(), PayloadRejection::ALL.len());
        for reason in PayloadRejection::ALL {
            let json = serde_json::to_string(&reason).unwrap();
            assert_eq!(json, format!("\"{}\"", reason.as_str()));
        }
    }

    #[test]
    fn topics_route_to_their_reading_index_and_others_are_unknown() {
        let reading = |name: &str, topic: &str| ReadingConfig {
            name: name.into(),
            topic: topic.into(),
            required: true,
        };
        let routes = TopicRoutes::new(&[reading("a", "plant/a"), reading("b", "plant/b")]);
        assert_eq!(routes.route("plant/b"), Ok(1));
        assert_eq!(routes.route("plant/c"), Err(PayloadRejection::UnknownTopic));
        let now = Utc.with_ymd_and_hms(2026, 11, 29, 21, 0, 0).unwrap();
        let body = br#"{"ts": 0, "value": 7}"#;
        assert_eq!(
            routes.observation("plant/b", body, LIMIT, now),
            Ok(Observation {
                reading: 1,
                ts: DateTime::UNIX_EPOCH,
                value: 7.0,
                received_at: now,
            })
        );
        assert_eq!(
            routes.observation("plant/c", b"garbage", LIMIT, now),
            Err(PayloadRejection::UnknownTopic)
        );
        assert_eq!(
            routes.observation("plant/a", b"garbage", LIMIT, now),
            Err(PayloadRejection::NotJson)
        );
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = parse_payload(&bytes, 128);
        }

        #[test]
        fn arbitrary_json_like_text_never_panics(text in r#"[{}\[\]":,0-9a-z.eE+\- ]{0,64}"#) {
            let _ = parse_payload(text.as_bytes(), LIMIT);
        }

        #[test]
        fn valid_payloads_roundtrip(
            millis in -62_000_000_000_000i64..250_000_000_000_000,
            nanos in 0u32..1_000_000,
            value in any::<f64>().prop_filter("finite", |v| v.is_finite()),
            as_text in any::<bool>(),
            value_first in any::<bool>(),
        ) {
            let whole_ms = DateTime::from_timestamp_millis(millis).unwrap();
            let (ts, ts_json) = if as_text {
                let ts = whole_ms + chrono::TimeDelta::nanoseconds(i64::from(nanos));
                (ts, serde_json::to_string(&ts.to_rfc3339_opts(SecondsFormat::AutoSi, true)).unwrap())
            } else {
                (whole_ms, millis.to_string())
            };
            let value_json = serde_json::to_string(&value).unwrap();
            let body = if value_first {
                format!(r#"{{"value":{value_json},"ts":{ts_json}}}"#)
            } else {
                format!(r#"{{"ts":{ts_json},"value":{value_json}}}"#)
            };
            prop_assert_eq!(parse(&body), Ok(Payload { ts, value }));
        }
    }
}
