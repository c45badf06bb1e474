//! An MQTT broker inside the demo process (rumqttd), so that `radar demo`
//! needs nothing installed.
//!
//! rumqttd has no shutdown: its router and server threads live until the
//! process exits, which is what a demo wants. It binds only loopback.

use std::{
    collections::HashMap,
    net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream},
    thread::JoinHandle,
    time::{Duration, Instant},
};

use rumqttd::{Broker, Config, ConnectionSettings, RouterConfig, ServerSettings};

use super::DemoError;

/// How long the broker may take to accept its first connection.
const START_DEADLINE: Duration = Duration::from_secs(10);

/// A running embedded broker.
#[derive(Debug)]
pub struct EmbeddedBroker {
    port: u16,
    _thread: JoinHandle<()>,
}

impl EmbeddedBroker {
    /// The loopback port clients connect to.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The broker as `RADAR_MQTT_URL` spells it.
    pub fn url(&self) -> String {
        format!("mqtt://127.0.0.1:{}", self.port)
    }
}

fn broker_config(port: u16) -> Config {
    let listen = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port));
    let server = ServerSettings {
        name: "radar-demo".to_string(),
        listen,
        tls: None,
        next_connection_delay_ms: 1,
        connections: ConnectionSettings {
            connection_timeout_ms: 60_000,
            max_payload_size: 20_480,
            max_inflight_count: 100,
            auth: None,
            external_auth: None,
            dynamic_filters: true,
        },
    };
    Config {
        id: 0,
        router: RouterConfig {
            max_connections: 10_000,
            max_outgoing_packet_count: 200,
            // Each topic keeps a small in-memory log (here at most 1 MiB): a
            // subscriber that falls further behind loses the oldest
            // messages, as with Mosquitto's queue limit.
            max_segment_size: 256 * 1024,
            max_segment_count: 4,
            ..RouterConfig::default()
        },
        v4: Some(HashMap::from([("1".to_string(), server)])),
        ..Config::default()
    }
}

/// Starts a broker on a free loopback port and returns once it accepts
/// connections.
pub fn start_embedded_broker() -> Result<(u16, EmbeddedBroker), DemoError> {
    // Ask the kernel for a free port, then hand it to rumqttd (which cannot
    // report the port it bound). Another process could take it in between;
    // the readiness wait below then fails with a message saying so.
    let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .map_err(|e| DemoError::Broker(format!("cannot find a free loopback port: {e}")))?
        .port();
    start_embedded_broker_on(port).map(|broker| (port, broker))
}

/// Starts a broker on `port` (e.g. the port of a broker a test restarts)
/// and returns once it accepts connections.
pub fn start_embedded_broker_on(port: u16) -> Result<EmbeddedBroker, DemoError> {
    let mut broker = Broker::new(broker_config(port));
    let thread = std::thread::Builder::new()
        .name("demo-broker".to_string())
        .spawn(move || {
            if let Err(e) = broker.start() {
                tracing::error!(error = %e, "The embedded MQTT broker stopped.");
            }
        })
        .map_err(|e| DemoError::Broker(format!("cannot start the broker thread: {e}")))?;
    let deadline = Instant::now() + START_DEADLINE;
    let address = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port));
    while TcpStream::connect_timeout(&address, Duration::from_millis(200)).is_err() {
        if Instant::now() >= deadline || thread.is_finished() {
            return Err(DemoError::Broker(format!(
                "the broker did not listen on 127.0.0.1:{port} within {}s (another process may have taken the port; run the demo again)",
                START_DEADLINE.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    tracing::info!(port, "Embedded MQTT broker listening on loopback.");
    Ok(EmbeddedBroker {
        port,
        _thread: thread,
    })
}
