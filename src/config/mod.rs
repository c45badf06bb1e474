//! Configuration: the worker's settings, the checkpoint key rules and a
//! monitor's definition.

mod credentials;
mod error;
mod monitor;
mod payload;
mod secret;
mod settings;

pub use credentials::{
    CredentialError, DEFAULT_DATABASE_URL_FILE, DEFAULT_MQTT_PASSWORD_FILE, DatabaseUrl,
    MqttCredentials, redact_url,
};
pub use error::{FieldError, FieldErrors};
pub use monitor::{MonitorConfig, ReadingConfig};
pub use payload::{PayloadMapping, TimeUnit};
pub use secret::{
    DEVELOPMENT_KEY, KeyError, KeySource, MIN_PRODUCTION_KEY_BYTES, Secret, check_production_key,
    resolve_key,
};
pub use settings::{
    ConfigError, DEFAULT_CONFIG_FILE, DEFAULT_SECRET_FILE, EnvVars, Environment, Loaded, LogFormat,
    MqttBroker, Settings, Shard, VARIABLES, mqtt_address, mqtt_broker,
};

/// Reads `.env` into the process environment in development, never
/// overriding variables already set. Production ignores `.env` files.
/// Returns the file read, if any.
pub fn load_dotenv() -> Option<std::path::PathBuf> {
    if std::env::var("RADAR_ENV").is_ok_and(|v| v.eq_ignore_ascii_case("production")) {
        return None;
    }
    dotenvy::dotenv().ok()
}
