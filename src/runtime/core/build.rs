//! Building a monitor's model: fresh, or restored from a snapshot.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::{
    align::Aligner,
    config::MonitorConfig,
    coverage::CoverageHistory,
    detector::Detector,
    snapshot::{ManagedState, ProcessingCounters, RecoveryMetadata},
    telemetry::RejectReason,
};

use super::{CoreError, Engine, MonitorCore};

impl MonitorCore {
    /// A monitor with no snapshot: a new detector and a startup gap.
    pub fn fresh(
        service_id: Uuid,
        config: MonitorConfig,
        now: DateTime<Utc>,
    ) -> Result<Self, CoreError> {
        let detector = Detector::for_readings(config.detector.clone(), &required_names(&config))
            .map_err(|source| CoreError::Detector { service_id, source })?;
        Self::fresh_with(service_id, config, Engine::Detector(detector), now)
    }

    pub(super) fn fresh_with(
        service_id: Uuid,
        config: MonitorConfig,
        engine: Engine,
        now: DateTime<Utc>,
    ) -> Result<Self, CoreError> {
        let aligner = Aligner::new(config.alignment.clone(), &config.readings)
            .map_err(|source| CoreError::Align { service_id, source })?;
        Ok(Self {
            service_id,
            readings: required_names(&config),
            config,
            aligner,
            engine,
            coverage: CoverageHistory::fresh(now),
            counters: ProcessingCounters::default(),
            recovery: RecoveryMetadata::default(),
            open_alarm: None,
            suspended: false,
        })
    }

    /// A monitor restored from its verified snapshot. Watermarks come back,
    /// partial frames do not (they were never saved), and the time since the
    /// snapshot was saved is recorded as a possible gap: the live stream is
    /// not replayed.
    pub fn restore(
        service_id: Uuid,
        config: MonitorConfig,
        state: ManagedState,
        detector: Option<Detector>,
        saved_at: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<Self, CoreError> {
        let detector = match detector {
            Some(detector) => detector,
            // An initial snapshot taken before the detector existed.
            None => Detector::for_readings(config.detector.clone(), &required_names(&config))
                .map_err(|source| CoreError::Detector { service_id, source })?,
        };
        Self::restore_with(
            service_id,
            config,
            Engine::Detector(detector),
            state,
            saved_at,
            now,
        )
    }

    pub(super) fn restore_with(
        service_id: Uuid,
        config: MonitorConfig,
        engine: Engine,
        state: ManagedState,
        saved_at: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<Self, CoreError> {
        let aligner = Aligner::restore(
            config.alignment.clone(),
            &config.readings,
            state.watermarks,
            state.alignment,
        )
        .map_err(|source| CoreError::Align { service_id, source })?;
        let mut coverage = state.coverage;
        coverage.record_restore(saved_at, now);
        let mut counters = state.counters;
        if state.partial_observations > 0 {
            // Held at save time, received then: their fate is this restore.
            let cleared = counters
                .observations_rejected
                .entry(RejectReason::PartialCleared.as_str().to_string())
                .or_default();
            *cleared = cleared.saturating_add(state.partial_observations);
        }
        let recovery = RecoveryMetadata {
            restored_processed_count: Some(counters.frames),
            // Partial frames are never saved: what was held is dropped.
            cleared_partial_observations: state.partial_observations,
        };
        Ok(Self {
            service_id,
            readings: required_names(&config),
            config,
            aligner,
            open_alarm: state.open_alarm,
            engine,
            coverage,
            counters,
            recovery,
            suspended: false,
        })
    }
}

fn required_names(config: &MonitorConfig) -> Vec<String> {
    config.required_readings().map(|r| r.name.clone()).collect()
}
