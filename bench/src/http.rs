//! A worker's `/metrics` and `/readyz` over HTTP, and sums of the samples
//! the former returns, on the testkit's HTTP GET and exposition parser.

use std::{collections::BTreeMap, time::Duration};

use radar_testkit::{exposition::parse_line, http::http_get};

/// An HTTP/1.0 GET on 127.0.0.1: status and body, `None` while nothing
/// answers within `timeout`.
pub async fn get(port: u16, path: &str, timeout: Duration) -> Option<(u16, String)> {
    let path = path.to_string();
    let request = tokio::task::spawn_blocking(move || http_get(port, &path));
    tokio::time::timeout(timeout, request).await.ok()?.ok()?
}

/// The sum of every sample of `name` (all label sets) in a Prometheus text
/// exposition.
pub fn metric_sum(exposition: &str, name: &str) -> f64 {
    samples_of(exposition, name).map(|s| s.value).sum()
}

/// Samples of `name` summed by the value of one label (e.g. `reason`).
pub fn metric_by_label(exposition: &str, name: &str, label: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for sample in samples_of(exposition, name) {
        if let Some(value) = sample.labels.get(label) {
            *out.entry(value.clone()).or_default() += sample.value;
        }
    }
    out
}

/// The samples of exactly `name`; only lines that start with it are parsed,
/// so a sum over a 60,000-line scrape stays cheap.
fn samples_of<'a>(
    exposition: &'a str,
    name: &'a str,
) -> impl Iterator<Item = radar_testkit::exposition::Sample> + 'a {
    exposition
        .lines()
        .filter(move |l| l.starts_with(name))
        .filter_map(parse_line)
        .filter(move |s| s.name == name)
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
