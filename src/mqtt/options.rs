//! Connection options of one monitor's MQTT client: the broker address from
//! `RADAR_MQTT_URL`, a client id that no other worker or monitor shares, and
//! the limits that keep ingestion bounded.

use std::time::Duration;

use rumqttc::MqttOptions;
use uuid::Uuid;

use super::{Backoff, MqttError};

/// Default MQTT port when the URL names none.
const DEFAULT_PORT: u16 = 1883;
/// A topic of at most 1024 bytes (see the monitor config), packet id and
/// headers: what a PUBLISH carries besides its payload.
const PUBLISH_OVERHEAD: usize = 2 + 1024 + 2 + 5;
/// The longest worker instance id kept in a client id.
const MAX_WORKER_ID_LEN: usize = 64;

/// Where the broker listens. Only plain TCP for now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerAddress {
    pub host: String,
    pub port: u16,
}

impl BrokerAddress {
    /// Parses `mqtt://host[:port][/]` (`tcp://` is accepted as a synonym).
    /// TLS (`mqtts://`, `ssl://`) and websockets are refused with an error
    /// that says so, as are credentials and paths.
    pub fn parse(url: &str) -> Result<Self, MqttError> {
        let fail = |reason: &str| MqttError::BrokerUrl {
            url: url.to_string(),
            reason: reason.to_string(),
        };
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| fail("expected mqtt://host:port"))?;
        match scheme.to_ascii_lowercase().as_str() {
            "mqtt" | "tcp" => {}
            "mqtts" | "ssl" | "tls" | "wss" => {
                return Err(fail(
                    "TLS connections to the broker are not supported yet; use mqtt://host:port \
                     on a trusted network",
                ));
            }
            _ => return Err(fail("unsupported scheme; expected mqtt://host:port")),
        }
        let authority = rest.strip_suffix('/').unwrap_or(rest);
        if authority.contains('@') {
            return Err(fail("credentials in the URL are not supported"));
        }
        if authority.contains(['/', '?', '#']) {
            return Err(fail(
                "a broker URL has no path or query; expected mqtt://host:port",
            ));
        }
        let (host, port) =
            split_host_port(authority).ok_or_else(|| fail("expected mqtt://host:port"))?;
        if host.is_empty() {
            return Err(fail("the host is missing"));
        }
        let port = match port {
            None => DEFAULT_PORT,
            Some(p) => match p.parse::<u16>() {
                Ok(0) | Err(_) => return Err(fail("the port must be a number from 1 to 65535")),
                Ok(p) => p,
            },
        };
        Ok(Self {
            host: host.to_string(),
            port,
        })
    }
}

/// `host`, `host:port`, `[v6]` or `[v6]:port`.
fn split_host_port(authority: &str) -> Option<(&str, Option<&str>)> {
    if let Some(v6) = authority.strip_prefix('[') {
        let (host, after) = v6.split_once(']')?;
        return match after {
            "" => Some((host, None)),
            _ => Some((host, Some(after.strip_prefix(':')?))),
        };
    }
    match authority.split_once(':') {
        Some((host, port)) => Some((host, Some(port))),
        None => Some((authority, None)),
    }
}

/// Everything one monitor's ingestion needs besides its topics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IngestOptions {
    /// Used in logs and error messages.
    pub monitor: String,
    pub broker: BrokerAddress,
    pub client_id: String,
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
        let max_payload_bytes = 64 * 1024;
        Ok(Self {
            monitor: monitor_id.to_string(),
            broker: BrokerAddress::parse(broker_url)?,
            client_id: client_id(worker_instance, monitor_id),
            keep_alive: Duration::from_secs(30),
            max_payload_bytes,
            max_packet_bytes: 1024 * 1024,
            queue_capacity: 1024,
            backoff: Backoff::PRODUCTION,
            handshake_timeout: Duration::from_secs(10),
        })
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
        options
    }
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

    fn reason(url: &str) -> String {
        BrokerAddress::parse(url).unwrap_err().to_string()
    }

    #[test]
    fn plain_mqtt_urls_parse_with_and_without_port() {
        let a = BrokerAddress::parse("mqtt://127.0.0.1:1884").unwrap();
        assert_eq!((a.host.as_str(), a.port), ("127.0.0.1", 1884));
        let b = BrokerAddress::parse("mqtt://broker.local/").unwrap();
        assert_eq!((b.host.as_str(), b.port), ("broker.local", 1883));
        let c = BrokerAddress::parse("tcp://[::1]:1999").unwrap();
        assert_eq!((c.host.as_str(), c.port), ("::1", 1999));
    }

    #[test]
    fn tls_urls_are_refused_saying_tls_is_not_supported() {
        for url in ["mqtts://h:8883", "ssl://h:8883", "wss://h/mqtt"] {
            assert!(reason(url).contains("TLS"), "{url}: {}", reason(url));
        }
    }

    #[test]
    fn malformed_urls_are_refused_with_a_reason() {
        for url in [
            "127.0.0.1:1883",
            "http://h:1883",
            "mqtt://:1883",
            "mqtt://h:0",
            "mqtt://h:70000",
            "mqtt://h:port",
            "mqtt://user:pw@h:1883",
            "mqtt://h:1883/topic",
            "mqtt://[::1",
        ] {
            assert!(BrokerAddress::parse(url).is_err(), "{url} was accepted");
        }
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
