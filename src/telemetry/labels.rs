//! The attributes metrics may carry: the monitor's id and name, and closed
//! enums whose labels are fixed here. Nothing taken from a payload ever
//! becomes an attribute, which keeps every metric's series count bounded.

use crate::{align::AlignRejection, mqtt::payload::PayloadRejection};

/// Attribute keys (Prometheus spells them with underscores).
pub mod key {
    pub const MONITOR_ID: &str = "monitor.id";
    pub const MONITOR_NAME: &str = "monitor.name";
    pub const REASON: &str = "reason";
    pub const CAUSE: &str = "cause";
    pub const PHASE: &str = "phase";
    pub const STATE: &str = "state";
    pub const OPERATION: &str = "operation";
    pub const TRIGGER: &str = "trigger";
    /// A required reading's name from the monitor config: bounded by it.
    pub const READING: &str = "reading";
}

/// Declares a closed label enum with its stable label strings and `ALL`.
macro_rules! label_enum {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident => $label:literal,)+ }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            $($(#[$vmeta])* $variant,)+
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$(Self::$variant,)+];

            /// The stable attribute value.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $label,)+
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

label_enum! {
    /// Why a message or observation was discarded. Payload and alignment
    /// rejections convert with `From`, keeping their own labels.
    RejectReason {
        /// Larger than `RADAR_MQTT_MAX_MESSAGE_BYTES`; not parsed.
        TooLarge => "too_large",
        /// The topic belongs to no reading of the monitor.
        UnknownTopic => "unknown_topic",
        NotJson => "not_json",
        NotAnObject => "not_an_object",
        UnknownField => "unknown_field",
        DuplicateField => "duplicate_field",
        MissingTs => "missing_ts",
        MissingValue => "missing_value",
        BadTs => "bad_ts",
        ValueNotANumber => "value_not_a_number",
        ValueNotFinite => "value_not_finite",
        /// A numeric source time that cannot be in the `[payload]` unit.
        TimestampUnit => "timestamp_unit",
        UnknownReading => "unknown_reading",
        /// At or below its reading's watermark (already seen or replayed).
        Stale => "stale",
        Future => "future",
        TooOld => "too_old",
        /// A held value outlived the freshness limit.
        Expired => "expired",
        Skew => "skew",
        /// A held value replaced by a newer one of its reading before its
        /// frame completed.
        Superseded => "superseded",
        /// A held value discarded with the partial frame: by a restore (the
        /// partial frame is never saved) or when a checkpoint stall ends.
        PartialCleared => "partial_cleared",
        /// The model is not advancing (checkpoint stall) or the monitor is
        /// terminal (ownership lost, quarantined), so new input is refused.
        ModelStopped => "model_stopped",
        /// The detector refused a complete frame (wrong width, non-finite
        /// value); each of the frame's values counts.
        FrameRejected => "frame_rejected",
    }
}

label_enum! {
    /// The serialized operations of the model thread.
    ModelOperation {
        Align => "align",
        Score => "score",
        Fit => "fit",
        Calibrate => "calibrate",
        HealthRefresh => "health_refresh",
        EncodeSnapshot => "encode_snapshot",
        Restore => "restore",
    }
}

label_enum! {
    /// Why a checkpoint attempt did not commit.
    CheckpointFailure {
        /// The database answered with an error or the connection failed.
        Database => "database",
        /// The write did not finish in time.
        Timeout => "timeout",
        /// Zero rows matched the expected signature: another writer won.
        OwnershipLost => "ownership_lost",
        /// The snapshot could not be encoded or signed.
        Encode => "encode",
    }
}

label_enum! {
    /// The detector's phases, in the order a monitor goes through them.
    DetectorPhase {
        Training => "training",
        Calibrating => "calibrating",
        Fitting => "fitting",
        Monitoring => "monitoring",
    }
}

impl From<crate::detector::Phase> for DetectorPhase {
    fn from(phase: crate::detector::Phase) -> Self {
        use crate::detector::Phase;
        match phase {
            Phase::Training => Self::Training,
            Phase::Calibrating => Self::Calibrating,
            Phase::Fitting => Self::Fitting,
            Phase::Monitoring => Self::Monitoring,
        }
    }
}

impl From<AlignRejection> for RejectReason {
    fn from(r: AlignRejection) -> Self {
        match r {
            AlignRejection::UnknownReading => Self::UnknownReading,
            AlignRejection::Stale => Self::Stale,
            AlignRejection::Future => Self::Future,
            AlignRejection::TooOld => Self::TooOld,
            AlignRejection::Expired => Self::Expired,
            AlignRejection::Skew => Self::Skew,
        }
    }
}

impl From<PayloadRejection> for RejectReason {
    fn from(r: PayloadRejection) -> Self {
        match r {
            PayloadRejection::TooLarge => Self::TooLarge,
            PayloadRejection::NotJson => Self::NotJson,
            PayloadRejection::NotAnObject => Self::NotAnObject,
            PayloadRejection::UnknownField => Self::UnknownField,
            PayloadRejection::DuplicateField => Self::DuplicateField,
            PayloadRejection::MissingTs => Self::MissingTs,
            PayloadRejection::MissingValue => Self::MissingValue,
            PayloadRejection::BadTs => Self::BadTs,
            PayloadRejection::ValueNotANumber => Self::ValueNotANumber,
            PayloadRejection::ValueNotFinite => Self::ValueNotFinite,
            PayloadRejection::UnknownTopic => Self::UnknownTopic,
            PayloadRejection::TimestampUnit => Self::TimestampUnit,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_labels_are_unique_snake_case(labels: &[&str]) {
        let mut seen = std::collections::BTreeSet::new();
        for l in labels {
            assert!(
                l.chars().all(|c| c.is_ascii_lowercase() || c == '_'),
                "{l} is not snake_case"
            );
            assert!(seen.insert(*l), "{l} appears twice");
        }
    }

    #[test]
    fn every_label_enum_spells_its_values_uniquely_in_snake_case() {
        assert_labels_are_unique_snake_case(
            &RejectReason::ALL
                .iter()
                .map(|r| r.as_str())
                .collect::<Vec<_>>(),
        );
        assert_labels_are_unique_snake_case(
            &ModelOperation::ALL
                .iter()
                .map(|r| r.as_str())
                .collect::<Vec<_>>(),
        );
        assert_labels_are_unique_snake_case(
            &CheckpointFailure::ALL
                .iter()
                .map(|r| r.as_str())
                .collect::<Vec<_>>(),
        );
        assert_labels_are_unique_snake_case(
            &DetectorPhase::ALL
                .iter()
                .map(|r| r.as_str())
                .collect::<Vec<_>>(),
        );
    }

    #[test]
    fn converted_rejections_keep_their_own_labels() {
        for r in AlignRejection::ALL {
            assert_eq!(RejectReason::from(r).as_str(), r.as_str());
        }
        for r in PayloadRejection::ALL {
            assert_eq!(RejectReason::from(r).as_str(), r.as_str());
        }
    }
}
