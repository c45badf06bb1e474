//! A monitor's definition: its readings, alignment policy and detector
//! settings, read from TOML and stored as JSON in `services`.

use std::collections::HashSet;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::{FieldError, FieldErrors, PayloadMapping};
use crate::{align::AlignmentPolicy, detector::DetectorSettings, graph::GraphBinding};

/// Longest accepted monitor name; it appears in metrics and tables.
const MAX_NAME_LEN: usize = 128;
/// MQTT topics are at most 65535 bytes, but a sensor topic this long is a mistake.
const MAX_TOPIC_LEN: usize = 1024;

/// A monitor as an operator writes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MonitorConfig {
    /// Unique, human-chosen name. Not part of the fingerprint.
    pub name: String,
    /// Free text for operators. Not part of the fingerprint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The sensor readings, one MQTT topic each, in feature order.
    pub readings: Vec<ReadingConfig>,
    pub alignment: AlignmentPolicy,
    pub detector: DetectorSettings,
    /// Present when the monitor is a run of a published graph revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub graph: Option<GraphBinding>,
    /// Where the sensors' JSON carries value and source time; absent means
    /// `{"ts": <epoch ms | RFC 3339>, "value": <number>}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<PayloadMapping>,
}

/// One sensor reading and the MQTT topic that carries it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReadingConfig {
    pub name: String,
    pub topic: String,
    /// Required readings form the frames the detector scores. Optional ones
    /// are ingested and watermarked but not scored.
    #[serde(default = "required_by_default")]
    pub required: bool,
}

fn required_by_default() -> bool {
    true
}

/// The parts of a monitor that decide its numbers; hashed for the fingerprint.
#[derive(Serialize)]
struct Semantics<'a> {
    readings: &'a [ReadingConfig],
    alignment: &'a AlignmentPolicy,
    detector: &'a DetectorSettings,
    /// Only graph runs have it, so other monitors keep their fingerprints.
    #[serde(skip_serializing_if = "Option::is_none")]
    graph_semantics: Option<&'a str>,
    /// Which fields are read decides the numbers; only monitors with a
    /// `[payload]` table have it, so others keep their fingerprints.
    #[serde(skip_serializing_if = "Option::is_none")]
    payload: Option<&'a PayloadMapping>,
}

impl MonitorConfig {
    /// Parses and validates a monitor file's TOML text.
    pub fn from_toml(text: &str) -> Result<Self, FieldErrors> {
        let config: Self = toml::from_str(text).map_err(|e| {
            let field = e
                .span()
                .map(|span| text[..span.start.min(text.len())].matches('\n').count() + 1)
                .map(|line| format!("line {line}"))
                .unwrap_or_else(|| "file".to_string());
            FieldErrors(vec![FieldError::new(field, e.message().to_string())])
        })?;
        config.validate()?;
        Ok(config)
    }

    /// Parses and validates the JSON form stored in `services.config`.
    pub fn from_json(value: serde_json::Value) -> Result<Self, FieldErrors> {
        let config: Self = serde_json::from_value(value)
            .map_err(|e| FieldErrors(vec![FieldError::new("config", e.to_string())]))?;
        config.validate()?;
        Ok(config)
    }

