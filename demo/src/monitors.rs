//! The monitor definitions of the simulated plant: one per pump, scoring
//! all four readings, with settings suited to its signals.

use radar::{
    align::AlignmentPolicy,
    config::{MonitorConfig, ReadingConfig},
    detector::{AlarmRule, DetectorSettings, LevelTracking},
};

use super::{
    DemoError,
    plant::{Machine, Plant, READINGS},
};

/// Frames the demo monitors train on (simulated seconds at one tick each).
pub const TRAINING_FRAMES: usize = 300;
/// Frames the demo monitors calibrate their threshold on.
pub const CALIBRATION_FRAMES: usize = 100;

/// The detector settings of every demo monitor.
///
/// - Level tracking (weight 0.01, clip 0.5) follows the daily cycle, whose
///   slope is far below the clip, while a step or a leak outruns it and
///   stays visible; without it a model fitted on five minutes would flag
///   the afternoon.
/// - A false-alarm rate of 0.01 is the smallest the 100 calibration frames
///   can calibrate; 7 flagged frames of the last 12 open an alarm, so
///   isolated flags of a clean pump never do. A stuck sensor is the weakest
///   signal (it shows only while the load is away from the frozen value, a
///   third of the frames or fewer when it froze near the mean): over 300
///   plant seeds of the 1000-tick test run, 7 of 12 missed 4 stuck-sensor
///   windows where 7 of 10 missed 14, and the clean pumps alarmed no more
///   (one seed of the 300 in 1000 ticks with either rule; none in four
///   simulated half-days of 8 pumps).
pub fn detector_settings() -> DetectorSettings {
    DetectorSettings {
        training_frames: TRAINING_FRAMES,
        calibration_frames: CALIBRATION_FRAMES,
        false_alarm_rate: 0.01,
        alarm: AlarmRule {
            open_k: 7,
            open_n: 12,
            close_m: 10,
        },
        explained_variance: 0.9,
        feature_smoothing: 1.0,
        score_smoothing: 1.0,
        level_tracking: Some(LevelTracking {
            weight: 0.01,
            clip: 0.5,
        }),
        ..DetectorSettings::default()
    }
}

/// The monitor of one machine: its four readings on the machine's topics.
pub fn monitor_config(machine: &Machine) -> MonitorConfig {
    let fault = machine
        .fault
        .map_or("no injected fault", |kind| kind.as_str());
    MonitorConfig {
        name: format!("demo-{}", machine.name),
        description: Some(format!("radar demo: simulated {} ({fault})", machine.name)),
        readings: READINGS
            .iter()
            .zip(machine.topics())
            .map(|(spec, topic)| ReadingConfig {
                name: spec.name.to_string(),
                topic: topic.clone(),
                required: true,
            })
            .collect(),
        // All readings of a tick carry one timestamp, so a frame takes only
        // values of one tick (no skew). The embedded broker delivers each
        // topic in order but not always in order across topics: with any
        // skew allowed, a burst of one topic would pair its newer value
        // with the other readings' older ones and keep every later frame
        // shifted by a tick. With none, that tick's frame is dropped
        // instead. The other limits are the defaults, which leave room for
        // a loaded demo machine.
        alignment: AlignmentPolicy {
            max_skew_ms: 0,
            ..AlignmentPolicy::default()
        },
        detector: detector_settings(),
        graph: None,
        payload: None,
    }
}

/// The monitors of every machine of the plant, validated.
pub fn monitor_configs(plant: &Plant) -> Result<Vec<MonitorConfig>, DemoError> {
    plant
        .machines()
        .iter()
        .map(|machine| {
            let config = monitor_config(machine);
            config.validate().map_err(|errors| {
                DemoError::Config(format!(
                    "demo monitor {:?} is invalid: {errors}",
                    config.name
                ))
            })?;
            Ok(config)
        })
        .collect()
}

/// A monitor as the TOML file `radar monitor create --config` reads.
pub fn monitor_toml(config: &MonitorConfig) -> Result<String, DemoError> {
    toml::to_string(config).map_err(|e| {
        DemoError::Config(format!(
            "cannot write monitor {:?} as TOML: {e}",
            config.name
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PlantConfig;

    #[test]
    fn every_demo_monitor_is_valid_and_its_toml_reads_back_identically() {
        let plant = Plant::new(PlantConfig {
            machines: 6,
            topic_prefix: "radar-demo/run-7".into(),
            ..PlantConfig::default()
        })
        .unwrap();
        let configs = monitor_configs(&plant).unwrap();
        assert_eq!(configs.len(), 6);
        for config in &configs {
            let text = monitor_toml(config).unwrap();
            assert_eq!(&MonitorConfig::from_toml(&text).unwrap(), config, "{text}");
        }
        assert_eq!(
            configs[1].readings[2].topic,
            "radar-demo/run-7/pump-2/current"
        );
    }

    #[test]
    fn the_warmup_of_the_default_plant_covers_training_and_calibration() {
        let warmup = PlantConfig::default().warmup_ticks as usize;
        assert!(TRAINING_FRAMES + CALIBRATION_FRAMES <= warmup);
    }
}
