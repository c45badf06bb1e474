//! The operator documentation and the workspace list of src/lib.rs stay in
//! step with the code.

use radar::config::{DEVELOPMENT_KEY, VARIABLES};
use radar_testkit::workspace;

const README: &str = include_str!("../README.md");
const ENV_EXAMPLE: &str = include_str!("../.env.example");

#[test]
fn every_variable_is_documented_in_the_readme_and_env_example() {
    for (name, _) in VARIABLES {
        assert!(README.contains(name), "README.md does not mention {name}");
        assert!(
            ENV_EXAMPLE.contains(name),
            ".env.example does not mention {name}"
        );
    }
}

#[test]
fn every_documented_radar_variable_exists_in_the_code() {
    for text in [README, ENV_EXAMPLE] {
        for word in text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
            // RADAR_TEST_* variables steer the test harness, not radar.
            let is_setting = word.starts_with("RADAR_") && !word.starts_with("RADAR_TEST_");
            if is_setting && word.len() > "RADAR_".len() {
                assert!(
                    VARIABLES.iter().any(|(name, _)| *name == word),
                    "{word} is documented but radar does not read it"
                );
            }
        }
    }
}

#[test]
fn env_example_carries_the_public_development_key() {
    let line = format!("RADAR_CHECKPOINT_SECRET={DEVELOPMENT_KEY}");
    assert!(
        ENV_EXAMPLE.lines().any(|l| l == line),
        ".env.example lacks {line}"
    );
}

#[test]
fn the_default_settings_file_loads() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/config/default.toml");
    let vars = vec![("RADAR_CONFIG_FILE".to_string(), path.to_string())];
    let flags = figment::providers::Serialized::defaults(serde_json::json!({}));
    radar::config::Settings::load(&vars, flags).expect("config/default.toml is valid");
}

/// The crates the `# Workspace` section of src/lib.rs lists, with the line of each.
fn documented_crates() -> Vec<(String, String)> {
    let lib = include_str!("../src/lib.rs");
    lib.lines()
        .skip_while(|l| *l != "//! # Workspace")
        .skip(1)
        .take_while(|l| !l.starts_with("//! #"))
        .filter_map(|l| {
            let name = l.strip_prefix("//! - `")?.split('`').next()?;
            Some((name.to_string(), l.to_string()))
        })
        .collect()
}

#[test]
fn the_library_doc_lists_exactly_the_workspace_crates_with_their_folders() {
    let documented = documented_crates();
    let members = workspace::members();
    for member in &members {
        let (_, line) = documented
            .iter()
            .find(|(name, _)| *name == member.package)
            .unwrap_or_else(|| {
                panic!(
                    "src/lib.rs (# Workspace) does not list the crate {}",
                    member.package
                )
            });
        let folder = member.shown_folder();
        assert!(
            line.contains(&format!("(`{folder}`")),
            "src/lib.rs lists {} without its folder {folder}: {line}",
            member.package
        );
    }
    for (name, _) in &documented {
        assert!(
            members.iter().any(|m| m.package == *name),
            "src/lib.rs (# Workspace) lists {name}, which is not a workspace member"
        );
    }
}
