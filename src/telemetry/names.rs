//! Every metric radar records, named once. Names follow the OpenTelemetry
//! conventions (dotted, `radar.` prefix, unit in the unit field, no `_total`);
//! a Prometheus exporter derives its own spelling from them (see
//! [`Metric::prometheus_name`]).

/// The closed list of radar's metrics. Adding one here is the only way to
/// add a metric: [`super::Instruments`] builds exactly these.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Metric {
    ObservationsReceived,
    ObservationsAccepted,
    ObservationsRejected,
    ObservationsRejectedByReason,
    FramesEmitted,
    FramesFlagged,
    FrameScore,
    AlarmsOpened,
    AlarmsClosed,
    IngressQueueDepth,
    IngressQueueCapacity,
    PartialFrameValues,
    ModelOperationDuration,
    CheckpointCommits,
    CheckpointCommitsByTrigger,
    CheckpointFailures,
    CheckpointFailuresByReason,
    CheckpointDuration,
    CheckpointSize,
    SnapshotAge,
    ReadingAge,
    MonitorInfo,
    MonitorState,
    MqttConnected,
    MqttReconnectAttempts,
    CoverageGapDuration,
    CoverageGapDurationByCause,
    RecoveryRestoredProcessed,
    RecoveryPossibleGap,
    RecoveryPartialFramesCleared,
    RecoveryStaleRejected,
    DetectorPhase,
}

/// How an instrument aggregates, which decides its Prometheus type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Monotonic sum (Prometheus `counter`, name gets `_total`).
    Counter,
    /// Distribution (Prometheus `histogram`).
    Histogram,
    /// Current value read from the monitor board at collection time.
    Gauge,
}

impl Metric {
    pub const ALL: [Metric; 32] = [
        Self::ObservationsReceived,
        Self::ObservationsAccepted,
        Self::ObservationsRejected,
        Self::ObservationsRejectedByReason,
        Self::FramesEmitted,
        Self::FramesFlagged,
        Self::FrameScore,
        Self::AlarmsOpened,
        Self::AlarmsClosed,
        Self::IngressQueueDepth,
        Self::IngressQueueCapacity,
        Self::PartialFrameValues,
        Self::ModelOperationDuration,
        Self::CheckpointCommits,
        Self::CheckpointCommitsByTrigger,
        Self::CheckpointFailures,
        Self::CheckpointFailuresByReason,
        Self::CheckpointDuration,
        Self::CheckpointSize,
        Self::SnapshotAge,
        Self::ReadingAge,
        Self::MonitorInfo,
        Self::MonitorState,
        Self::MqttConnected,
        Self::MqttReconnectAttempts,
        Self::CoverageGapDuration,
        Self::CoverageGapDurationByCause,
        Self::RecoveryRestoredProcessed,
        Self::RecoveryPossibleGap,
        Self::RecoveryPartialFramesCleared,
        Self::RecoveryStaleRejected,
        Self::DetectorPhase,
    ];

