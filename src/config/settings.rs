//! The worker's settings, layered: built-in defaults < `config/default.toml`
//! < environment (`RADAR_*`, `DATABASE_URL`) < command-line flags.

use std::{
    fmt,
    net::SocketAddr,
    path::{Path, PathBuf},
    str::FromStr,
};

use figment::{
    Figment, Provider,
    providers::{Format, Toml},
};
use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::{
    FieldError, FieldErrors,
    credentials::{
        CredentialError, DEFAULT_DATABASE_URL_FILE, DEFAULT_MQTT_PASSWORD_FILE, DatabaseUrl,
        MqttCredentials, MqttLogin, database_url_file, read_database_url, redact_url,
        resolve_mqtt_login,
    },
    secret::{KeyError, KeySource, Secret, resolve_key},
};

/// Where production mounts the checkpoint secret by default (a Swarm secret).
pub const DEFAULT_SECRET_FILE: &str = "/run/secrets/radar_checkpoint_secret";
/// The settings file read when none is named.
pub const DEFAULT_CONFIG_FILE: &str = "config/default.toml";

/// Every environment variable radar reads, with its default as the README
/// documents it. A test keeps README and `.env.example` in step with this.
pub const VARIABLES: &[(&str, &str)] = &[
    ("RADAR_ENV", "development"),
    ("RADAR_CONFIG_FILE", DEFAULT_CONFIG_FILE),
    ("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/radar"),
    ("RADAR_DATABASE_URL_FILE", DEFAULT_DATABASE_URL_FILE),
    ("RADAR_DB_WRITE_ENABLED", "true"),
    (
        "RADAR_CHECKPOINT_SECRET",
        "(the public development key, development only)",
    ),
    ("RADAR_CHECKPOINT_SECRET_FILE", DEFAULT_SECRET_FILE),
    ("RADAR_CHECKPOINT_INTERVAL", "1000"),
    ("RADAR_CHECKPOINT_MAX_INTERVAL_SECONDS", "30"),
    ("RADAR_CHECKPOINT_TIMEOUT_SECONDS", "30"),
    ("RADAR_MQTT_URL", "mqtt://127.0.0.1:1883"),
    ("RADAR_MQTT_CA_FILE", "(the system's trusted roots)"),
    (
        "RADAR_MQTT_CLIENT_CERT_FILE",
        "(none: no client certificate)",
    ),
    ("RADAR_MQTT_CLIENT_KEY_FILE", "(none)"),
    ("RADAR_MQTT_KEEPALIVE_SECONDS", "10"),
    ("RADAR_MQTT_USERNAME", "(none: connect without credentials)"),
    ("RADAR_MQTT_PASSWORD", "(none; development only)"),
    ("RADAR_MQTT_PASSWORD_FILE", DEFAULT_MQTT_PASSWORD_FILE),
    ("RADAR_MQTT_MAX_MESSAGE_BYTES", "4096"),
    ("RADAR_INGRESS_QUEUE_CAPACITY", "1024"),
    ("RADAR_METRICS_ADDR", "127.0.0.1:9464"),
    ("RADAR_SHARD", "1/1"),
    ("RADAR_LOG_FORMAT", "text"),
    ("RADAR_WORKER_ID", "(hostname and a random suffix)"),
];

/// Variables read directly rather than through the layered settings.
const DIRECT_VARIABLES: &[&str] = &[
    "RADAR_CHECKPOINT_SECRET",
    "RADAR_CHECKPOINT_SECRET_FILE",
    "RADAR_CONFIG_FILE",
    "RADAR_DATABASE_URL_FILE",
    "RADAR_MQTT_PASSWORD",
    "RADAR_MQTT_PASSWORD_FILE",
];

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Environment {
    #[default]
    Development,
    Production,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// This worker's slice of the monitors: `index` of `count`, both from 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Shard {
    pub index: u32,
    pub count: u32,
}

impl Default for Shard {
    fn default() -> Self {
        Self { index: 1, count: 1 }
    }
}

impl FromStr for Shard {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let parsed = s
            .split_once('/')
            .and_then(|(i, n)| Some((i.trim().parse().ok()?, n.trim().parse().ok()?)));
        match parsed {
            Some((index, count)) if count >= 1 && (1..=count).contains(&index) => {
                Ok(Self { index, count })
            }
            _ => Err(format!(
                "{s:?} is not a shard: write I/N with 1 <= I <= N, e.g. 2/3"
            )),
        }
    }
}

