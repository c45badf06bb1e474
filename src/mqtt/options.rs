//! Connection options of one monitor's MQTT client: the broker address from
//! `RADAR_MQTT_URL`, a client id that no other worker or monitor shares, and
//! the limits that keep ingestion bounded.

use std::{fmt, sync::Arc, time::Duration};

use rumqttc::{MqttOptions, TlsConfiguration, Transport};
use rustls::ClientConfig;
use uuid::Uuid;

use super::{Backoff, MqttError};
use crate::{
    config::{MqttCredentials, Settings, mqtt_broker, redact_url},
    tls::{TlsFiles, client_config},
};

/// A topic of at most 1024 bytes (see the monitor config), packet id and
/// headers: what a PUBLISH carries besides its payload.
const PUBLISH_OVERHEAD: usize = 2 + 1024 + 2 + 5;
/// rumqttc declares the link dead when a PINGRESP has not come one
/// keep-alive after its PINGREQ, so a dead link is noticed within about two
/// of these: 20 s.
const DEFAULT_KEEPALIVE_SECONDS: u64 = 10;
/// The longest worker instance id kept in a client id.
const MAX_WORKER_ID_LEN: usize = 64;
/// Packets up to this size are read and, if their payload is too large,
/// counted; only larger ones make the client library drop the connection.
const MIN_PACKET_LIMIT: usize = 1024 * 1024;
/// MQTT's own limit on a packet (the largest remaining length).
const MQTT_PACKET_LIMIT: usize = 268_435_455;

/// Where the broker listens and whether the URL asked for TLS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerAddress {
    pub host: String,
    pub port: u16,
    /// `mqtts://`: the connection needs [`IngestOptions::tls`].
    pub tls: bool,
}

impl BrokerAddress {
    /// Parses `mqtt://host[:port]` or `mqtts://host[:port]` with the same
    /// rules the worker settings validate `RADAR_MQTT_URL` by.
    pub fn parse(url: &str) -> Result<Self, MqttError> {
        let broker = mqtt_broker(url).map_err(|reason| MqttError::BrokerUrl {
            url: redact_url(url),
            reason,
        })?;
        Ok(Self {
            host: broker.host,
            port: broker.port,
            tls: broker.tls,
        })
    }
}

/// A built rustls configuration; compared by identity, printed by name.
#[derive(Clone)]
pub struct MqttTls(pub Arc<ClientConfig>);

impl MqttTls {
    /// Verifies the broker against `RADAR_MQTT_CA_FILE` (else the system's
    /// roots) and presents the client pair when both files are set.
    pub fn from_settings(settings: &Settings) -> Result<Self, MqttError> {
        let client = settings
            .mqtt_client_cert_file
            .as_deref()
            .zip(settings.mqtt_client_key_file.as_deref());
        client_config(TlsFiles {
            ca: settings.mqtt_ca_file.as_deref(),
            ca_variable: "RADAR_MQTT_CA_FILE",
            client,
            client_variables: ("RADAR_MQTT_CLIENT_CERT_FILE", "RADAR_MQTT_CLIENT_KEY_FILE"),
        })
        .map(Self)
        .map_err(MqttError::Tls)
    }
}

impl PartialEq for MqttTls {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for MqttTls {}

impl fmt::Debug for MqttTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "MqttTls {{ client_certificate: {} }}",
            self.0.client_auth_cert_resolver.has_certs()
        )
    }
}

/// Everything one monitor's ingestion needs besides its topics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IngestOptions {
    /// Used in logs and error messages.
    pub monitor: String,
    pub broker: BrokerAddress,
    pub client_id: String,
    /// User name and password sent in CONNECT; the password never prints.
    pub credentials: Option<MqttCredentials>,
    /// The TLS configuration of an `mqtts://` broker.
    pub tls: Option<MqttTls>,
    pub keep_alive: Duration,
    /// Larger payloads are rejected and counted as `too_large`.
    pub max_payload_bytes: usize,
    /// The largest packet the client accepts at all. Between
    /// `max_payload_bytes` and this the message is counted and dropped; above
    /// it the client library drops the connection, so keep it generous.
    pub max_packet_bytes: usize,
    /// Capacity of the bounded queue between the network side and the model.
    pub queue_capacity: usize,
    pub backoff: Backoff,
    /// How long to wait for CONNACK and, separately, for all SUBACKs.
    pub handshake_timeout: Duration,
}