    /// The OpenTelemetry instrument name.
    pub const fn name(self) -> &'static str {
        match self {
            Self::ObservationsReceived => "radar.observations.received",
            Self::ObservationsAccepted => "radar.observations.accepted",
            Self::ObservationsRejected => "radar.observations.rejected",
            Self::ObservationsRejectedByReason => "radar.observations.rejected.by_reason",
            Self::FramesEmitted => "radar.frames.emitted",
            Self::FramesFlagged => "radar.frames.flagged",
            Self::FrameScore => "radar.frame.score",
            Self::AlarmsOpened => "radar.alarms.opened",
            Self::AlarmsClosed => "radar.alarms.closed",
            Self::IngressQueueDepth => "radar.ingress.queue.depth",
            Self::IngressQueueCapacity => "radar.ingress.queue.capacity",
            Self::ModelOperationDuration => "radar.model.operation.duration",
            Self::CheckpointCommits => "radar.checkpoint.commits",
            Self::CheckpointCommitsByTrigger => "radar.checkpoint.commits.by_trigger",
            Self::CheckpointFailures => "radar.checkpoint.failures",
            Self::CheckpointFailuresByReason => "radar.checkpoint.failures.by_reason",
            Self::CheckpointDuration => "radar.checkpoint.duration",
            Self::CheckpointSize => "radar.checkpoint.size",
            Self::PartialFrameValues => "radar.partial_frame.values",
            Self::SnapshotAge => "radar.snapshot.age",
            Self::ReadingAge => "radar.reading.age",
            Self::MonitorInfo => "radar.monitor.info",
            Self::MonitorState => "radar.monitor.state",
            Self::MqttConnected => "radar.mqtt.connected",
            Self::MqttReconnectAttempts => "radar.mqtt.reconnect.attempts",
            Self::CoverageGapDuration => "radar.coverage.gap.duration",
            Self::CoverageGapDurationByCause => "radar.coverage.gap.duration.by_cause",
            Self::RecoveryRestoredProcessed => "radar.recovery.restored.processed",
            Self::RecoveryPossibleGap => "radar.recovery.possible_gap.duration",
            Self::RecoveryPartialFramesCleared => "radar.recovery.partial_frames.cleared",
            Self::RecoveryStaleRejected => "radar.recovery.stale.rejected",
            Self::DetectorPhase => "radar.detector.phase",
        }
    }

    /// The UCUM unit (or `{annotation}` for counts of things).
    pub const fn unit(self) -> &'static str {
        match self {
            Self::ObservationsReceived
            | Self::ObservationsAccepted
            | Self::ObservationsRejected
            | Self::ObservationsRejectedByReason
            | Self::IngressQueueDepth
            | Self::IngressQueueCapacity
            | Self::PartialFrameValues
            | Self::RecoveryRestoredProcessed
            | Self::RecoveryStaleRejected => "{observation}",
            Self::FramesEmitted | Self::FramesFlagged | Self::RecoveryPartialFramesCleared => {
                "{frame}"
            }
            Self::FrameScore => "{score}",
            Self::AlarmsOpened | Self::AlarmsClosed => "{alarm}",
            Self::CheckpointCommits
            | Self::CheckpointCommitsByTrigger
            | Self::CheckpointFailures
            | Self::CheckpointFailuresByReason => "{checkpoint}",
            Self::MqttReconnectAttempts => "{attempt}",
            Self::MonitorInfo | Self::MonitorState | Self::MqttConnected | Self::DetectorPhase => {
                "{monitor}"
            }
            Self::ModelOperationDuration
            | Self::CheckpointDuration
            | Self::SnapshotAge
            | Self::ReadingAge
            | Self::CoverageGapDuration
            | Self::CoverageGapDurationByCause
            | Self::RecoveryPossibleGap => "s",
            Self::CheckpointSize => "By",
        }
    }

    pub const fn kind(self) -> Kind {
        match self {
            Self::ObservationsReceived
            | Self::ObservationsAccepted
            | Self::ObservationsRejected
            | Self::ObservationsRejectedByReason
            | Self::FramesEmitted
            | Self::FramesFlagged
            | Self::AlarmsOpened
            | Self::AlarmsClosed
            | Self::CheckpointCommits
            | Self::CheckpointCommitsByTrigger
            | Self::CheckpointFailures
            | Self::CheckpointFailuresByReason
            | Self::MqttReconnectAttempts
            | Self::CoverageGapDuration
            | Self::CoverageGapDurationByCause
            | Self::RecoveryStaleRejected => Kind::Counter,
            Self::FrameScore
            | Self::ModelOperationDuration
            | Self::CheckpointDuration
            | Self::CheckpointSize => Kind::Histogram,
            Self::IngressQueueDepth
            | Self::IngressQueueCapacity
            | Self::PartialFrameValues
            | Self::SnapshotAge
            | Self::ReadingAge
            | Self::MonitorInfo
            | Self::MonitorState
            | Self::MqttConnected
            | Self::RecoveryRestoredProcessed
            | Self::RecoveryPossibleGap
            | Self::RecoveryPartialFramesCleared
            | Self::DetectorPhase => Kind::Gauge,
        }
    }

    /// Whether the metric has series per monitor (labelled `monitor_id`,
    /// written by `telemetry::text` from the board); the others are one set
    /// of series per worker (recorded through the OpenTelemetry SDK, except
    /// the queue capacity, a worker setting the text writer adds).
    pub const fn per_monitor(self) -> bool {
        !matches!(
            self,
            Self::ObservationsRejectedByReason
                | Self::CheckpointCommitsByTrigger
                | Self::CheckpointFailuresByReason
                | Self::CoverageGapDurationByCause
                | Self::IngressQueueCapacity
                | Self::FrameScore
                | Self::ModelOperationDuration
                | Self::CheckpointDuration
                | Self::CheckpointSize
        )
    }

    pub const fn description(self) -> &'static str {
        match self {
            Self::ObservationsReceived => "MQTT messages received for the monitor's readings",
            Self::ObservationsAccepted => "Observations admitted by alignment",
            Self::ObservationsRejected => {
                "Messages or observations discarded, all reasons together (by reason: radar_observations_rejected_by_reason_total)"
            }
            Self::ObservationsRejectedByReason => {
                "Messages or observations discarded, by reason, over all monitors of the worker"
            }
            Self::FramesEmitted => "Aligned frames handed to the detector",
            Self::FramesFlagged => "Scored frames the detector flagged as anomalous",
            Self::FrameScore => {
                "Anomaly score of each monitored frame, over all monitors of the worker"
            }
            Self::AlarmsOpened => "Alarms opened by the alarm rule",
            Self::AlarmsClosed => "Alarms closed after the detector returned to normal",
            Self::IngressQueueDepth => "Observations waiting in the bounded ingress queue",
            Self::IngressQueueCapacity => "Capacity of each monitor's bounded ingress queue",
            Self::PartialFrameValues => {
                "Values waiting in the partial frame for the rest of their frame"
            }
            Self::ModelOperationDuration => {
                "Time the model threads spent per operation, over all monitors of the worker"
            }
            Self::CheckpointCommits => {
                "Snapshots committed, all triggers together (by trigger: radar_checkpoint_commits_by_trigger_total)"
            }
            Self::CheckpointCommitsByTrigger => {
                "Snapshots committed, by trigger, over all monitors of the worker"
            }
            Self::CheckpointFailures => {
                "Checkpoint attempts that did not commit, all reasons together (by reason: radar_checkpoint_failures_by_reason_total)"
            }
            Self::CheckpointFailuresByReason => {
                "Checkpoint attempts that did not commit, by reason, over all monitors of the worker"
            }
            Self::CheckpointDuration => {
                "Time from checkpoint start to commit, over all monitors of the worker"
            }
            Self::CheckpointSize => {
                "Size of each committed snapshot, over all monitors of the worker"
            }
            Self::SnapshotAge => "Time since the save time of the last committed snapshot",
            Self::ReadingAge => {
                "Time since the newest accepted observation of each required reading was received"
            }
            Self::MonitorInfo => {
                "1 for each monitor on the worker, labelled with its name (join other series on monitor_id)"
            }
            Self::MonitorState => {
                "1 for the monitor's current state (the only state series it has)"
            }
            Self::MqttConnected => "1 while every required subscription is acknowledged",
            Self::MqttReconnectAttempts => "Connection attempts retried on the backoff schedule",
            Self::CoverageGapDuration => {
                "Closed coverage gaps, in seconds, all causes together (by cause: radar_coverage_gap_duration_by_cause_seconds_total)"
            }
            Self::CoverageGapDurationByCause => {
                "Closed coverage gaps, in seconds, by cause, over all monitors of the worker"
            }
            Self::RecoveryRestoredProcessed => "Processed count of the snapshot restored at start",
            Self::RecoveryPossibleGap => {
                "Time between the restored snapshot's save time and the first new frame"
            }
            Self::RecoveryPartialFramesCleared => "Partial frames discarded by recovery",
            Self::RecoveryStaleRejected => {
                "Observations at or below a restored watermark since the start"
            }
            Self::DetectorPhase => {
                "1 for the detector's current phase (the only phase series it has)"
            }
        }
    }

    /// The name the OpenTelemetry Prometheus exporter gives this metric
    /// (without the `_bucket`/`_sum`/`_count` series of histograms): dots
    /// become underscores, a known unit adds its plural word, counters end in
    /// `_total`. Annotation units like `{observation}` add nothing.
    pub fn prometheus_name(self) -> String {
        let mut name = self.name().replace('.', "_");
        let unit = match self.unit() {
            "s" => Some("seconds"),
            "By" => Some("bytes"),
            _ => None,
        };
        if let Some(unit) = unit {
            name.push('_');
            name.push_str(unit);
        }
        if self.kind() == Kind::Counter {
            name.push_str("_total");
        }
        name
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn every_metric_is_listed_once_with_a_unique_radar_name() {
        let metrics: BTreeSet<_> = Metric::ALL.iter().collect();
        assert_eq!(metrics.len(), Metric::ALL.len());
        let names: BTreeSet<_> = Metric::ALL.iter().map(|m| m.name()).collect();
        assert_eq!(names.len(), Metric::ALL.len());
        for m in Metric::ALL {
            assert!(m.name().starts_with("radar."), "{}", m.name());
            assert!(!m.name().ends_with("_total"), "{}", m.name());
            assert!(!m.unit().is_empty(), "{} has no unit", m.name());
            assert!(!m.description().is_empty());
        }
    }

    #[test]
    fn names_never_repeat_their_unit_so_prometheus_suffixes_read_once() {
        for m in Metric::ALL {
            let p = m.prometheus_name();
            assert!(
                !p.contains("seconds_seconds") && !p.contains("bytes_bytes"),
                "{p}"
            );
            assert!(
                p.chars().all(|c| c.is_ascii_lowercase() || c == '_'),
                "{p} is not a plain Prometheus name"
            );
        }
    }

    #[test]
    fn prometheus_names_follow_the_exporter_rules() {
        assert_eq!(
            Metric::ObservationsReceived.prometheus_name(),
            "radar_observations_received_total"
        );
        assert_eq!(
            Metric::CheckpointDuration.prometheus_name(),
            "radar_checkpoint_duration_seconds"
        );
        assert_eq!(
            Metric::CheckpointSize.prometheus_name(),
            "radar_checkpoint_size_bytes"
        );
        assert_eq!(
            Metric::CoverageGapDuration.prometheus_name(),
            "radar_coverage_gap_duration_seconds_total"
        );
        assert_eq!(
            Metric::CoverageGapDurationByCause.prometheus_name(),
            "radar_coverage_gap_duration_by_cause_seconds_total"
        );
        assert_eq!(
            Metric::CheckpointCommitsByTrigger.prometheus_name(),
            "radar_checkpoint_commits_by_trigger_total"
        );
        assert_eq!(
            Metric::DetectorPhase.prometheus_name(),
            "radar_detector_phase"
        );
    }
}
