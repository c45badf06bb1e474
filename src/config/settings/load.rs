//! Layering defaults, the settings file, the environment and flags into
//! [`Settings`], and what the loaded settings resolve (key, MQTT login,
//! worker id).

use std::path::{Path, PathBuf};

use figment::{
    Figment, Provider,
    providers::{Format, Toml},
};
use thiserror::Error;

use super::{
    DEFAULT_CONFIG_FILE, DEFAULT_SECRET_FILE, DIRECT_VARIABLES, Environment, Settings, VARIABLES,
};
use crate::config::{
    FieldErrors,
    credentials::{
        CredentialError, MqttCredentials, MqttLogin, database_url_file, read_database_url,
        resolve_mqtt_login,
    },
    secret::{KeyError, KeySource, Secret, resolve_key},
};

#[derive(Debug, Error)]
pub enum ConfigError {
    #[error("cannot read settings: {0}")]
    Layering(String),
    #[error("the settings file {0} does not exist")]
    MissingFile(String),
    #[error("invalid settings: {0}")]
    Invalid(#[from] FieldErrors),
    #[error(transparent)]
    Key(#[from] KeyError),
    #[error(
        "test-only variables are set in production: {names}; they steer test runs (e.g. a faster MQTT reconnect schedule), so unset them or leave RADAR_ENV=production off"
    )]
    TestVariablesInProduction { names: String },
    #[error(transparent)]
    Credential(#[from] CredentialError),
}

/// What a test-only variable steers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TestScope {
    /// How a worker behaves (its reconnect schedule, how often it looks
    /// for monitors, how long a fit takes in a test build): refused in
    /// production.
    Worker,
    /// Only a test harness (a test database, the SKAB data); inherited by
    /// every worker a test run starts, which ignores it.
    Harness,
}

/// Every test-only variable. One not listed here is reported as unknown,
/// like any other misspelt `RADAR_*` name.
pub const TEST_VARIABLES: [(&str, TestScope); 7] = [
    ("RADAR_TEST_MQTT_BACKOFF_MS", TestScope::Worker),
    ("RADAR_TEST_START_CONCURRENCY", TestScope::Worker),
    ("RADAR_TEST_SUPERVISOR_POLL_MS", TestScope::Worker),
    ("RADAR_TEST_FIT_DELAY_MS", TestScope::Worker),
    ("RADAR_TEST_DATABASE_URL", TestScope::Harness),
    ("RADAR_TEST_RUMQTTD_PORT", TestScope::Harness),
    ("RADAR_TEST_SKAB_DIR", TestScope::Harness),
];

fn test_scope(name: &str) -> Option<TestScope> {
    TEST_VARIABLES
        .iter()
        .find(|(known, _)| *known == name)
        .map(|(_, scope)| *scope)
}

/// The process environment as seen by [`Settings::load`]; tests pass their own.
pub type EnvVars = Vec<(String, String)>;

/// Settings plus what loading them noticed.
#[derive(Debug)]
pub struct Loaded {
    pub settings: Settings,
    /// `RADAR_*` variables that radar does not know (likely typos).
    pub unknown_variables: Vec<String>,
    /// The settings file read, if any.
    pub config_file: Option<PathBuf>,
}

