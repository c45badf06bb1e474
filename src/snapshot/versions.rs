//! The versions a snapshot is bound to: the numeric crates from Cargo.lock,
//! the detector algorithm and the snapshot format.

use std::collections::BTreeMap;

use crate::detector::ALGORITHM_VERSION;

/// Layout of the envelope and payload. Bump on any change to either.
/// 2: the envelope carries a graph run's binding (semantics and readings).
pub const FORMAT_VERSION: u16 = 2;

/// Exact versions of the crates that decide the detector's numbers, written
/// by `build.rs` from Cargo.lock (e.g. `statrs=0.19.1,nalgebra=0.35.0`).
pub const SCIENTIFIC_CRATES: &str = env!("RADAR_SCIENTIFIC_CRATES");

/// The runtime versions of this binary, as one canonical string:
/// `statrs=..,nalgebra=..,detector=..,format=..`.
pub fn runtime_versions() -> String {
    canonical(SCIENTIFIC_CRATES, ALGORITHM_VERSION, FORMAT_VERSION)
}

fn canonical(crates: &str, detector: &str, format: u16) -> String {
    format!("{crates},detector={detector},format={format}")
}

/// One component whose version differs between a snapshot and this binary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionChange {
    pub component: String,
    /// `None` when the snapshot did not name this component.
    pub snapshot: Option<String>,
    /// `None` when this binary does not have this component.
    pub running: Option<String>,
}

impl std::fmt::Display for VersionChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let show = |v: &Option<String>| v.clone().unwrap_or_else(|| "absent".to_string());
        write!(
            f,
            "{} {} in the snapshot, {} in this binary",
            self.component,
            show(&self.snapshot),
            show(&self.running)
        )
    }
}

/// The components whose versions differ, in name order. Empty when equal.
pub fn version_changes(snapshot: &str, running: &str) -> Vec<VersionChange> {
    let a = components(snapshot);
    let b = components(running);
    let mut names: Vec<&str> = a.keys().chain(b.keys()).copied().collect();
    names.sort_unstable();
    names.dedup();
    names
        .into_iter()
        .filter(|name| a.get(name) != b.get(name))
        .map(|name| VersionChange {
            component: name.to_string(),
            snapshot: a.get(name).map(|v| v.to_string()),
            running: b.get(name).map(|v| v.to_string()),
        })
        .collect()
}

fn components(text: &str) -> BTreeMap<&str, &str> {
    text.split(',')
        .filter(|part| !part.is_empty())
        .map(|part| part.split_once('=').unwrap_or((part, "")))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtime_versions_name_every_numeric_crate_the_detector_and_the_format() {
        let versions = runtime_versions();
        for name in ["statrs=", "nalgebra=", "format=2"] {
            assert!(versions.contains(name), "{versions}");
        }
        assert!(
            versions.contains(&format!("detector={ALGORITHM_VERSION}")),
            "{versions}"
        );
    }

    #[test]
    fn changed_components_are_named_with_both_versions() {
        let changes = version_changes(
            "statrs=0.19.1,nalgebra=0.35.0,detector=a,format=1",
            "statrs=0.19.2,nalgebra=0.35.0,detector=a,format=1,extra=3",
        );
        assert_eq!(changes.len(), 2);
        assert_eq!(changes[0].component, "extra");
        assert_eq!(changes[0].snapshot, None);
        assert_eq!(
            changes[1].to_string(),
            "statrs 0.19.1 in the snapshot, 0.19.2 in this binary"
        );
    }

    #[test]
    fn equal_versions_have_no_changes() {
        assert!(version_changes(&runtime_versions(), &runtime_versions()).is_empty());
    }
}
