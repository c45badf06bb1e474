//! The worker's settings, layered: built-in defaults < `config/default.toml`
//! < environment (`RADAR_*`, `DATABASE_URL`) < command-line flags.

mod load;
mod mqtt_url;
#[cfg(test)]
mod tests;
mod validate;

use std::{fmt, net::SocketAddr, path::PathBuf, str::FromStr};

use serde::{Deserialize, Serialize};

pub use self::load::{ConfigError, EnvVars, Loaded};
pub use self::mqtt_url::{MqttBroker, mqtt_address, mqtt_broker};
use super::{
    credentials::{DEFAULT_DATABASE_URL_FILE, DEFAULT_MQTT_PASSWORD_FILE, DatabaseUrl},
    secret::Secret,
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