impl Settings {
    /// `RADAR_CHECKPOINT_TIMEOUT_SECONDS`: how long a started checkpoint may
    /// go uncommitted, and the bound of every database statement.
    pub fn checkpoint_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.checkpoint_timeout_seconds.max(1))
    }

    /// Layers defaults, the settings file, `vars` and `flags`, then validates.
    /// The settings file is `RADAR_CONFIG_FILE`, else `config/default.toml`
    /// when it exists; a named file that does not exist is an error.
    pub fn load(vars: &EnvVars, flags: impl Provider) -> Result<Loaded, ConfigError> {
        let var = |name: &str| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
        let (config_file, explicit) = match var("RADAR_CONFIG_FILE") {
            Some(path) => (PathBuf::from(path), true),
            None => (PathBuf::from(DEFAULT_CONFIG_FILE), false),
        };
        let mut figment = Figment::new();
        let read_file = config_file.exists();
        if read_file {
            figment = figment.merge(Toml::file(&config_file));
        } else if explicit {
            return Err(ConfigError::MissingFile(config_file.display().to_string()));
        }
        let known: Vec<String> = VARIABLES
            .iter()
            .filter(|(name, _)| name.starts_with("RADAR_") && !DIRECT_VARIABLES.contains(name))
            .map(|(name, _)| name["RADAR_".len()..].to_ascii_lowercase())
            .collect();
        let radar_vars: Vec<(String, String)> = vars
            .iter()
            .filter(|(k, _)| k.starts_with("RADAR_"))
            .cloned()
            .collect();
        let url_flag_given = Figment::from(&flags)
            .extract_inner::<String>("database_url")
            .is_ok();
        figment = figment
            .merge(provider_from(&radar_vars, "RADAR_", &known))
            .merge(provider_from(vars, "", &["database_url".to_string()]))
            .merge(flags);
        let mut settings: Settings = figment
            .extract()
            .map_err(|e| ConfigError::Layering(e.to_string()))?;
        settings.checkpoint_secret = var("RADAR_CHECKPOINT_SECRET").map(Secret::new);
        settings.checkpoint_secret_file = var("RADAR_CHECKPOINT_SECRET_FILE").map(PathBuf::from);
        settings.mqtt_password = var("RADAR_MQTT_PASSWORD").map(Secret::new);
        settings.mqtt_password_file = var("RADAR_MQTT_PASSWORD_FILE").map(PathBuf::from);
        // `--database-url` beats everything; then RADAR_DATABASE_URL_FILE
        // (so a development .env's DATABASE_URL does not shadow it).
        let explicit_file = var("RADAR_DATABASE_URL_FILE").map(PathBuf::from);
        if !url_flag_given
            && let Some(path) = database_url_file(
                settings.env,
                explicit_file.as_deref(),
                var("DATABASE_URL").is_some(),
            )
        {
            settings.database_url = read_database_url(&path)?;
            settings.database_url_file = Some(path);
        }
        settings.validate()?;
        if settings.env == Environment::Production {
            // The worker reads these itself; production must never run
            // with a test schedule, so it refuses to start instead.
            let names: Vec<&str> = radar_vars
                .iter()
                .map(|(k, _)| k.as_str())
                .filter(|k| test_scope(k) == Some(TestScope::Worker))
                .collect();
            if !names.is_empty() {
                return Err(ConfigError::TestVariablesInProduction {
                    names: names.join(", "),
                });
            }
        }
        let unknown_variables = radar_vars
            .iter()
            .map(|(k, _)| k.clone())
            .filter(|k| test_scope(k).is_none())
            .filter(|k| !VARIABLES.iter().any(|(name, _)| name == k))
            .collect();
        Ok(Loaded {
            settings,
            unknown_variables,
            config_file: read_file.then_some(config_file),
        })
    }

    /// The checkpoint key by the environment's rules, and where it came from.
    pub fn checkpoint_key(&self) -> Result<(Secret, KeySource), KeyError> {
        let default_file = Path::new(DEFAULT_SECRET_FILE);
        let file = self
            .checkpoint_secret_file
            .as_deref()
            .unwrap_or(default_file);
        resolve_key(
            self.env,
            self.checkpoint_secret.as_ref(),
            Some(file),
            self.checkpoint_secret_file.is_some(),
        )
    }

    /// The MQTT login by the environment's rules (`RADAR_MQTT_USERNAME`,
    /// `RADAR_MQTT_PASSWORD_FILE`, development's `RADAR_MQTT_PASSWORD`).
    pub fn mqtt_credentials(&self) -> Result<Option<MqttCredentials>, CredentialError> {
        resolve_mqtt_login(
            self.env,
            &MqttLogin {
                username: self.mqtt_username.as_deref(),
                inline_password: self.mqtt_password.as_ref(),
                password_file: self.mqtt_password_file.as_deref(),
            },
        )
    }

    /// A stable name for this process: `RADAR_WORKER_ID`, else the host name
    /// plus a random suffix (chosen once per process) so two workers on one
    /// host differ.
    pub fn worker_id(&self) -> String {
        static GENERATED: std::sync::OnceLock<String> = std::sync::OnceLock::new();
        if let Some(id) = &self.worker_id {
            return id.clone();
        }
        GENERATED
            .get_or_init(|| {
                let host = std::fs::read_to_string("/etc/hostname")
                    .map(|h| h.trim().to_string())
                    .unwrap_or_else(|_| "radar".into());
                let suffix = uuid::Uuid::new_v4().simple().to_string();
                format!("{host}-{}", &suffix[..8])
            })
            .clone()
    }
}

/// A figment provider over the given variables with `prefix` stripped,
/// restricted to `keys` (lower case), so unrelated variables are ignored.
fn provider_from(vars: &[(String, String)], prefix: &str, keys: &[String]) -> impl Provider {
    let pairs: Vec<(String, String)> = vars
        .iter()
        .filter_map(|(k, v)| {
            let key = k.strip_prefix(prefix)?.to_ascii_lowercase();
            keys.contains(&key).then(|| (key, v.clone()))
        })
        .collect();
    VarsProvider { pairs }
}

/// Feeds explicit variables through figment's own string parsing.
struct VarsProvider {
    pairs: Vec<(String, String)>,
}

impl Provider for VarsProvider {
    fn metadata(&self) -> figment::Metadata {
        figment::Metadata::named("environment variable")
    }

    fn data(
        &self,
    ) -> Result<figment::value::Map<figment::Profile, figment::value::Dict>, figment::Error> {
        let mut dict = figment::value::Dict::new();
        for (key, value) in &self.pairs {
            let parsed = value
                .parse::<figment::value::Value>()
                .unwrap_or_else(|_| value.clone().into());
            dict.insert(key.clone(), parsed);
        }
        Ok(figment::Profile::Default.collect(dict))
    }
}
