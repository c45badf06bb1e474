//! Monitor files for tests: one builder, with the two monitors most tests
//! use ready-made. The defaults are a detector small enough to score after
//! 40 frames (20 training, 20 calibration) and an alignment that accepts
//! observations up to a minute old.

use std::fmt::Write as _;

/// A monitor file (`radar monitor create --config FILE`) under construction.
#[derive(Debug, Clone)]
pub struct MonitorFile {
    name: String,
    readings: Vec<(String, String)>,
    freshness_ms: u64,
    max_age_ms: u64,
    future_tolerance_ms: u64,
    max_skew_ms: u64,
    silence_ms: Option<u64>,
    /// Training and calibration frames.
    detector: (u32, u32),
    alarm: Option<(u32, u32, u32)>,
    tables: Vec<String>,
}

impl MonitorFile {
    /// A monitor named `name` with no readings yet, freshness 5 s, maximum
    /// age 60 s, future tolerance 2 s, no skew, a detector of 20 training
    /// and 20 calibration frames and no `[detector.alarm]`.
    pub fn new(name: &str) -> Self {
        Self {
            name: name.to_string(),
            readings: Vec::new(),
            freshness_ms: 5000,
            max_age_ms: 60_000,
            future_tolerance_ms: 2000,
            max_skew_ms: 0,
            silence_ms: None,
            detector: (20, 20),
            alarm: None,
            tables: Vec::new(),
        }
    }

    /// Adds a required reading on `topic`.
    pub fn reading(mut self, name: &str, topic: &str) -> Self {
        self.readings.push((name.to_string(), topic.to_string()));
        self
    }

    /// Adds one required reading per name, on topic `PREFIX/NAME`.
    pub fn readings_under(self, prefix: &str, names: &[&str]) -> Self {
        names.iter().fold(self, |file, name| {
            file.reading(name, &format!("{prefix}/{name}"))
        })
    }

    pub fn freshness_ms(self, freshness_ms: u64) -> Self {
        Self {
            freshness_ms,
            ..self
        }
    }

    pub fn max_age_ms(self, max_age_ms: u64) -> Self {
        Self { max_age_ms, ..self }
    }

    pub fn future_tolerance_ms(self, future_tolerance_ms: u64) -> Self {
        Self {
            future_tolerance_ms,
            ..self
        }
    }

    pub fn max_skew_ms(self, max_skew_ms: u64) -> Self {
        Self {
            max_skew_ms,
            ..self
        }
    }

    pub fn silence_ms(self, silence_ms: u64) -> Self {
        Self {
            silence_ms: Some(silence_ms),
            ..self
        }
    }

    /// `[detector]` with `training` training and `calibration` calibration frames.
    pub fn detector(self, training: u32, calibration: u32) -> Self {
        Self {
            detector: (training, calibration),
            ..self
        }
    }

    /// `[detector.alarm]` with `open_k` of `open_n` to open, `close_m` to close.
    pub fn alarm(self, open_k: u32, open_n: u32, close_m: u32) -> Self {
        Self {
            alarm: Some((open_k, open_n, close_m)),
            ..self
        }
    }

    /// Appends a table as written (e.g. `[payload]` and its keys).
    pub fn table(mut self, text: &str) -> Self {
        self.tables.push(text.to_string());
        self
    }

    /// The file's text.
    pub fn to_toml(&self) -> String {
        let mut out = format!("name = \"{}\"\n", self.name);
        for (name, topic) in &self.readings {
            let _ = write!(
                out,
                "\n[[readings]]\nname = \"{name}\"\ntopic = \"{topic}\"\n"
            );
        }
        let _ = write!(
            out,
            "\n[alignment]\nfreshness_ms = {}\nmax_age_ms = {}\nfuture_tolerance_ms = {}\nmax_skew_ms = {}\n",
            self.freshness_ms, self.max_age_ms, self.future_tolerance_ms, self.max_skew_ms
        );
        if let Some(silence) = self.silence_ms {
            let _ = writeln!(out, "silence_ms = {silence}");
        }
        let (training, calibration) = self.detector;
        let _ = write!(
            out,
            "\n[detector]\ntraining_frames = {training}\ncalibration_frames = {calibration}\nfalse_alarm_rate = 0.05\n"
        );
        if let Some((open_k, open_n, close_m)) = self.alarm {
            let _ = write!(
                out,
                "\n[detector.alarm]\nopen_k = {open_k}\nopen_n = {open_n}\nclose_m = {close_m}\n"
            );
        }
        for table in &self.tables {
            let _ = write!(out, "\n{}\n", table.trim());
        }
        out
    }
}

/// Frames a monitor of this module needs before it scores (training plus calibration).
pub const WARMUP_FRAMES: u64 = 40;

/// The worker tests' monitor: required readings `a` and `b` under `prefix`,
/// maximum age 30 s, skew up to 1 s, and an alarm that opens on 3 of 5
/// anomalous frames and closes after 10 normal ones.
pub fn two_readings(name: &str, prefix: &str) -> String {
    two_readings_file(name, prefix).to_toml()
}

/// [`two_readings`] as a builder, to change before it is written.
pub fn two_readings_file(name: &str, prefix: &str) -> MonitorFile {
    MonitorFile::new(name)
        .readings_under(prefix, &["a", "b"])
        .max_age_ms(30_000)
        .max_skew_ms(1000)
        .alarm(3, 5, 10)
}

/// The telemetry tests' monitor: one required reading `a` on `topic`.
pub fn one_reading(name: &str, topic: &str) -> String {
    MonitorFile::new(name).reading("a", topic).to_toml()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_two_reading_monitor_is_a_valid_monitor_with_its_settings() {
        let config = radar::config::MonitorConfig::from_toml(&two_readings("m", "p"))
            .expect("a valid monitor file");
        assert_eq!(config.readings.len(), 2);
        assert_eq!(config.readings[1].topic, "p/b");
        let text = two_readings("m", "p");
        for line in [
            "max_skew_ms = 1000",
            "max_age_ms = 30000",
            "open_k = 3",
            "close_m = 10",
        ] {
            assert!(text.contains(line), "{line} missing from:\n{text}");
        }
    }

    #[test]
    fn extra_tables_and_silence_are_part_of_a_valid_file() {
        let text = MonitorFile::new("s")
            .reading("a", "t/a")
            .silence_ms(2000)
            .table("[payload]\nvalue = \"/v\"\nts = \"/t\"\nts_unit = \"s\"")
            .to_toml();
        radar::config::MonitorConfig::from_toml(&text).expect("a valid monitor file");
        assert!(text.contains("silence_ms = 2000"), "{text}");
        assert!(text.contains("ts_unit = \"s\""), "{text}");
    }
}
