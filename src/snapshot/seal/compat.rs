//! Whether a verified snapshot may be restored by this monitor: the
//! compatibility checks and the empty-history rule, all on signed envelope
//! fields, and what changed in a graph run's binding.

use super::SnapshotBinding;
use crate::snapshot::{
    BoundGraph, CheckpointKey, Envelope, GraphChange, IncompatibleReason, key::hex, version_changes,
};

/// The compatibility checks and the empty-history rule, on a verified
/// envelope: every one on signed envelope fields, so none needs the payload.
/// A graph run's binding is compared before the config fingerprint (which
/// covers it too), so its refusal says what changed in the graph.
pub fn check_compatible(
    envelope: &Envelope,
    binding: &SnapshotBinding,
    key: &CheckpointKey,
) -> Result<(), IncompatibleReason> {
    if envelope.service_id != binding.service_id {
        return Err(IncompatibleReason::OtherService {
            snapshot: envelope.service_id,
        });
    }
    if let Some(change) = graph_change(binding, envelope.graph.as_ref()) {
        return Err(change);
    }
    if envelope.config_fingerprint != binding.config_fingerprint {
        return Err(IncompatibleReason::ConfigChanged {
            snapshot: hex(&envelope.config_fingerprint[..8]),
            running: hex(&binding.config_fingerprint[..8]),
        });
    }
    let changes = version_changes(&envelope.runtime_versions, &binding.runtime_versions);
    if !changes.is_empty() || envelope.runtime_versions != binding.runtime_versions {
        return Err(IncompatibleReason::RuntimeVersions(changes));
    }
    let running = key.key_id();
    if envelope.key_id != running {
        return Err(IncompatibleReason::AnotherKey {
            snapshot: envelope.key_id.clone(),
            running,
        });
    }
    if envelope.processed_count > 0 && envelope.observation_history_len == 0 {
        return Err(IncompatibleReason::NoObservationHistory {
            processed_count: envelope.processed_count,
        });
    }
    Ok(())
}

/// What differs between the graph binding a run's snapshot was signed
/// under (its envelope's) and the one the run is bound to now; `None` when
/// nothing does, or for a plain monitor (its config fingerprint covers the
/// rest). A snapshot without a graph binding read by a graph run differs in
/// everything.
pub fn graph_change(
    binding: &SnapshotBinding,
    stored: Option<&BoundGraph>,
) -> Option<IncompatibleReason> {
    let expected = binding.graph.as_ref()?;
    let (stored_hash, stored_readings) = match stored {
        Some(s) => (s.semantics_hash.as_str(), s.readings.as_slice()),
        None => ("none (not a graph run)", &[][..]),
    };
    let semantics = (stored_hash != expected.semantics_hash)
        .then(|| (stored_hash.to_string(), expected.semantics_hash.clone()));
    let readings = reading_changes(stored_readings, &expected.readings);
    if semantics.is_none() && readings.is_empty() {
        return None;
    }
    Some(IncompatibleReason::GraphChanged(GraphChange {
        semantics,
        readings,
    }))
}

/// Each reading whose topic (or presence, or requirement) differs, as
/// `name: snapshot -> now`, in name order.
fn reading_changes(
    stored: &[crate::config::ReadingConfig],
    now: &[crate::config::ReadingConfig],
) -> Vec<String> {
    let describe = |r: Option<&crate::config::ReadingConfig>| match r {
        None => "absent".to_string(),
        Some(r) if r.required => r.topic.clone(),
        Some(r) => format!("{} (optional)", r.topic),
    };
    let mut names: Vec<&str> = stored.iter().chain(now).map(|r| r.name.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    let position = |list: &[crate::config::ReadingConfig], name: &str| {
        list.iter().position(|r| r.name == name)
    };
    names
        .into_iter()
        .filter_map(|name| {
            let (a, b) = (position(stored, name), position(now, name));
            let (ra, rb) = (a.map(|i| &stored[i]), b.map(|i| &now[i]));
            (ra != rb || a != b).then(|| {
                let order = if a != b && ra.is_some() && rb.is_some() {
                    " (moved in the frame order)"
                } else {
                    ""
                };
                format!("{name}: {} -> {}{order}", describe(ra), describe(rb))
            })
        })
        .collect()
}
