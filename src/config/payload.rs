//! A monitor's optional `[payload]` table: where value and source time sit
//! in its sensors' JSON, and the unit of a numeric source time.

use serde::{Deserialize, Serialize};

use super::FieldError;

/// Longest accepted JSON pointer; a sensor field path this long is a mistake.
const MAX_POINTER_LEN: usize = 256;

/// The unit of a payload's source time. RFC 3339 text names its own
/// instant and is accepted under every unit; the unit decides how a number
/// is read (and `rfc3339` refuses numbers).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TimeUnit {
    /// RFC 3339 text only, e.g. `"2026-12-02T00:55:00.250Z"`.
    Rfc3339,
    /// Epoch seconds; a decimal fraction (`1764636900.25`) is accepted.
    S,
    /// Whole epoch milliseconds (the default, as before the table existed).
    #[default]
    Ms,
    /// Whole epoch microseconds.
    Us,
}

impl TimeUnit {
    /// The spelling in a monitor file.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Rfc3339 => "rfc3339",
            Self::S => "s",
            Self::Ms => "ms",
            Self::Us => "us",
        }
    }
}

impl std::fmt::Display for TimeUnit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a sensor's JSON carries value and source time. Without the table a
/// monitor reads `{"ts": ..., "value": ...}` with epoch milliseconds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PayloadMapping {
    /// JSON pointer (RFC 6901) of the value, e.g. `/value` or `/data/temp`.
    #[serde(default = "default_value")]
    pub value: String,
    /// JSON pointer of the source time.
    #[serde(default = "default_ts")]
    pub ts: String,
    /// Unit of a numeric source time.
    #[serde(default)]
    pub ts_unit: TimeUnit,
}

fn default_value() -> String {
    "/value".to_string()
}

fn default_ts() -> String {
    "/ts".to_string()
}

impl Default for PayloadMapping {
    fn default() -> Self {
        Self {
            value: default_value(),
            ts: default_ts(),
            ts_unit: TimeUnit::default(),
        }
    }
}

impl PayloadMapping {
    /// Field errors under the given prefix (e.g. `payload`).
    pub fn validate(&self, prefix: &str) -> Vec<FieldError> {
        let mut errors = Vec::new();
        for (name, pointer) in [("value", &self.value), ("ts", &self.ts)] {
            if let Some(problem) = pointer_problem(pointer) {
                errors.push(FieldError::new(
                    format!("{prefix}.{name}"),
                    format!(
                        "{pointer:?} {problem}; write a JSON pointer such as \"/{name}\" or \"/data/{name}\""
                    ),
                ));
            }
        }
        if self.value == self.ts {
            errors.push(FieldError::new(
                format!("{prefix}.ts"),
                format!(
                    "{:?} is also the value's pointer; value and source time must be different fields",
                    self.ts
                ),
            ));
        }
        errors
    }
}

/// What is wrong with a JSON pointer, if anything.
fn pointer_problem(pointer: &str) -> Option<String> {
    if !pointer.starts_with('/') {
        return Some("does not start with `/`".to_string());
    }
    if pointer.len() > MAX_POINTER_LEN {
        return Some(format!("is longer than {MAX_POINTER_LEN} bytes"));
    }
    let mut chars = pointer.chars();
    while let Some(c) = chars.next() {
        if c == '~' && !matches!(chars.next(), Some('0' | '1')) {
            return Some(
                "has a `~` not followed by 0 or 1 (write `~0` for `~`, `~1` for `/`)".into(),
            );
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn parse(text: &str) -> Result<PayloadMapping, String> {
        toml::from_str::<PayloadMapping>(text).map_err(|e| e.to_string())
    }

    #[test]
    fn an_empty_table_means_today_s_shape_in_milliseconds() {
        assert_eq!(parse("").unwrap(), PayloadMapping::default());
        assert_eq!(PayloadMapping::default().ts_unit, TimeUnit::Ms);
        assert!(PayloadMapping::default().validate("payload").is_empty());
    }

    #[test]
    fn every_unit_is_spelled_as_in_the_monitor_file() {
        for unit in [TimeUnit::Rfc3339, TimeUnit::S, TimeUnit::Ms, TimeUnit::Us] {
            let mapping = parse(&format!("ts_unit = \"{unit}\"")).unwrap();
            assert_eq!(mapping.ts_unit, unit);
        }
    }

    #[test]
    fn an_unknown_unit_is_refused_naming_the_units_there_are() {
        let err = parse("ts_unit = \"ns\"").unwrap_err();
        for name in ["ns", "rfc3339", "`s`", "ms", "us"] {
            assert!(err.contains(name), "{err}");
        }
    }

    #[test]
    fn pointers_must_start_with_a_slash_and_escape_tildes() {
        let bad = PayloadMapping {
            value: "value".into(),
            ts: "/t~2".into(),
            ts_unit: TimeUnit::S,
        };
        let errors = bad.validate("payload");
        let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(fields, ["payload.value", "payload.ts"]);
        assert!(
            errors[0].message.contains("does not start with `/`"),
            "{errors:?}"
        );
        let same = PayloadMapping {
            value: "/v".into(),
            ts: "/v".into(),
            ts_unit: TimeUnit::Ms,
        };
        assert_eq!(same.validate("payload")[0].field, "payload.ts");
    }

    proptest! {
        #[test]
        fn a_pointer_is_accepted_exactly_when_it_starts_with_a_slash_and_escapes_are_valid(
            text in "[/a-z~01]{0,12}",
        ) {
            let bytes = text.as_bytes();
            let escapes_ok = text
                .match_indices('~')
                .all(|(i, _)| matches!(bytes.get(i + 1), Some(b'0' | b'1')));
            let valid = text.starts_with('/') && escapes_ok;
            prop_assert_eq!(pointer_problem(&text).is_none(), valid, "{}", text);
        }
    }
}
