//! The snapshot envelope: what the signature covers, in a hand-written,
//! fixed-order byte encoding that no serializer upgrade can reorder.
//!
//! Layout (integers big-endian, strings as u16 length + UTF-8):
//! `magic "RADARSNP" | format u16 | service id 16 | config fingerprint 32 |
//! runtime versions str | processed count u64 | observation history len u32 |
//! saved at i64 (µs since epoch) | payload len u64 | payload SHA-256 32 |
//! key id str | graph | check 8`, where `graph` is one byte 0 (not a graph
//! run) or 1 followed by `semantics hash str | readings u16 | per reading:
//! name str, topic str, required u8`, and `check` is the first 8 bytes of
//! the SHA-256 of everything before it. The check is not a security measure
//! (the HMAC is); it tells damaged bytes apart from a snapshot signed with
//! another key.
//!
//! Format 2 added `graph`, so that a graph run's binding is checked on
//! signed fields before any payload byte is decoded. Format 1 envelopes are
//! refused by name (the format was never released; see the README).

use chrono::{DateTime, Utc};
use sha2::{Digest, Sha256};
use thiserror::Error;
use uuid::Uuid;

use super::BoundGraph;
use crate::config::ReadingConfig;

const MAGIC: &[u8; 8] = b"RADARSNP";
const CHECK_LEN: usize = 8;
/// Strings longer than this are not something radar writes.
const MAX_STR_LEN: usize = 4096;
/// More readings than this are not something a monitor has.
const MAX_READINGS: usize = 1024;

/// The signed description of a snapshot. Built by `seal`, read back by `parse`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Envelope {
    pub format_version: u16,
    pub service_id: Uuid,
    /// `MonitorConfig::fingerprint()` of the config the state was computed under.
    pub config_fingerprint: [u8; 32],
    /// See `versions::runtime_versions`.
    pub runtime_versions: String,
    /// Frames the detector has processed, cumulative over restarts.
    pub processed_count: u64,
    /// Readings with a watermark in the payload; lets the empty-history rule
    /// run before the payload is decoded.
    pub observation_history_len: u32,
    /// Save time, at microsecond precision (what PostgreSQL keeps).
    pub saved_at: DateTime<Utc>,
    pub payload_len: u64,
    pub payload_sha256: [u8; 32],
    pub key_id: String,
    /// A graph run's executable semantics and resolved readings; `None` for
    /// a plain monitor.
    pub graph: Option<BoundGraph>,
}

/// Why envelope bytes could not be read.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum EnvelopeError {
    #[error("the envelope ends early ({0} bytes)")]
    Truncated(usize),
    #[error("the envelope's check bytes do not match its contents (damaged bytes)")]
    CheckMismatch,
    #[error("the envelope does not start with the radar snapshot marker")]
    NotASnapshot,
    #[error("the envelope uses format version {0}, this binary reads only version {expected}", expected = super::FORMAT_VERSION)]
    UnknownFormat(u16),
    #[error("the envelope field {0} is malformed")]
    Malformed(&'static str),
    #[error("the envelope has {0} unexpected bytes after its last field")]
    TrailingBytes(usize),
}