impl IngestOptions {
    /// Options with defaults for a monitor of a worker instance.
    pub fn new(
        broker_url: &str,
        worker_instance: &str,
        monitor_id: Uuid,
    ) -> Result<Self, MqttError> {
        let max_payload_bytes = 4096;
        Ok(Self {
            monitor: monitor_id.to_string(),
            broker: BrokerAddress::parse(broker_url)?,
            client_id: client_id(worker_instance, monitor_id),
            credentials: None,
            tls: None,
            keep_alive: Duration::from_secs(DEFAULT_KEEPALIVE_SECONDS),
            max_payload_bytes,
            max_packet_bytes: packet_limit(max_payload_bytes),
            queue_capacity: 1024,
            backoff: Backoff::PRODUCTION,
            handshake_timeout: Duration::from_secs(10),
        })
    }

    /// Options from the worker settings (`RADAR_MQTT_URL`,
    /// `RADAR_MQTT_MAX_MESSAGE_BYTES`, `RADAR_INGRESS_QUEUE_CAPACITY`).
    /// `worker_instance` must be the one id of this process (call
    /// `Settings::worker_id` once: without `RADAR_WORKER_ID` it is random).
    pub fn from_settings(
        settings: &Settings,
        worker_instance: &str,
        monitor_id: Uuid,
    ) -> Result<Self, MqttError> {
        let mut options = Self::new(&settings.mqtt_url, worker_instance, monitor_id)?;
        options.max_payload_bytes = settings.mqtt_max_message_bytes;
        options.max_packet_bytes = packet_limit(settings.mqtt_max_message_bytes);
        options.queue_capacity = settings.ingress_queue_capacity;
        options.credentials = settings.mqtt_credentials()?;
        options.keep_alive = Duration::from_secs(settings.mqtt_keepalive_seconds);
        if options.broker.tls {
            options.tls = Some(MqttTls::from_settings(settings)?);
        }
        options.validate()?;
        Ok(options)
    }

    /// Checks the limits against each other.
    pub fn validate(&self) -> Result<(), MqttError> {
        let fail = |field, reason: String| Err(MqttError::Option { field, reason });
        if self.queue_capacity == 0 {
            return fail("queue_capacity", "must be at least 1".into());
        }
        if self.max_payload_bytes == 0 {
            return fail("max_payload_bytes", "must be at least 1".into());
        }
        if self.max_packet_bytes < self.max_payload_bytes.saturating_add(PUBLISH_OVERHEAD) {
            return fail(
                "max_packet_bytes",
                format!(
                    "{} is too small for payloads of {} bytes plus topic and headers ({PUBLISH_OVERHEAD} bytes)",
                    self.max_packet_bytes, self.max_payload_bytes
                ),
            );
        }
        if self.keep_alive < Duration::from_secs(1) {
            return fail("keep_alive", "must be at least one second".into());
        }
        if self.handshake_timeout < Duration::from_secs(1) {
            return fail("handshake_timeout", "must be at least one second".into());
        }
        if self.broker.tls && self.tls.is_none() {
            return fail("tls", "an mqtts:// broker needs a TLS configuration".into());
        }
        Ok(())
    }

