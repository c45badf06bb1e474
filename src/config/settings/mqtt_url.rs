//! Parsing the broker's `mqtt://` or `mqtts://` URL.

use crate::config::redact_url;

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
