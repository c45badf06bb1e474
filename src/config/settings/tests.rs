use std::path::Path;

use figment::providers::Serialized;

use super::*;
use crate::config::{CredentialError, KeyError};

fn vars(pairs: &[(&str, &str)]) -> EnvVars {
    let mut v: EnvVars = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    // Never read the repository's config/default.toml from unit tests.
    if !pairs.iter().any(|(k, _)| *k == "RADAR_CONFIG_FILE") {
        v.push(("RADAR_CONFIG_FILE".into(), "/dev/null".into()));
    }
    v
}

fn no_flags() -> Serialized<serde_json::Value> {
    Serialized::defaults(serde_json::json!({}))
}

#[test]
fn defaults_match_the_spec() {
    let s = Settings::load(&vars(&[]), no_flags()).unwrap().settings;
    assert!(s.db_write_enabled);
    assert_eq!(s.checkpoint_max_interval_seconds, 30);
    assert_eq!(s.checkpoint_timeout_seconds, 30);
    assert_eq!(s.env, Environment::Development);
    assert_eq!(s.shard, Shard { index: 1, count: 1 });
    assert_eq!(s.log_format, LogFormat::Text);
}

#[test]
fn environment_overrides_the_file_and_flags_override_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("default.toml");
    std::fs::write(
        &file,
        "checkpoint_interval = 10\ncheckpoint_timeout_seconds = 11\nshard = \"1/2\"\n",
    )
    .unwrap();
    let file = file.display().to_string();
    let v = vars(&[
        ("RADAR_CONFIG_FILE", file.as_str()),
        ("RADAR_CHECKPOINT_TIMEOUT_SECONDS", "12"),
        ("RADAR_SHARD", "2/2"),
        ("RADAR_DB_WRITE_ENABLED", "false"),
    ]);
    let flags = Serialized::defaults(serde_json::json!({ "shard": "1/3" }));
    let s = Settings::load(&v, flags).unwrap().settings;
    assert_eq!(s.checkpoint_interval, 10, "from the file");
    assert_eq!(
        s.checkpoint_timeout_seconds, 12,
        "environment beats the file"
    );
    assert_eq!(
        s.shard,
        Shard { index: 1, count: 3 },
        "flags beat the environment"
    );
    assert!(!s.db_write_enabled);
}

#[test]
fn production_refuses_test_only_variables_and_development_accepts_them() {
    let test_var = ("RADAR_TEST_MQTT_BACKOFF_MS", "100,1000");
    let err =
        Settings::load(&vars(&[("RADAR_ENV", "production"), test_var]), no_flags()).unwrap_err();
    assert!(
        matches!(&err, ConfigError::TestVariablesInProduction { names } if names == "RADAR_TEST_MQTT_BACKOFF_MS"),
        "{err}"
    );
    assert!(Settings::load(&vars(&[test_var]), no_flags()).is_ok());
}

#[test]
fn production_accepts_test_variables_that_steer_only_test_harnesses() {
    // Inherited from a test run; they change nothing a worker does.
    let loaded = Settings::load(
        &vars(&[
            ("RADAR_ENV", "production"),
            ("RADAR_TEST_SKAB_DIR", "/data/skab"),
            ("RADAR_TEST_DATABASE_URL", "postgres://127.0.0.1"),
        ]),
        no_flags(),
    );
    assert!(loaded.is_ok(), "{:?}", loaded.err());
}

#[test]
fn a_misspelt_test_variable_is_reported_like_any_unknown_one() {
    let loaded = Settings::load(
        &vars(&[
            ("RADAR_TEST_SKAB_DIR", "/data/skab"),
            ("RADAR_TEST_MQTT_BACKOF_MS", "100,1000"),
        ]),
        no_flags(),
    )
    .expect("loads");
    assert_eq!(loaded.unknown_variables, ["RADAR_TEST_MQTT_BACKOF_MS"]);
}

#[test]
fn a_named_settings_file_that_is_missing_is_an_error() {
    let v = vars(&[("RADAR_CONFIG_FILE", "/nonexistent/radar.toml")]);
    assert!(matches!(
        Settings::load(&v, no_flags()),
        Err(ConfigError::MissingFile(_))
    ));
}

