//! The workspace as its manifests declare it, for tests that keep the
//! documentation and the image build in step with the crates.

use std::path::PathBuf;

/// One workspace member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// The member's folder relative to the workspace root (`.` for `radar`).
    pub folder: String,
    /// Its package name (`radar-demo`).
    pub package: String,
}

impl Member {
    /// The folder holding the member's sources: `src/` for the root package,
    /// else `FOLDER/`.
    pub fn shown_folder(&self) -> String {
        if self.folder == "." {
            "src/".to_string()
        } else {
            format!("{}/", self.folder)
        }
    }
}

/// The workspace root (the folder of the root Cargo.toml).
pub fn root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

fn manifest(folder: &str) -> toml::Table {
    let path = root().join(folder).join("Cargo.toml");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    text.parse()
        .unwrap_or_else(|e| panic!("parsing {}: {e}", path.display()))
}

/// The members of the root Cargo.toml's `[workspace]`, in its order.
pub fn members() -> Vec<Member> {
    let root = manifest(".");
    let listed = root["workspace"]["members"]
        .as_array()
        .expect("Cargo.toml lists [workspace] members");
    listed
        .iter()
        .map(|m| {
            let folder = m.as_str().expect("a workspace member is a folder name");
            let package = manifest(folder)["package"]["name"]
                .as_str()
                .unwrap_or_else(|| panic!("{folder}/Cargo.toml has no package name"))
                .to_string();
            Member {
                folder: folder.to_string(),
                package,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_members_include_the_library_at_the_root_and_this_kit() {
        let members = members();
        let root = members.iter().find(|m| m.folder == ".").expect("root");
        assert_eq!(root.package, "radar");
        assert_eq!(root.shown_folder(), "src/");
        assert!(members.iter().any(|m| m.package == "radar-testkit"));
    }
}