    /// Every inconsistency, each naming its field.
    pub fn validate(&self) -> Result<(), FieldErrors> {
        let mut errors = Vec::new();
        let name = self.name.trim();
        if name.is_empty() {
            errors.push(FieldError::new("name", "must not be empty"));
        } else if self.name.len() > MAX_NAME_LEN || name != self.name {
            errors.push(FieldError::new(
                "name",
                format!("must be at most {MAX_NAME_LEN} bytes without surrounding spaces"),
            ));
        }
        if self.readings.is_empty() {
            errors.push(FieldError::new(
                "readings",
                "a monitor needs at least one reading",
            ));
        }
        let mut names = HashSet::new();
        let mut topics = HashSet::new();
        for (i, reading) in self.readings.iter().enumerate() {
            let at = |f: &str| format!("readings[{i}].{f}");
            if reading.name.trim().is_empty() {
                errors.push(FieldError::new(at("name"), "must not be empty"));
            } else if !names.insert(reading.name.as_str()) {
                errors.push(FieldError::new(
                    at("name"),
                    format!("duplicate reading name {:?}", reading.name),
                ));
            }
            errors.extend(topic_errors(&reading.topic, &at("topic")));
            if !topics.insert(reading.topic.as_str()) {
                errors.push(FieldError::new(
                    at("topic"),
                    format!("topic {:?} is used by two readings", reading.topic),
                ));
            }
        }
        let required = self.required_readings().count();
        if !self.readings.is_empty() && required == 0 {
            errors.push(FieldError::new(
                "readings",
                "at least one reading must be required: frames are built from required readings",
            ));
        }
        errors.extend(self.alignment.validate("alignment"));
        if let Some(payload) = &self.payload {
            errors.extend(payload.validate("payload"));
        }
        errors.extend(self.detector.validate("detector", required));
        for name in self.detector.change.iter().flat_map(|c| &c.readings) {
            if !self.required_readings().any(|r| &r.name == name) {
                errors.push(FieldError::new(
                    "detector.change.readings",
                    format!("{name:?} is not a required reading of this monitor"),
                ));
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(FieldErrors(errors))
        }
    }

    /// The required readings, in feature order.
    pub fn required_readings(&self) -> impl Iterator<Item = &ReadingConfig> {
        self.readings.iter().filter(|r| r.required)
    }

    /// SHA-256 over a canonical encoding of everything that decides the
    /// monitor's numbers (readings, alignment policy, detector settings), but
    /// not its name or description.
    pub fn fingerprint(&self) -> [u8; 32] {
        let semantics = Semantics {
            readings: &self.readings,
            alignment: &self.alignment,
            detector: &self.detector,
            graph_semantics: self.graph.as_ref().map(|g| g.semantics_hash.as_str()),
            payload: self.payload.as_ref(),
        };
        // serde_json writes struct fields in declaration order and floats in
        // their shortest exact form, so equal configs give equal bytes.
        let bytes = serde_json::to_vec(&semantics).unwrap_or_default();
        Sha256::digest(&bytes).into()
    }
}

fn topic_errors(topic: &str, field: &str) -> Vec<FieldError> {
    let mut errors = Vec::new();
    if topic.is_empty() {
        errors.push(FieldError::new(field, "must not be empty"));
    } else if topic.contains(['+', '#']) {
        errors.push(FieldError::new(
            field,
            format!("{topic:?} is a wildcard; each reading needs one exact topic"),
        ));
    } else if topic.starts_with('$') {
        errors.push(FieldError::new(
            field,
            format!("{topic:?} is a broker system topic ($...), not a sensor topic"),
        ));
    } else if topic.len() > MAX_TOPIC_LEN || topic.contains('\0') {
        errors.push(FieldError::new(
            field,
            format!("must be at most {MAX_TOPIC_LEN} bytes and contain no NUL character"),
        ));
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = include_str!("../../config/monitors/pump.toml");

    fn edited(find: &str, replace: &str) -> String {
        assert!(EXAMPLE.contains(find), "example lacks {find:?}");
        EXAMPLE.replacen(find, replace, 1)
    }

    fn rejected_fields(text: &str) -> Vec<String> {
        match MonitorConfig::from_toml(text) {
            Ok(_) => panic!("config was accepted:\n{text}"),
            Err(e) => e.fields().into_iter().map(str::to_string).collect(),
        }
    }

    #[test]
    fn the_shipped_example_is_valid() {
        let config = MonitorConfig::from_toml(EXAMPLE).unwrap();
        assert_eq!(config.required_readings().count(), 4);
    }

    #[test]
    fn each_invalid_value_is_rejected_naming_its_field() {
        let cases = [
            (edited("name = \"pump-7\"", "name = \"\""), "name"),
            (
                edited("name = \"pressure\"", "name = \"flow\""),
                "readings[1].name",
            ),
            (
                edited(
                    "topic = \"plant/hall-b/pump-7/flow\"",
                    "topic = \"plant/hall-b/pump-7/pressure\"",
                ),
                "readings[1].topic",
            ),
            (
                edited(
                    "topic = \"plant/hall-b/pump-7/flow\"",
                    "topic = \"plant/+/flow\"",
                ),
                "readings[1].topic",
            ),
            (
                edited(
                    "topic = \"plant/hall-b/pump-7/flow\"",
                    "topic = \"plant/#\"",
                ),
                "readings[1].topic",
            ),
            (
                edited("topic = \"plant/hall-b/pump-7/flow\"", "topic = \"\""),
                "readings[1].topic",
            ),
            (
                edited(
                    "topic = \"plant/hall-b/pump-7/flow\"",
                    "topic = \"$SYS/load\"",
                ),
                "readings[1].topic",
            ),
            (
                // The optional "ambient" is not in the frames the detector sees.
                format!(
                    "{EXAMPLE}\n[detector.change]\nreadings = [\"ambient\"]\nfalse_alarm_rate = 0.01\n"
                ),
                "detector.change.readings",
            ),
            (
                format!(
                    "{EXAMPLE}\n[detector.change]\nreadings = [\"flow\"]\nfalse_alarm_rate = 0.0\n"
                ),
                "detector.change.false_alarm_rate",
            ),
            (
                edited("freshness_ms = 5000", "freshness_ms = 0"),
                "alignment.freshness_ms",
            ),
            (
                edited("max_age_ms = 30000", "max_age_ms = 0"),
                "alignment.max_age_ms",
            ),
            (
                edited("max_skew_ms = 1000", "max_skew_ms = 90000000"),
                "alignment.max_skew_ms",
            ),
            (
                edited("training_frames = 600", "training_frames = 3"),
                "detector.training_frames",
            ),
            (
                edited("calibration_frames = 300", "calibration_frames = 50"),
                "detector.calibration_frames",
            ),
            (
                edited("false_alarm_rate = 0.01", "false_alarm_rate = 1.5"),
                "detector.false_alarm_rate",
            ),
            (
                edited("false_alarm_rate = 0.01", "false_alarm_rate = 0.0"),
                "detector.false_alarm_rate",
            ),
            (edited("open_k = 3", "open_k = 6"), "detector.alarm.open_k"),
            (
                edited("close_m = 10", "close_m = 0"),
                "detector.alarm.close_m",
            ),
        ];
        for (text, field) in cases {
            let fields = rejected_fields(&text);
            assert!(
                fields.iter().any(|f| f == field),
                "expected {field}, got {fields:?}"
            );
        }
    }

    #[test]
    fn a_monitor_without_readings_is_rejected() {
        let text = "name = \"x\"\nreadings = []\n[alignment]\nfreshness_ms = 1\nmax_age_ms = 1\n\
                    future_tolerance_ms = 0\nmax_skew_ms = 0\n[detector]\ntraining_frames = 10\n\
                    calibration_frames = 100\nfalse_alarm_rate = 0.01\n";
        assert!(rejected_fields(text).contains(&"readings".to_string()));
    }

    #[test]
    fn negative_durations_and_unknown_keys_are_rejected_with_their_line() {
        let negative = edited("freshness_ms = 5000", "freshness_ms = -5");
        let fields = rejected_fields(&negative);
        assert!(fields[0].starts_with("line "), "{fields:?}");
        let unknown = edited("max_skew_ms = 1000", "max_skew_ms = 1000\nmax_skew = 3");
        let err = MonitorConfig::from_toml(&unknown).unwrap_err();
        assert!(err.to_string().contains("max_skew"), "{err}");
    }

    #[test]
    fn renaming_or_describing_a_monitor_keeps_its_fingerprint() {
        let base = MonitorConfig::from_toml(EXAMPLE).unwrap().fingerprint();
        let renamed =
            MonitorConfig::from_toml(&edited("name = \"pump-7\"", "name = \"pump-7b\"")).unwrap();
        assert_eq!(renamed.fingerprint(), base);
        let described = MonitorConfig::from_toml(&edited("hall B", "hall C")).unwrap();
        assert_eq!(described.fingerprint(), base);
    }

    #[test]
    fn changing_any_alignment_or_detector_value_changes_the_fingerprint() {
        let base = MonitorConfig::from_toml(EXAMPLE).unwrap().fingerprint();
        for (find, replace) in [
            ("freshness_ms = 5000", "freshness_ms = 5001"),
            ("max_age_ms = 30000", "max_age_ms = 30001"),
            ("future_tolerance_ms = 2000", "future_tolerance_ms = 2001"),
            ("max_skew_ms = 1000", "max_skew_ms = 999"),
            ("false_alarm_rate = 0.01", "false_alarm_rate = 0.02"),
            (
                "topic = \"plant/hall-b/pump-7/flow\"",
                "topic = \"plant/hall-b/pump-7/flow2\"",
            ),
        ] {
            let changed = MonitorConfig::from_toml(&edited(find, replace)).unwrap();
            assert_ne!(changed.fingerprint(), base, "{find} -> {replace}");
        }
    }

    #[test]
    fn a_payload_table_is_validated_and_enters_the_fingerprint_only_when_present() {
        let base = MonitorConfig::from_toml(EXAMPLE).unwrap();
        assert_eq!(base.payload, None);
        let with = |table: &str| format!("{EXAMPLE}\n[payload]\n{table}\n");
        let seconds = MonitorConfig::from_toml(&with("ts_unit = \"s\"")).unwrap();
        assert_eq!(
            seconds.payload.as_ref().map(|p| p.ts_unit),
            Some(crate::config::TimeUnit::S)
        );
        assert_ne!(seconds.fingerprint(), base.fingerprint());
        assert_eq!(
            rejected_fields(&with("value = \"data.value\"")),
            ["payload.value"]
        );
        let unknown = MonitorConfig::from_toml(&with("ts_unit = \"seconds\"")).unwrap_err();
        assert!(unknown.to_string().contains("rfc3339"), "{unknown}");
        let json = serde_json::to_value(&seconds).unwrap();
        assert_eq!(MonitorConfig::from_json(json).unwrap(), seconds);
    }

    #[test]
    fn the_stored_json_form_round_trips() {
        let config = MonitorConfig::from_toml(EXAMPLE).unwrap();
        let json = serde_json::to_value(&config).unwrap();
        assert_eq!(MonitorConfig::from_json(json).unwrap(), config);
    }
}