#[test]
fn invalid_values_name_their_variable() {
    let v = vars(&[
        ("RADAR_CHECKPOINT_INTERVAL", "0"),
        ("RADAR_MQTT_URL", "http://broker"),
        ("RADAR_INGRESS_QUEUE_CAPACITY", "0"),
    ]);
    let Err(ConfigError::Invalid(errors)) = Settings::load(&v, no_flags()) else {
        panic!("expected invalid settings");
    };
    assert_eq!(
        errors.fields(),
        [
            "RADAR_CHECKPOINT_INTERVAL",
            "RADAR_INGRESS_QUEUE_CAPACITY",
            "RADAR_MQTT_URL"
        ]
    );
}

#[test]
fn unparseable_values_are_refused() {
    for (name, value) in [
        ("RADAR_SHARD", "3/2"),
        ("RADAR_SHARD", "0/1"),
        ("RADAR_ENV", "staging"),
        ("RADAR_LOG_FORMAT", "xml"),
        ("RADAR_METRICS_ADDR", "not an address"),
        ("RADAR_DB_WRITE_ENABLED", "maybe"),
    ] {
        let result = Settings::load(&vars(&[(name, value)]), no_flags());
        assert!(
            matches!(result, Err(ConfigError::Layering(_))),
            "{name}={value} should be refused"
        );
    }
}

#[test]
fn unknown_radar_variables_are_reported() {
    let loaded = Settings::load(&vars(&[("RADAR_CHECKPOINT_INTERVALL", "5")]), no_flags()).unwrap();
    assert_eq!(loaded.unknown_variables, ["RADAR_CHECKPOINT_INTERVALL"]);
}

#[test]
fn the_secret_is_absent_from_debug_output_of_the_settings() {
    let v = vars(&[(
        "RADAR_CHECKPOINT_SECRET",
        "super-secret-value-1234567890-abcdef",
    )]);
    let s = Settings::load(&v, no_flags()).unwrap().settings;
    let debug = format!("{s:?}");
    assert!(!debug.contains("super-secret-value"), "{debug}");
    assert!(
        !serde_json::to_string(&s)
            .unwrap()
            .contains("super-secret-value")
    );
    let (secret, _) = s.checkpoint_key().unwrap();
    assert_eq!(secret.expose(), b"super-secret-value-1234567890-abcdef");
}

#[test]
fn production_settings_refuse_the_public_key_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("secret");
    std::fs::write(&path, super::super::DEVELOPMENT_KEY).unwrap();
    let path = path.display().to_string();
    let v = vars(&[
        ("RADAR_ENV", "production"),
        ("RADAR_CHECKPOINT_SECRET_FILE", path.as_str()),
    ]);
    let s = Settings::load(&v, no_flags()).unwrap().settings;
    assert_eq!(
        s.checkpoint_key().unwrap_err(),
        KeyError::PublicDevelopmentKey
    );
}

#[test]
fn the_database_url_file_beats_database_url_and_the_flag_beats_both() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("url");
    std::fs::write(&path, "postgres://radar:from-file-pw@db:5432/radar\n").unwrap();
    let path = path.display().to_string();
    let v = vars(&[
        ("RADAR_DATABASE_URL_FILE", path.as_str()),
        ("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/other"),
    ]);
    let s = Settings::load(&v, no_flags()).unwrap().settings;
    assert_eq!(
        &*s.database_url,
        "postgres://radar:from-file-pw@db:5432/radar"
    );
    assert_eq!(s.database_url_file.as_deref(), Some(Path::new(&path)));
    assert!(!format!("{s:?}").contains("from-file-pw"));
    assert!(!serde_json::to_string(&s).unwrap().contains("from-file-pw"));
    let flag =
        Serialized::defaults(serde_json::json!({ "database_url": "postgres://postgres@h/flag" }));
    let s = Settings::load(&v, flag).unwrap().settings;
    assert_eq!(&*s.database_url, "postgres://postgres@h/flag");
    assert_eq!(s.database_url_file, None);
}

