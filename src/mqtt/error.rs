//! Errors of the MQTT ingestion layer.

use thiserror::Error;

/// What can go wrong while configuring or running a monitor's MQTT ingestion.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum MqttError {
    /// The broker URL cannot be used; the message says what would be accepted.
    #[error("broker URL {url:?} is not usable: {reason}")]
    BrokerUrl { url: String, reason: String },
    /// The MQTT user name or password cannot be used.
    #[error(transparent)]
    Credentials(#[from] crate::config::CredentialError),
    /// The TLS configuration for an `mqtts://` broker cannot be built.
    #[error("MQTT TLS: {0}")]
    Tls(crate::tls::TlsError),
    /// An ingestion option is out of range.
    #[error("MQTT option {field} is invalid: {reason}")]
    Option { field: &'static str, reason: String },
    /// The broker answered a subscription with a failure return code.
    #[error(
        "monitor {monitor}: the broker refused the subscription to topic {topic:?} \
         (SUBACK return code 0x80); check the broker's ACL for this client"
    )]
    SubscriptionRefused { monitor: String, topic: String },
}
