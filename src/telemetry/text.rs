//! The per-monitor part of `/metrics`, written as Prometheus text (format
//! 0.0.4) straight from the board's views: no SDK data model in between,
//! and one line per series an operator reads per monitor.
//!
//! Always, per monitor: `radar_monitor_info` (the name), `radar_monitor_state`,
//! `radar_detector_phase` (once known), `radar_mqtt_connected`, the
//! [`Count`]s marked [`Count::from_admission`], the closed gap total and the
//! snapshot age (once a snapshot exists). The other series appear once they
//! have something to say (a non-zero count or gauge, a reading's first
//! accepted value, a restore); their HELP and TYPE are always there. Breakdowns by reason, trigger and cause and
//! every distribution are per worker, in the SDK's part of the exposition.

use std::fmt::Write;

use chrono::Utc;

use super::{
    counts::Count,
    names::{Kind, Metric},
    readiness::{Board, MonitorView},
};

/// Appends the series of every monitor on `board` as of now.
pub fn write_board(board: &Board, out: &mut String) {
    write_monitors(&board.views(Utc::now()), out);
}

/// Appends every monitor's series to `out`, one family after another
/// (Prometheus needs a family's lines together), HELP and TYPE once each.
pub fn write_monitors(views: &[MonitorView], out: &mut String) {
    let mut w = Writer { out };
    w.family(Metric::MonitorInfo, views, |v, s| {
        s.sample(v, Some(("monitor_name", &v.name)), 1u64);
    });
    w.family(Metric::MonitorState, views, |v, s| {
        s.sample(v, Some(("state", v.state.as_str())), 1u64);
    });
    w.family(Metric::DetectorPhase, views, |v, s| {
        if let Some(phase) = v.phase {
            s.sample(v, Some(("phase", phase.as_str())), 1u64);
        }
    });
    w.family(Metric::MqttConnected, views, |v, s| {
        s.sample(v, None, u64::from(v.connected));
    });
    for count in Count::ALL {
        w.family(count.metric(), views, |v, s| {
            let n = v.counts.get(count);
            if count.from_admission() || n > 0 {
                s.sample(v, None, n);
            }
        });
    }
    w.family(Metric::CoverageGapDuration, views, |v, s| {
        s.sample(v, None, Float(v.gap_seconds));
    });
    w.family(Metric::SnapshotAge, views, |v, s| {
        if let Some(age) = v.snapshot_age {
            s.sample(v, None, Float(age.as_secs_f64()));
        }
    });
    w.family(Metric::IngressQueueDepth, views, |v, s| {
        if v.queue_depth > 0 {
            s.sample(v, None, v.queue_depth);
        }
    });
    w.family(Metric::PartialFrameValues, views, |v, s| {
        if v.held_values > 0 {
            s.sample(v, None, v.held_values);
        }
    });
    w.family(Metric::ReadingAge, views, |v, s| {
        for (reading, age) in &v.reading_ages {
            if let Some(age) = age {
                s.sample(v, Some(("reading", reading)), Float(age.as_secs_f64()));
            }
        }
    });
    w.family(Metric::RecoveryRestoredProcessed, views, |v, s| {
        if let Some(r) = &v.recovery {
            s.sample(v, None, r.restored_processed);
        }
    });
    w.family(Metric::RecoveryPartialFramesCleared, views, |v, s| {
        if let Some(r) = &v.recovery {
            s.sample(v, None, r.partial_frames_cleared);
        }
    });
    w.family(Metric::RecoveryPossibleGap, views, |v, s| {
        if let Some(gap) = v.recovery.as_ref().and_then(|r| r.possible_gap) {
            s.sample(v, None, Float(gap.as_secs_f64()));
        }
    });
    // The queue's capacity is a worker setting: one line, not one per monitor.
    w.header(Metric::IngressQueueCapacity);
    if let Some(capacity) = views.iter().filter_map(|v| v.queue_capacity).max() {
        let _ = writeln!(
            w.out,
            "{} {capacity}",
            Metric::IngressQueueCapacity.prometheus_name()
        );
    }
}

struct Writer<'a> {
    out: &'a mut String,
}

/// The lines of one family, after its header.
struct Family<'a, 'b> {
    out: &'a mut String,
    name: &'b str,
}

impl Writer<'_> {
    fn family(
        &mut self,
        metric: Metric,
        views: &[MonitorView],
        mut each: impl FnMut(&MonitorView, &mut Family<'_, '_>),
    ) {
        // The header even without a sample: a family that no monitor has
        // yet (no alarm so far) is still declared, so a check that every
        // queried metric is exposed finds it.
        let name = metric.prometheus_name();
        write_header(self.out, metric, &name);
        let mut family = Family {
            out: self.out,
            name: &name,
        };
        for v in views {
            each(v, &mut family);
        }
    }

    fn header(&mut self, metric: Metric) {
        write_header(self.out, metric, &metric.prometheus_name());
    }
}

impl Family<'_, '_> {
    /// `name{monitor_id="..."[,key="value"]} value`.
    fn sample(
        &mut self,
        v: &MonitorView,
        extra: Option<(&str, &str)>,
        value: impl std::fmt::Display,
    ) {
        let out = &mut *self.out;
        out.push_str(self.name);
        out.push_str("{monitor_id=\"");
        escape_label_value(&v.id_label, out);
        if let Some((key, value)) = extra {
            out.push_str("\",");
            out.push_str(key);
            out.push_str("=\"");
            escape_label_value(value, out);
        }
        let _ = writeln!(out, "\"}} {value}");
    }
}

fn write_header(out: &mut String, metric: Metric, name: &str) {
    let kind = match metric.kind() {
        Kind::Counter => "counter",
        Kind::Gauge => "gauge",
        Kind::Histogram => "histogram",
    };
    out.push_str("# HELP ");
    out.push_str(name);
    out.push(' ');
    escape_help(metric.description(), out);
    out.push_str("\n# TYPE ");
    out.push_str(name);
    out.push(' ');
    out.push_str(kind);
    out.push('\n');
}

/// A label value as the exposition format wants it: backslash, double
/// quote and line feed escaped.
pub fn escape_label_value(value: &str, out: &mut String) {
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// HELP text escapes only backslash and line feed.
fn escape_help(text: &str, out: &mut String) {
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// An `f64` sample value as Prometheus spells it (`+Inf`, `-Inf`, `NaN`).
struct Float(f64);

impl std::fmt::Display for Float {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let v = self.0;
        if v.is_nan() {
            f.write_str("NaN")
        } else if v == f64::INFINITY {
            f.write_str("+Inf")
        } else if v == f64::NEG_INFINITY {
            f.write_str("-Inf")
        } else {
            write!(f, "{v}")
        }
    }
}

#[cfg(test)]
mod tests;