#[test]
fn an_unreadable_database_url_file_is_an_error_naming_it() {
    let v = vars(&[("RADAR_DATABASE_URL_FILE", "/nonexistent/radar_database_url")]);
    let err = Settings::load(&v, no_flags()).unwrap_err().to_string();
    assert!(err.contains("/nonexistent/radar_database_url"), "{err}");
}

#[test]
fn production_refuses_an_inline_mqtt_password_without_printing_it() {
    let v = vars(&[
        ("RADAR_ENV", "production"),
        ("RADAR_MQTT_USERNAME", "radar"),
        ("RADAR_MQTT_PASSWORD", "inline-pw-9876"),
    ]);
    let s = Settings::load(&v, no_flags()).unwrap().settings;
    let err = s.mqtt_credentials().unwrap_err();
    assert_eq!(err, CredentialError::InlinePasswordInProduction);
    assert!(!format!("{s:?} {err} {err:?}").contains("inline-pw"));
}

#[test]
fn a_mqtt_url_with_a_password_is_refused_without_echoing_it() {
    let v = vars(&[("RADAR_MQTT_URL", "mqtt://radar:url-pw-5555@broker:1883")]);
    let err = Settings::load(&v, no_flags()).unwrap_err();
    let shown = format!("{err} {err:?}");
    assert!(shown.contains("RADAR_MQTT_PASSWORD_FILE"), "{shown}");
    assert!(!shown.contains("url-pw"), "{shown}");
}

#[test]
fn tls_files_need_an_mqtts_url_and_come_in_pairs() {
    let v = vars(&[("RADAR_MQTT_CA_FILE", "/etc/ca.pem")]);
    let Err(ConfigError::Invalid(errors)) = Settings::load(&v, no_flags()) else {
        panic!("a CA file with a plain URL is refused");
    };
    assert_eq!(errors.fields(), ["RADAR_MQTT_CA_FILE"]);
    let v = vars(&[
        ("RADAR_MQTT_URL", "mqtts://broker"),
        ("RADAR_MQTT_CLIENT_CERT_FILE", "/etc/client.pem"),
    ]);
    let Err(ConfigError::Invalid(errors)) = Settings::load(&v, no_flags()) else {
        panic!("a client certificate without its key is refused");
    };
    assert_eq!(errors.fields(), ["RADAR_MQTT_CLIENT_CERT_FILE"]);
}

#[test]
fn the_keepalive_defaults_to_ten_seconds_and_must_fit_mqtts_16_bits() {
    let s = Settings::load(&vars(&[]), no_flags()).unwrap().settings;
    assert_eq!(s.mqtt_keepalive_seconds, 10);
    for bad in ["0", "65536"] {
        let v = vars(&[("RADAR_MQTT_KEEPALIVE_SECONDS", bad)]);
        assert!(Settings::load(&v, no_flags()).is_err(), "{bad}");
    }
}

#[test]
fn mqtt_urls_parse_to_host_and_port() {
    assert_eq!(
        mqtt_address("mqtt://127.0.0.1:1883").unwrap(),
        ("127.0.0.1".into(), 1883)
    );
    assert_eq!(
        mqtt_address("mqtt://broker").unwrap(),
        ("broker".into(), 1883)
    );
    assert_eq!(
        mqtt_address("mqtt://[::1]:1884").unwrap(),
        ("::1".into(), 1884)
    );
    assert_eq!(
        mqtt_broker("mqtts://broker").unwrap(),
        MqttBroker {
            tls: true,
            host: "broker".into(),
            port: 8883
        }
    );
    assert!(
        mqtt_address("tcp://broker:1883")
            .unwrap_err()
            .contains("mqtt://host:port")
    );
    assert!(
        mqtt_address("ssl://broker:8883")
            .unwrap_err()
            .contains("mqtts://")
    );
    assert!(mqtt_address("mqtt://:1883").is_err());
    assert!(mqtt_address("mqtt://broker:99999").is_err());
}
