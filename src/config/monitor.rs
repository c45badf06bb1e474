//! A monitor's definition: its readings, alignment policy and detector
//! settings, read from TOML and stored as JSON in `services`.

use std::collections::HashSet;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::{FieldError, FieldErrors};
use crate::{align::AlignmentPolicy, detector::DetectorSettings};

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
}

impl MonitorConfig {
    /// Parses and validates a monitor file's TOML text.
    pub fn from_toml(text: &str) -> Result<Self, FieldErrors> {
        let config: Self = toml::from_str(text).map_err(|e| {
            let field = e
                .span()
                .map(|span| text[..span.start.min(text.len())].lines().count().to_string())
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
            errors.push(FieldError::new("readings", "a monitor needs at least one reading"));
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
        errors.extend(self.detector.validate("detector", required));
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