impl Envelope {
    /// The canonical bytes the signature is computed over.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(192 + self.runtime_versions.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&self.format_version.to_be_bytes());
        out.extend_from_slice(self.service_id.as_bytes());
        out.extend_from_slice(&self.config_fingerprint);
        put_str(&mut out, &self.runtime_versions);
        out.extend_from_slice(&self.processed_count.to_be_bytes());
        out.extend_from_slice(&self.observation_history_len.to_be_bytes());
        out.extend_from_slice(&self.saved_at.timestamp_micros().to_be_bytes());
        out.extend_from_slice(&self.payload_len.to_be_bytes());
        out.extend_from_slice(&self.payload_sha256);
        put_str(&mut out, &self.key_id);
        match &self.graph {
            None => out.push(0),
            Some(graph) => {
                out.push(1);
                put_str(&mut out, &graph.semantics_hash);
                let count = graph.readings.len().min(MAX_READINGS);
                out.extend_from_slice(&(count as u16).to_be_bytes());
                for reading in &graph.readings[..count] {
                    put_str(&mut out, &reading.name);
                    put_str(&mut out, &reading.topic);
                    out.push(u8::from(reading.required));
                }
            }
        }
        let check = check_of(&out);
        out.extend_from_slice(&check);
        out
    }

    /// Checks the framing (length, check bytes, marker) of envelope bytes
    /// and returns their format version, without reading any other field.
    /// Works for every format version, so an old or new snapshot is named
    /// as such instead of looking damaged.
    pub fn framed_version(bytes: &[u8]) -> Result<u16, EnvelopeError> {
        if bytes.len() < MAGIC.len() + 2 + CHECK_LEN {
            return Err(EnvelopeError::Truncated(bytes.len()));
        }
        let (body, check) = bytes.split_at(bytes.len() - CHECK_LEN);
        if check_of(body) != check {
            return Err(EnvelopeError::CheckMismatch);
        }
        if &body[..MAGIC.len()] != MAGIC {
            return Err(EnvelopeError::NotASnapshot);
        }
        Ok(u16::from_be_bytes([
            body[MAGIC.len()],
            body[MAGIC.len() + 1],
        ]))
    }

    /// Reads envelope bytes of this binary's format version.
    pub fn parse(bytes: &[u8]) -> Result<Self, EnvelopeError> {
        let version = Self::framed_version(bytes)?;
        if version != super::FORMAT_VERSION {
            return Err(EnvelopeError::UnknownFormat(version));
        }
        let body = &bytes[MAGIC.len() + 2..bytes.len() - CHECK_LEN];
        let mut r = Reader {
            rest: body,
            total: bytes.len(),
        };
        let service_id = Uuid::from_bytes(r.array("service_id")?);
        let config_fingerprint = r.array("config_fingerprint")?;
        let runtime_versions = r.string("runtime_versions")?;
        let processed_count = u64::from_be_bytes(r.array("processed_count")?);
        let observation_history_len = u32::from_be_bytes(r.array("observation_history_len")?);
        let saved_at = DateTime::from_timestamp_micros(i64::from_be_bytes(r.array("saved_at")?))
            .ok_or(EnvelopeError::Malformed("saved_at"))?;
        let payload_len = u64::from_be_bytes(r.array("payload_len")?);
        let payload_sha256 = r.array("payload_sha256")?;
        let key_id = r.string("key_id")?;
        let graph = match r.array::<1>("graph")?[0] {
            0 => None,
            1 => {
                let semantics_hash = r.string("graph.semantics_hash")?;
                let count = u16::from_be_bytes(r.array("graph.readings")?) as usize;
                if count > MAX_READINGS {
                    return Err(EnvelopeError::Malformed("graph.readings"));
                }
                let mut readings = Vec::with_capacity(count);
                for _ in 0..count {
                    let name = r.string("graph.readings.name")?;
                    let topic = r.string("graph.readings.topic")?;
                    let required = match r.array::<1>("graph.readings.required")?[0] {
                        0 => false,
                        1 => true,
                        _ => return Err(EnvelopeError::Malformed("graph.readings.required")),
                    };
                    readings.push(ReadingConfig {
                        name,
                        topic,
                        required,
                    });
                }
                Some(BoundGraph {
                    semantics_hash,
                    readings,
                })
            }
            _ => return Err(EnvelopeError::Malformed("graph")),
        };
        if !r.rest.is_empty() {
            return Err(EnvelopeError::TrailingBytes(r.rest.len()));
        }
        Ok(Self {
            format_version: version,
            service_id,
            config_fingerprint,
            runtime_versions,
            processed_count,
            observation_history_len,
            saved_at,
            payload_len,
            payload_sha256,
            key_id,
            graph,
        })
    }
}

fn check_of(body: &[u8]) -> [u8; CHECK_LEN] {
    let digest = Sha256::digest(body);
    let mut check = [0; CHECK_LEN];
    check.copy_from_slice(&digest[..CHECK_LEN]);
    check
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    // Longer strings are cut at a char boundary rather than panicking; radar
    // never writes them, and the signature covers whatever was written.
    let mut end = s.len().min(MAX_STR_LEN);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    out.extend_from_slice(&(end as u16).to_be_bytes());
    out.extend_from_slice(&s.as_bytes()[..end]);
}

