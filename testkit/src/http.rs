//! A loopback port for a test's own listener and a blocking HTTP/1.0 GET for
//! a worker's `/metrics`, `/readyz` and `/healthz`.

use std::{
    io::{Read, Write},
    net::TcpStream,
    time::Duration,
};

/// A loopback port nobody listens on right now, for a test's own listener.
pub fn free_port() -> u16 {
    crate::broker::free_port().unwrap_or_else(|e| panic!("no free loopback port: {e}"))
}

/// A blocking HTTP/1.0 GET on 127.0.0.1; `None` while nothing answers.
pub fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    let code = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((code, body.to_string()))
}
