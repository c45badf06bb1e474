//! Just enough HTTP to read a worker's `/metrics` and `/readyz`, and the
//! Prometheus text the former returns.

use std::time::Duration;

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

/// An HTTP/1.0 GET on 127.0.0.1: status and body, `None` while nothing
/// answers within `timeout`.
pub async fn get(port: u16, path: &str, timeout: Duration) -> Option<(u16, String)> {
    tokio::time::timeout(timeout, get_unbounded(port, path))
        .await
        .ok()
        .flatten()
}

async fn get_unbounded(port: u16, path: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).await.ok()?;
    let request = format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await.ok()?;
    let status = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Some((status, body))
}

/// The sum of every sample of `name` (all label sets) in a Prometheus text
/// exposition.
pub fn metric_sum(exposition: &str, name: &str) -> f64 {
    exposition
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let rest = l.strip_prefix(name)?;
            let value = match rest.chars().next()? {
                '{' => rest.rsplit_once('}')?.1,
                ' ' => rest,
                _ => return None,
            };
            value.split_whitespace().next()?.parse::<f64>().ok()
        })
        .sum()
}

/// Samples of `name` summed by the value of one label (e.g. `reason`).
pub fn metric_by_label(
    exposition: &str,
    name: &str,
    label: &str,
) -> std::collections::BTreeMap<String, f64> {
    let mut out = std::collections::BTreeMap::new();
    let key = format!("{label}=\"");
    for line in exposition.lines() {
        let Some(rest) = line.strip_prefix(name).and_then(|r| r.strip_prefix('{')) else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once('}') else {
            continue;
        };
        let Some(v) = value
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<f64>().ok())
        else {
            continue;
        };
        if let Some(start) = labels.find(&key) {
            let tail = &labels[start + key.len()..];
            let label_value = tail.split('"').next().unwrap_or_default();
            *out.entry(label_value.to_string()).or_default() += v;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_of_one_metric_are_summed_over_labels_only() {
        let text = "# HELP radar_x_total x\n\
                    radar_x_total{monitor_id=\"a\",monitor_name=\"p{1}\"} 3\n\
                    radar_x_total{monitor_id=\"b\"} 4.5\n\
                    radar_x_total_other 100\n\
                    radar_x 7\n";
        assert_eq!(metric_sum(text, "radar_x_total"), 7.5);
        assert_eq!(metric_sum(text, "radar_x"), 7.0);
        assert_eq!(metric_sum(text, "radar_y"), 0.0);
    }

    #[test]
    fn samples_are_grouped_by_one_label() {
        let text = "radar_r_total{monitor_id=\"a\",reason=\"stale\"} 2\n\
                    radar_r_total{monitor_id=\"b\",reason=\"stale\"} 3\n\
                    radar_r_total{monitor_id=\"b\",reason=\"future\"} 1\n";
        let by = metric_by_label(text, "radar_r_total", "reason");
        assert_eq!(by.get("stale"), Some(&5.0));
        assert_eq!(by.get("future"), Some(&1.0));
    }
}
