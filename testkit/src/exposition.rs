//! Reading a Prometheus text exposition (a worker's `/metrics`): one parser
//! for sample lines, a lookup of one sample by name and labels, and the
//! `promtool check metrics` gate.

use std::{
    collections::BTreeMap,
    io::Write,
    process::{Command, Stdio},
};

/// One sample line: `name{key="value",...} value [timestamp]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// Every sample of an exposition, in order; comments, blank lines and lines
/// that are not samples are skipped.
pub fn samples(exposition: &str) -> Vec<Sample> {
    exposition.lines().filter_map(parse_line).collect()
}

/// The value of the first sample of `name` whose labels include every
/// `key="value"` pair of `labels`; `None` when no sample matches.
pub fn sample(exposition: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    exposition
        .lines()
        .filter_map(parse_line)
        .find(|s| {
            s.name == name
                && labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).is_some_and(|have| have == v))
        })
        .map(|s| s.value)
}

/// Parses one sample line; `None` for comments, blank and malformed lines.
pub fn parse_line(line: &str) -> Option<Sample> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let name_end = line.find(['{', ' ']).unwrap_or(line.len());
    let name = &line[..name_end];
    let (labels, rest) = match line[name_end..].strip_prefix('{') {
        Some(inner) => parse_labels(inner)?,
        None => (BTreeMap::new(), &line[name_end..]),
    };
    let value = rest.split_whitespace().next()?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        other => other.parse().ok()?,
    };
    (!name.is_empty()).then(|| Sample {
        name: name.to_string(),
        labels,
        value,
    })
}

/// `key="value",...}` and what follows the closing brace.
fn parse_labels(mut text: &str) -> Option<(BTreeMap<String, String>, &str)> {
    let mut labels = BTreeMap::new();
    loop {
        text = text.trim_start_matches([',', ' ']);
        if let Some(rest) = text.strip_prefix('}') {
            return Some((labels, rest));
        }
        let (key, after) = text.split_once("=\"")?;
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next()? {
                (_, '\\') => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    other => value.push(other),
                },
                (i, '"') => break i,
                (_, c) => value.push(c),
            }
        };
        labels.insert(key.trim().to_string(), value);
        text = &after[end + 1..];
    }
}

/// Runs `promtool check metrics` on an exposition; panics with its output
/// (or with how to install it) when it does not pass.
pub fn promtool_check(exposition: &str) {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "promtool is required to validate /metrics but could not run ({e}); \
                 install the Debian package `prometheus` (scripts/test does)"
            )
        });
    child
        .stdin
        .take()
        .expect("promtool's stdin is piped")
        .write_all(exposition.as_bytes())
        .expect("writing the exposition to promtool");
    let out = child.wait_with_output().expect("waiting for promtool");
    assert!(
        out.status.success(),
        "promtool check metrics rejected the exposition:\n{}{}\n--- exposition ---\n{exposition}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const EXPOSITION: &str = "\
# HELP radar_frames_total Frames.
# TYPE radar_frames_total counter
radar_frames_total{monitor=\"m1\",outcome=\"scored\"} 12
radar_frames_total{monitor=\"m10\",outcome=\"scored\"} 3
radar_up 1
radar_seconds_bucket{le=\"+Inf\"} 4 1700000000000
";

    #[test]
    fn a_sample_is_found_by_name_and_labels() {
        let m1 = [("monitor", "m1"), ("outcome", "scored")];
        assert_eq!(sample(EXPOSITION, "radar_frames_total", &m1), Some(12.0));
        assert_eq!(sample(EXPOSITION, "radar_up", &[]), Some(1.0));
    }

    #[test]
    fn a_label_value_must_match_whole() {
        // "m1" must not match the sample of monitor "m10" nor a key ending in "monitor".
        let exposition = "x{other_monitor=\"m1\"} 5\nx{monitor=\"m10\"} 6\n";
        assert_eq!(sample(exposition, "x", &[("monitor", "m1")]), None);
    }

    #[test]
    fn a_timestamp_after_the_value_is_not_the_value() {
        assert_eq!(
            sample(EXPOSITION, "radar_seconds_bucket", &[("le", "+Inf")]),
            Some(4.0)
        );
    }

    #[test]
    fn comments_and_missing_samples_give_none() {
        assert_eq!(sample(EXPOSITION, "radar_absent", &[]), None);
        assert_eq!(parse_line("# TYPE radar_up gauge"), None);
        assert_eq!(samples(EXPOSITION).len(), 4);
    }

    proptest! {
        #[test]
        fn a_written_sample_reads_back(
            name in "[a-z_][a-z0-9_]{0,20}",
            labels in proptest::collection::btree_map("[a-z_][a-z0-9_]{0,8}", "[ -~]{0,12}", 0..4),
            value in -1e12f64..1e12,
        ) {
            let body: Vec<String> = labels
                .iter()
                .map(|(k, v)| {
                    let escaped = v.replace('\\', "\\\\").replace('"', "\\\"");
                    format!("{k}=\"{escaped}\"")
                })
                .collect();
            let line = if body.is_empty() {
                format!("{name} {value}")
            } else {
                format!("{name}{{{}}} {value}", body.join(","))
            };
            let parsed = parse_line(&line).expect("a well-formed sample line");
            prop_assert_eq!(parsed, Sample { name, labels, value });
        }
    }
}
