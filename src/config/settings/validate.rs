//! Checking the layered settings before anything uses them.

use super::{Settings, mqtt_address, mqtt_broker};
use crate::config::{FieldError, FieldErrors};

impl Settings {
    pub(super) fn validate(&self) -> Result<(), FieldErrors> {
        let mut errors = Vec::new();
        self.check_capacities(&mut errors);
        self.check_mqtt(&mut errors);
        self.check_database_and_worker(&mut errors);
        if errors.is_empty() {
            Ok(())
        } else {
            Err(FieldErrors(errors))
        }
    }

    /// Checkpoint intervals, timeout and the ingress queue: at least 1.
    fn check_capacities(&self, errors: &mut Vec<FieldError>) {
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
    }

    /// Message size, broker URL, TLS files and keep-alive.
    fn check_mqtt(&self, errors: &mut Vec<FieldError>) {
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
    }

    /// The database URL's scheme and the worker id's length.
    fn check_database_and_worker(&self, errors: &mut Vec<FieldError>) {
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
    }

    /// Host and port of the broker.
    pub fn mqtt_address(&self) -> Result<(String, u16), String> {
        mqtt_address(&self.mqtt_url)
    }
}