impl TryFrom<String> for Shard {
    type Error = String;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<Shard> for String {
    fn from(s: Shard) -> Self {
        s.to_string()
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

/// The worker's settings after layering and validation.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    #[serde(default)]
    pub env: Environment,
    /// Prints without its password; dereferences to the full URL.
    #[serde(default = "default_database_url")]
    pub database_url: DatabaseUrl,
    /// The file the URL was read from (`RADAR_DATABASE_URL_FILE`), if any.
    #[serde(skip)]
    pub database_url_file: Option<PathBuf>,
    /// When false, no snapshot is read or written and every monitor starts fresh.
    #[serde(default = "yes")]
    pub db_write_enabled: bool,
    /// Checkpoint after this many frames.
    #[serde(default = "default_checkpoint_interval")]
    pub checkpoint_interval: u64,
    /// Checkpoint at least this often while anything changed.
    #[serde(default = "thirty")]
    pub checkpoint_max_interval_seconds: u64,
    /// When a started checkpoint has not committed for this long, the model
    /// stops advancing. Also bounds every database statement.
    #[serde(default = "thirty")]
    pub checkpoint_timeout_seconds: u64,
    #[serde(default = "default_mqtt_url")]
    pub mqtt_url: String,
    /// PEM roots for an `mqtts://` broker; the system's roots when unset.
    #[serde(default)]
    pub mqtt_ca_file: Option<PathBuf>,
    /// Client certificate chain and key (PEM) for mutual TLS.
    #[serde(default)]
    pub mqtt_client_cert_file: Option<PathBuf>,
    #[serde(default)]
    pub mqtt_client_key_file: Option<PathBuf>,
    /// A silent broker is declared dead after about twice this.
    #[serde(default = "default_keepalive")]
    pub mqtt_keepalive_seconds: u64,
    /// Sent to the broker with the password from `RADAR_MQTT_PASSWORD_FILE`.
    #[serde(default)]
    pub mqtt_username: Option<String>,
    /// Larger MQTT messages are rejected (and counted) without parsing.
    #[serde(default = "default_max_message_bytes")]
    pub mqtt_max_message_bytes: usize,
    /// Observations waiting for the model, per monitor; a full queue slows the broker.
    #[serde(default = "default_queue_capacity")]
    pub ingress_queue_capacity: usize,
    #[serde(default = "default_metrics_addr")]
    pub metrics_addr: SocketAddr,
    #[serde(default)]
    pub shard: Shard,
    #[serde(default)]
    pub log_format: LogFormat,
    /// Names this process in status rows and MQTT client ids.
    #[serde(default)]
    pub worker_id: Option<String>,
    /// Read from `RADAR_CHECKPOINT_SECRET` only, never from a file of settings.
    #[serde(skip)]
    checkpoint_secret: Option<Secret>,
    #[serde(skip)]
    checkpoint_secret_file: Option<PathBuf>,
    /// Development only: `RADAR_MQTT_PASSWORD`.
    #[serde(skip)]
    mqtt_password: Option<Secret>,
    #[serde(skip)]
    mqtt_password_file: Option<PathBuf>,
}

fn yes() -> bool {
    true
}
fn thirty() -> u64 {
    30
}
fn default_database_url() -> DatabaseUrl {
    DatabaseUrl::new("postgres://postgres@127.0.0.1:5432/radar")
}
fn default_checkpoint_interval() -> u64 {
    1000
}
fn default_mqtt_url() -> String {
    "mqtt://127.0.0.1:1883".into()
}
fn default_keepalive() -> u64 {
    10
}
fn default_max_message_bytes() -> usize {
    4096
}
fn default_queue_capacity() -> usize {
    1024
}
fn default_metrics_addr() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 9464))
}

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
pub const TEST_VARIABLES: [(&str, TestScope); 6] = [
    ("RADAR_TEST_MQTT_BACKOFF_MS", TestScope::Worker),
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

    fn validate(&self) -> Result<(), FieldErrors> {
        let mut errors = Vec::new();
        for (name, value) in [
            ("RADAR_CHECKPOINT_INTERVAL", self.checkpoint_interval),
            (
                "RADAR_CHECKPOINT_MAX_INTERVAL_SECONDS",
                self.checkpoint_max_interval_seconds,
            ),
            (
                "RADAR_CHECKPOINT_TIMEOUT_SECONDS",
                self.checkpoint_timeout_seconds,
            ),
        ] {
            if value == 0 {
                errors.push(FieldError::new(name, "must be at least 1"));
            }
        }
        if self.ingress_queue_capacity == 0 {
            errors.push(FieldError::new(
                "RADAR_INGRESS_QUEUE_CAPACITY",
                "must be at least 1",
            ));
        }
        // MQTT's own limit on a packet is 256 MiB; below 64 bytes no JSON payload fits.
        if !(64..=268_435_455).contains(&self.mqtt_max_message_bytes) {
            errors.push(FieldError::new(
                "RADAR_MQTT_MAX_MESSAGE_BYTES",
                "must be between 64 and 268435455 bytes",
            ));
        }
        match mqtt_broker(&self.mqtt_url) {
            Err(reason) => errors.push(FieldError::new("RADAR_MQTT_URL", reason)),
            Ok(broker) if !broker.tls => {
                for (name, set) in [
                    ("RADAR_MQTT_CA_FILE", self.mqtt_ca_file.is_some()),
                    (
                        "RADAR_MQTT_CLIENT_CERT_FILE",
                        self.mqtt_client_cert_file.is_some(),
                    ),
                    (
                        "RADAR_MQTT_CLIENT_KEY_FILE",
                        self.mqtt_client_key_file.is_some(),
                    ),
                ] {
                    if set {
                        errors.push(FieldError::new(
                            name,
                            "is set but RADAR_MQTT_URL is a plain mqtt:// URL; use mqtts:// for TLS",
                        ));
                    }
                }
            }
            Ok(_) => {}
        }
        if self.mqtt_client_cert_file.is_some() != self.mqtt_client_key_file.is_some() {
            errors.push(FieldError::new(
                "RADAR_MQTT_CLIENT_CERT_FILE",
                "mutual TLS needs both RADAR_MQTT_CLIENT_CERT_FILE and RADAR_MQTT_CLIENT_KEY_FILE",
            ));
        }
        // MQTT carries the keep-alive in 16 bits.
        if !(1..=65_535).contains(&self.mqtt_keepalive_seconds) {
            errors.push(FieldError::new(
                "RADAR_MQTT_KEEPALIVE_SECONDS",
                "must be between 1 and 65535",
            ));
        }
        if !self.database_url.starts_with("postgres://")
            && !self.database_url.starts_with("postgresql://")
        {
            errors.push(FieldError::new(
                "DATABASE_URL",
                "must be a postgres:// or postgresql:// URL",
            ));
        }
        if matches!(&self.worker_id, Some(id) if id.trim().is_empty() || id.len() > 64) {
            errors.push(FieldError::new(
                "RADAR_WORKER_ID",
                "must be 1 to 64 characters",
            ));
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(FieldErrors(errors))
        }
    }

    /// Host and port of the broker.
    pub fn mqtt_address(&self) -> Result<(String, u16), String> {
        mqtt_address(&self.mqtt_url)
    }
}

