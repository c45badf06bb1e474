//! The operator documentation stays in step with the code.

use radar::config::{DEVELOPMENT_KEY, VARIABLES};

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