    /// The rumqttc options: clean session (the worker re-subscribes itself and
    /// does not want a backlog from a previous life), packet limits raised
    /// from rumqttc's 10 KiB default.
    pub fn to_mqtt_options(&self) -> MqttOptions {
        let mut options = MqttOptions::new(&self.client_id, &self.broker.host, self.broker.port);
        options
            .set_keep_alive(self.keep_alive)
            .set_clean_session(true)
            .set_max_packet_size(self.max_packet_bytes, self.max_packet_bytes);
        if let Some(login) = &self.credentials {
            let password = login
                .password
                .as_ref()
                .map(|p| String::from_utf8_lossy(p.expose()).into_owned())
                .unwrap_or_default();
            // An empty password makes rumqttc send the user name alone.
            options.set_credentials(login.username.clone(), password);
        }
        if let Some(tls) = &self.tls {
            options.set_transport(Transport::tls_with_config(TlsConfiguration::Rustls(
                Arc::clone(&tls.0),
            )));
        }
        options
    }
}

/// A packet limit well above the payload limit, so oversized messages are
/// counted rather than costing the connection.
fn packet_limit(max_payload_bytes: usize) -> usize {
    max_payload_bytes
        .saturating_mul(4)
        .saturating_add(PUBLISH_OVERHEAD)
        .clamp(MIN_PACKET_LIMIT, MQTT_PACKET_LIMIT)
}

