//! Turns a failed MQTT connection attempt into a sentence an operator can
//! act on: refused credentials say whether radar sent any, a plain client on
//! a TLS port (and the reverse) says which side speaks TLS. Pure; never
//! mentions a password (rumqttc's errors never carry one either).

use std::io;

use rumqttc::{ConnectReturnCode, ConnectionError, StateError};

/// What the attempt was made with, as far as the diagnosis needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attempt<'a> {
    /// The user name sent in CONNECT, if any.
    pub username: Option<&'a str>,
    /// Whether a password went with it.
    pub password_sent: bool,
    /// Whether the URL asked for TLS (`mqtts://`).
    pub tls: bool,
    /// Whether the broker had answered CONNECT in this session.
    pub connack_seen: bool,
}

/// The reason to report for `error`.
pub fn describe(error: &ConnectionError, attempt: Attempt<'_>) -> String {
    match error {
        ConnectionError::ConnectionRefused(
            code @ (ConnectReturnCode::BadUserNamePassword | ConnectReturnCode::NotAuthorized),
        ) => refused_credentials(*code, attempt),
        ConnectionError::ConnectionRefused(code) => {
            format!("the broker refused the connection (CONNACK {code:?})")
        }
        ConnectionError::Io(e) | ConnectionError::MqttState(StateError::Io(e)) => {
            hint(&e.to_string(), Some(e.kind()), attempt)
        }
        other => hint(&other.to_string(), io_kind(other), attempt),
    }
}

/// `text` with what the operator can do about it, when that is known.
fn hint(text: &str, kind: Option<io::ErrorKind>, attempt: Attempt<'_>) -> String {
    let closed = matches!(
        kind,
        Some(
            io::ErrorKind::ConnectionReset
                | io::ErrorKind::ConnectionAborted
                | io::ErrorKind::UnexpectedEof
                | io::ErrorKind::BrokenPipe
        )
    );
    let handshake = !attempt.connack_seen;
    if attempt.tls && asks_for_client_certificate(text) {
        format!(
            "{text}: the broker requires a client certificate; set RADAR_MQTT_CLIENT_CERT_FILE \
             and RADAR_MQTT_CLIENT_KEY_FILE to a pair its CA accepts"
        )
    } else if attempt.tls && handshake && (closed || looks_like_plain_reply(text)) {
        format!(
            "{text}: the broker does not speak TLS on this port; use mqtt:// for a plain \
             listener or the broker's TLS port (usually 8883)"
        )
    } else if attempt.tls && text.contains("certificate") {
        format!(
            "{text}: the broker's certificate was not accepted; check RADAR_MQTT_CA_FILE and \
             that the certificate names the host in RADAR_MQTT_URL"
        )
    } else if !attempt.tls && handshake && closed {
        format!(
            "{text}: the broker closed the connection before answering CONNECT; if this port \
             speaks TLS (usually 8883), use mqtts://"
        )
    } else {
        text.to_string()
    }
}

fn refused_credentials(code: ConnectReturnCode, attempt: Attempt<'_>) -> String {
    match attempt.username {
        None => format!(
            "the broker requires credentials (CONNACK {code:?}) and radar sent none; set \
             RADAR_MQTT_USERNAME and RADAR_MQTT_PASSWORD_FILE"
        ),
        Some(user) => format!(
            "the broker refused the credentials radar sent (user name {user:?}, {}; CONNACK \
             {code:?}); check the password file and the broker's password or ACL entry",
            if attempt.password_sent {
                "with a password"
            } else {
                "without a password"
            }
        ),
    }
}

/// The kind of the I/O error somewhere in `error`'s chain of causes
/// (rumqttc wraps a reset during a read in two layers).
fn io_kind(error: &(dyn std::error::Error + 'static)) -> Option<io::ErrorKind> {
    let mut cause = Some(error);
    while let Some(e) = cause {
        if let Some(io) = e.downcast_ref::<io::Error>() {
            return Some(io.kind());
        }
        cause = e.source();
    }
    None
}

/// The alerts a TLS 1.3 / 1.2 server sends when a client certificate is missing.
fn asks_for_client_certificate(text: &str) -> bool {
    text.contains("CertificateRequired") || text.contains("HandshakeFailure")
}

/// What rustls reports when the other side answered in plain MQTT.
fn looks_like_plain_reply(text: &str) -> bool {
    text.contains("InvalidContentType") || text.contains("corrupt message")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attempt(username: Option<&str>, tls: bool) -> Attempt<'_> {
        Attempt {
            username,
            password_sent: username.is_some(),
            tls,
            connack_seen: false,
        }
    }

    #[test]
    fn refused_credentials_say_whether_radar_sent_any() {
        let refused = ConnectionError::ConnectionRefused(ConnectReturnCode::NotAuthorized);
        let none = describe(&refused, attempt(None, false));
        assert!(none.contains("radar sent none"), "{none}");
        assert!(none.contains("RADAR_MQTT_PASSWORD_FILE"), "{none}");
        let bad = ConnectionError::ConnectionRefused(ConnectReturnCode::BadUserNamePassword);
        let sent = describe(&bad, attempt(Some("radar"), false));
        assert!(sent.contains("refused the credentials"), "{sent}");
        assert!(sent.contains("\"radar\""), "{sent}");
    }

    #[test]
    fn a_reset_before_connack_on_a_plain_url_suggests_mqtts() {
        let reset = ConnectionError::Io(io::Error::from(io::ErrorKind::ConnectionReset));
        let text = describe(&reset, attempt(None, false));
        assert!(text.contains("mqtts://"), "{text}");
        let mut later = attempt(None, false);
        later.connack_seen = true;
        assert!(!describe(&reset, later).contains("mqtts://"));
    }
}
