//! Reads the exact versions of the crates that define radar's numeric behaviour
//! from Cargo.lock, so the snapshot envelope binds them without anyone typing a
//! version number by hand in a second place.

use std::{env, fs, path::PathBuf};

/// Crates whose versions change the numbers a detector produces.
const SCIENTIFIC_CRATES: &[&str] = &["statrs", "nalgebra"];

fn main() {
    let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap_or_default());
    let lock_path = manifest_dir.join("Cargo.lock");
    println!("cargo:rerun-if-changed={}", lock_path.display());
    let lock = fs::read_to_string(&lock_path).unwrap_or_default();
    let mut found = Vec::new();
    for name in SCIENTIFIC_CRATES {
        let version = locked_version(&lock, name).unwrap_or_else(|| {
            panic!(
                "Cargo.lock has no entry for {name}: the snapshot envelope needs its exact version"
            )
        });
        found.push(format!("{name}={version}"));
    }
    println!(
        "cargo:rustc-env=RADAR_SCIENTIFIC_CRATES={}",
        found.join(",")
    );
}

/// The version of the single `[[package]]` named `name` in a Cargo.lock.
fn locked_version(lock: &str, name: &str) -> Option<String> {
    let mut versions = Vec::new();
    for block in lock.split("[[package]]") {
        let mut lines = block.lines().map(str::trim);
        let is_it = lines.clone().any(|l| l == format!("name = \"{name}\""));
        if is_it && let Some(v) = lines.find_map(|l| l.strip_prefix("version = \"")) {
            versions.push(v.trim_end_matches('"').to_string());
        }
    }
    versions.sort();
    versions.dedup();
    match versions.as_slice() {
        [one] => Some(one.clone()),
        [] => None,
        many => panic!("Cargo.lock holds several versions of {name}: {many:?}; pin one"),
    }
}