/// `radar-<worker instance>-<monitor id>`: unique per worker instance and
/// monitor, so two overlapping workers (or two monitors of one worker) never
/// take each other's session on the broker. The full monitor id is kept:
/// a shortened one could collide and the broker would disconnect one client.
pub fn client_id(worker_instance: &str, monitor_id: Uuid) -> String {
    let worker: String = worker_instance
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
        .take(MAX_WORKER_ID_LEN)
        .collect();
    format!("radar-{worker}-{}", monitor_id.simple())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_mqtt_urls_parse_with_and_without_port() {
        let a = BrokerAddress::parse("mqtt://127.0.0.1:1884").unwrap();
        assert_eq!((a.host.as_str(), a.port), ("127.0.0.1", 1884));
        let b = BrokerAddress::parse("mqtt://broker.local/").unwrap();
        assert_eq!((b.host.as_str(), b.port), ("broker.local", 1883));
    }

    #[test]
    fn other_schemes_are_refused_naming_the_ones_radar_reads() {
        for url in [
            "ssl://h:8883",
            "http://h:1883",
            "tcp://h:1883",
            "127.0.0.1:1883",
        ] {
            let reason = BrokerAddress::parse(url).unwrap_err().to_string();
            assert!(reason.contains("mqtts://"), "{url}: {reason}");
        }
        assert!(BrokerAddress::parse("mqtt://user@h:1883").is_err());
        let tls = BrokerAddress::parse("mqtts://h").unwrap();
        assert_eq!((tls.port, tls.tls), (8883, true));
    }

    #[test]
    fn an_mqtts_url_without_a_tls_configuration_is_refused() {
        let o = IngestOptions::new("mqtts://h", "w", Uuid::from_u128(7)).unwrap();
        assert!(matches!(
            o.validate(),
            Err(MqttError::Option { field: "tls", .. })
        ));
    }

    #[test]
    fn client_ids_differ_between_workers_and_between_monitors() {
        let m1 = Uuid::from_u128(1);
        let m2 = Uuid::from_u128(2);
        assert_ne!(client_id("w1", m1), client_id("w2", m1));
        assert_ne!(client_id("w1", m1), client_id("w1", m2));
        assert_eq!(client_id("w 1/x", m1), format!("radar-w1x-{}", m1.simple()));
    }

    #[test]
    fn defaults_are_valid_and_raise_the_packet_limit() {
        let o = IngestOptions::new("mqtt://127.0.0.1:1883", "w", Uuid::from_u128(7)).unwrap();
        o.validate().unwrap();
        let m = o.to_mqtt_options();
        assert_eq!(m.max_packet_size(), 1024 * 1024);
        assert!(m.clean_session());
        assert_eq!(m.keep_alive(), Duration::from_secs(10));
    }

    #[test]
    fn the_packet_limit_grows_with_the_payload_limit_up_to_mqtts_own() {
        assert_eq!(packet_limit(4096), MIN_PACKET_LIMIT);
        assert_eq!(
            packet_limit(1024 * 1024),
            4 * 1024 * 1024 + PUBLISH_OVERHEAD
        );
        assert_eq!(packet_limit(MQTT_PACKET_LIMIT), MQTT_PACKET_LIMIT);
    }

    #[test]
    fn worker_settings_set_url_limits_and_queue_capacity() {
        let vars: crate::config::EnvVars = [
            ("RADAR_MQTT_URL", "mqtt://10.1.2.3:1999"),
            ("RADAR_MQTT_MAX_MESSAGE_BYTES", "2048"),
            ("RADAR_INGRESS_QUEUE_CAPACITY", "77"),
            // Never read the repository's settings file from a unit test.
            ("RADAR_CONFIG_FILE", "/dev/null"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let no_flags = figment::providers::Serialized::defaults(serde_json::json!({}));
        let loaded = Settings::load(&vars, no_flags).unwrap();
        let o = IngestOptions::from_settings(&loaded.settings, "w-1", Uuid::from_u128(9)).unwrap();
        assert_eq!((o.broker.host.as_str(), o.broker.port), ("10.1.2.3", 1999));
        assert_eq!((o.max_payload_bytes, o.queue_capacity), (2048, 77));
        assert_eq!(o.client_id, client_id("w-1", Uuid::from_u128(9)));
        assert_eq!(o.credentials, None);
    }

    #[test]
    fn credentials_from_settings_reach_connect_and_never_print() {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), "s3cret-broker-pw\n").unwrap();
        let path = file.path().display().to_string();
        let vars: crate::config::EnvVars = [
            ("RADAR_ENV", "production"),
            ("RADAR_MQTT_USERNAME", "radar"),
            ("RADAR_MQTT_PASSWORD_FILE", path.as_str()),
            ("RADAR_CONFIG_FILE", "/dev/null"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let no_flags = figment::providers::Serialized::defaults(serde_json::json!({}));
        let loaded = Settings::load(&vars, no_flags).unwrap();
        let o = IngestOptions::from_settings(&loaded.settings, "w", Uuid::from_u128(9)).unwrap();
        assert!(!format!("{o:?}").contains("s3cret"), "{o:?}");
        assert!(!format!("{:?}", loaded.settings).contains("s3cret"));
        let login = o.to_mqtt_options().credentials().unwrap();
        assert_eq!(
            (login.username.as_str(), login.password.as_str()),
            ("radar", "s3cret-broker-pw")
        );
    }

    #[test]
    fn a_url_with_user_info_is_refused_naming_the_variables_without_the_password() {
        let err = broker_url_error("mqtt://radar:hunter2-pw@broker:1883");
        assert!(err.contains("RADAR_MQTT_USERNAME"), "{err}");
        assert!(err.contains("RADAR_MQTT_PASSWORD_FILE"), "{err}");
        assert!(!err.contains("hunter2"), "{err}");
        assert!(!err.contains("radar:"), "{err}");
        for url in [
            "mqtts://u:hunter2@h",
            "http://u:hunter2@h",
            "u:hunter2@h:1883",
        ] {
            let err = broker_url_error(url);
            assert!(!err.contains("hunter2"), "{url}: {err}");
        }
    }

    fn broker_url_error(url: &str) -> String {
        let err = BrokerAddress::parse(url).unwrap_err();
        format!("{err} {err:?}")
    }

    #[test]
    fn a_packet_limit_below_the_payload_limit_is_refused() {
        let mut o = IngestOptions::new("mqtt://h", "w", Uuid::from_u128(7)).unwrap();
        o.max_packet_bytes = o.max_payload_bytes;
        assert!(matches!(
            o.validate(),
            Err(MqttError::Option {
                field: "max_packet_bytes",
                ..
            })
        ));
        o.max_packet_bytes = 1024 * 1024;
        o.queue_capacity = 0;
        assert!(o.validate().is_err());
    }
}