/// Where the broker listens and whether it speaks TLS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MqttBroker {
    pub tls: bool,
    pub host: String,
    pub port: u16,
}

/// Parses `mqtt://host[:port]` (plain, port 1883 by default) or
/// `mqtts://host[:port]` (TLS, port 8883). Messages never repeat user info
/// from the URL: it may hold a password.
pub fn mqtt_broker(url: &str) -> Result<MqttBroker, String> {
    let shown = redact_url(url);
    let (tls, rest) = if let Some(rest) = url.strip_prefix("mqtt://") {
        (false, rest)
    } else if let Some(rest) = url.strip_prefix("mqtts://") {
        (true, rest)
    } else {
        return Err(wrong_scheme(url, &shown));
    };
    let rest = rest.trim_end_matches('/');
    if rest.contains('@') {
        return Err(format!(
            "{shown:?} carries user info; radar takes the broker's user name from \
             RADAR_MQTT_USERNAME and its password from RADAR_MQTT_PASSWORD_FILE, so remove it \
             from the URL"
        ));
    }
    let default_port = if tls { 8883 } else { 1883 };
    let (host, port) = match rest.rsplit_once(':') {
        Some((host, port)) if !port.ends_with(']') => (
            host,
            port.parse::<u16>()
                .map_err(|_| format!("{port:?} in {shown:?} is not a port number"))?,
        ),
        _ => (rest, default_port),
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() || host.contains(['/', '?']) {
        return Err(format!("{shown:?} has no usable host"));
    }
    Ok(MqttBroker {
        tls,
        host: host.to_string(),
        port,
    })
}

/// The message for a URL that is neither `mqtt://` nor `mqtts://`.
fn wrong_scheme(url: &str, shown: &str) -> String {
    let scheme = url.split_once("://").map(|(s, _)| s.to_ascii_lowercase());
    match scheme.as_deref() {
        Some("tcp") => format!(
            "{shown:?}: radar does not read tcp:// URLs; write mqtt://host:port for a plain \
             listener or mqtts://host:port for TLS"
        ),
        Some("ssl" | "tls" | "mqtt+ssl") => {
            format!("{shown:?}: write mqtts://host:port for a TLS listener")
        }
        Some("ws" | "wss") => format!(
            "{shown:?}: MQTT over websockets is not supported; use the broker's mqtt:// or \
             mqtts:// listener"
        ),
        Some(other) => format!(
            "{shown:?}: {other}:// is not an MQTT scheme; write mqtt://host:port (plain) or \
             mqtts://host:port (TLS)"
        ),
        None => format!(
            "{shown:?} has no scheme; write mqtt://host:port (plain) or mqtts://host:port (TLS)"
        ),
    }
}

/// Host and port of `mqtt://` or `mqtts://` URL.
pub fn mqtt_address(url: &str) -> Result<(String, u16), String> {
    mqtt_broker(url).map(|b| (b.host, b.port))
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

#[cfg(test)]
mod tests {
    use figment::providers::Serialized;

    use super::*;

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
        let err = Settings::load(&vars(&[("RADAR_ENV", "production"), test_var]), no_flags())
            .unwrap_err();
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
        let loaded =
            Settings::load(&vars(&[("RADAR_CHECKPOINT_INTERVALL", "5")]), no_flags()).unwrap();
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
        let flag = Serialized::defaults(
            serde_json::json!({ "database_url": "postgres://postgres@h/flag" }),
        );
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
}
