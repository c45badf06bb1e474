//! The optional OTLP push, against a one-shot OTLP/HTTP receiver on loopback.

use std::{
    io::{BufRead, BufReader, Read, Write},
    net::{TcpListener, TcpStream},
    sync::mpsc,
    thread,
    time::Duration,
};

use opentelemetry::metrics::MeterProvider;
use radar::telemetry::{METER_NAME, RejectReason, Telemetry, events::ObservationsRejected};
use uuid::Uuid;

use super::exposition::{OtlpPush, build_meter_provider};

/// One received request: its request line, headers (lower-cased names) and
/// body.
struct Request {
    line: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

/// Answers every request with `200` and an empty (valid) OTLP response and
/// hands the requests over, one connection at a time.
fn receiver() -> (String, mpsc::Receiver<Request>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1/metrics", listener.local_addr().unwrap());
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        for stream in listener.incoming() {
            let stream = stream.unwrap();
            let request = read_request(&stream);
            let mut stream = stream;
            stream
                .write_all(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                )
                .unwrap();
            if tx.send(request).is_err() {
                return;
            }
        }
    });
    (url, rx)
}

fn read_request(stream: &TcpStream) -> Request {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        reader.read_line(&mut h).unwrap();
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let (k, v) = h.split_once(':').unwrap();
        headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
    }
    let length: usize = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .map(|(_, v)| v.parse().unwrap())
        .unwrap_or(0);
    let mut body = vec![0; length];
    reader.read_exact(&mut body).unwrap();
    Request {
        line: line.trim_end().to_string(),
        headers,
        body,
    }
}

#[test]
fn flush_and_shutdown_push_the_radar_metrics_over_otlp_http() {
    let (url, requests) = receiver();
    let (provider, _registry) = build_meter_provider("otlp-test", OtlpPush::To(url)).unwrap();
    let telemetry = Telemetry::new(&provider.meter(METER_NAME));
    let m = telemetry.monitor(Uuid::from_u128(9), "pump");
    // The per-worker series go through the SDK and so over OTLP; the
    // per-monitor ones are written from the board for /metrics only.
    m.emit(ObservationsRejected {
        reason: RejectReason::NotJson,
        count: 7,
    });

    provider.force_flush().unwrap();
    let request = requests
        .recv_timeout(Duration::from_secs(20))
        .expect("the OTLP receiver got no request");
    assert_eq!(request.line, "POST /v1/metrics HTTP/1.1");
    assert!(
        request
            .headers
            .contains(&("content-type".into(), "application/x-protobuf".into())),
        "{:?}",
        request.headers
    );
    // Protobuf carries strings as raw UTF-8, so the names are visible.
    let body = String::from_utf8_lossy(&request.body);
    assert!(
        body.contains("radar.observations.rejected.by_reason"),
        "{body:?}"
    );
    assert!(body.contains("not_json"));

    // Shutting down pushes the last batch.
    provider.shutdown().unwrap();
    let last = requests
        .recv_timeout(Duration::from_secs(20))
        .expect("shutdown pushed nothing");
    assert!(String::from_utf8_lossy(&last.body).contains("radar.observations.rejected.by_reason"));
}