/// A cursor over the envelope body; every read is bounds-checked.
struct Reader<'a> {
    rest: &'a [u8],
    total: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], EnvelopeError> {
        if self.rest.len() < n {
            return Err(EnvelopeError::Truncated(self.total));
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }

    fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], EnvelopeError> {
        self.take(N)?
            .try_into()
            .map_err(|_| EnvelopeError::Malformed(field))
    }

    fn string(&mut self, field: &'static str) -> Result<String, EnvelopeError> {
        let len = u16::from_be_bytes(self.array(field)?) as usize;
        if len > MAX_STR_LEN {
            return Err(EnvelopeError::Malformed(field));
        }
        let bytes = self.take(len)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| EnvelopeError::Malformed(field))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Envelope {
        Envelope {
            format_version: super::super::FORMAT_VERSION,
            service_id: Uuid::from_u128(0x1234),
            config_fingerprint: [9; 32],
            runtime_versions: "statrs=0.19.1,detector=x,format=2".into(),
            processed_count: 42,
            observation_history_len: 3,
            saved_at: DateTime::from_timestamp_micros(1_790_000_000_123_456).unwrap(),
            payload_len: 100,
            payload_sha256: [5; 32],
            key_id: "0123456789abcdef".into(),
            graph: None,
        }
    }

    fn graph_sample() -> Envelope {
        Envelope {
            graph: Some(BoundGraph {
                semantics_hash: "a".repeat(64),
                readings: vec![
                    ReadingConfig {
                        name: "flow".into(),
                        topic: "plant/pump7/flow".into(),
                        required: true,
                    },
                    ReadingConfig {
                        name: "note".into(),
                        topic: "plant/pump7/note".into(),
                        required: false,
                    },
                ],
            }),
            ..sample()
        }
    }

    #[test]
    fn a_graph_binding_is_read_back_exactly_and_every_prefix_is_refused() {
        let bytes = graph_sample().encode();
        assert_eq!(Envelope::parse(&bytes).unwrap(), graph_sample());
        assert_ne!(bytes, sample().encode());
        for len in 0..bytes.len() {
            assert!(Envelope::parse(&bytes[..len]).is_err(), "prefix of {len}");
        }
    }

    #[test]
    fn a_changed_graph_binding_changes_the_encoding() {
        let base = graph_sample().encode();
        let mut env = graph_sample();
        env.graph.as_mut().unwrap().readings[0].topic = "plant/pump8/flow".into();
        assert_ne!(env.encode(), base);
        let mut env = graph_sample();
        env.graph.as_mut().unwrap().readings[1].required = true;
        assert_ne!(env.encode(), base);
    }

    #[test]
    fn parse_reads_back_exactly_what_encode_wrote() {
        let bytes = sample().encode();
        assert_eq!(Envelope::parse(&bytes).unwrap(), sample());
        assert_eq!(Envelope::parse(&bytes).unwrap().encode(), bytes);
    }

    #[test]
    fn every_shorter_prefix_is_refused_without_panicking() {
        let bytes = sample().encode();
        for len in 0..bytes.len() {
            assert!(
                Envelope::parse(&bytes[..len]).is_err(),
                "prefix of {len} bytes"
            );
        }
    }

    #[test]
    fn another_format_version_is_named_not_called_damage() {
        let mut env = sample();
        env.format_version = 1;
        assert_eq!(
            Envelope::parse(&env.encode()),
            Err(EnvelopeError::UnknownFormat(1))
        );
        assert_eq!(Envelope::framed_version(&env.encode()), Ok(1));
    }

    #[test]
    fn a_changed_field_changes_the_encoding() {
        let base = sample().encode();
        let mut env = sample();
        env.processed_count += 1;
        assert_ne!(env.encode(), base);
        let mut env = sample();
        env.key_id.push('0');
        assert_ne!(env.encode(), base);
    }
}
