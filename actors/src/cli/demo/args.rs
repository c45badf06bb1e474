//! The flags of `radar demo` and their checks.

use std::time::Duration;

use radar_demo::{DEFAULT_DEMO_DATABASE, MAX_SPEED, READINGS, check_database_name};

/// Published messages per second above which the demo refuses to start
/// (about what one loopback broker delivers at QoS 1 on a small machine).
const MAX_MESSAGE_RATE: f64 = 20_000.0;

/// Runs the demo plant through a real radar worker.
///
/// Starts an MQTT broker inside the process on a free loopback port, a
/// simulated plant of pumps (pump n gets fault (n-1) mod 4: stuck flow
/// sensor, step in the motor current, slow pressure leak, none) and a
/// worker with one monitor per pump. With PostgreSQL at DATABASE_URL the
/// demo creates and migrates its own database there (see
/// --demo-database), so a second run restores every monitor's snapshot and
/// reports the coverage gap; without it, database writes are disabled.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Stop after this long of plant time in wall-clock terms (e.g. 20,
    /// 90s, 5m), counted from the first published tick; default: until
    /// Ctrl-C.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub(super) duration: Option<Duration>,

    /// How many simulated pumps, one monitor each (1-64). Four or more
    /// include every fault and a fault-free pump.
    #[arg(long, value_name = "N", default_value_t = 4,
          value_parser = clap::value_parser!(u16).range(1..=64))]
    pub(super) monitors: u16,

    /// Simulated seconds per wall-clock second (above 0, at most 1000).
    /// Training and calibration take 400 simulated seconds; the first
    /// faults begin 50-160 simulated seconds later.
    #[arg(long, value_name = "X", default_value_t = 10.0, value_parser = parse_speed)]
    pub(super) speed: f64,

    /// Seed of the simulated plant (noise, load, drift).
    #[arg(long, value_name = "N", default_value_t = 2026)]
    pub(super) seed: u64,

    /// The database the demo creates (if missing) and migrates on the
    /// DATABASE_URL server; the database DATABASE_URL names is not touched.
    #[arg(long, value_name = "NAME", default_value = DEFAULT_DEMO_DATABASE,
          value_parser = parse_database_name)]
    pub(super) demo_database: String,

    /// Delete the demo's monitors (with their snapshots, alarms and
    /// evidence) first, so every monitor calibrates afresh.
    #[arg(long)]
    pub(super) fresh: bool,

    /// Print the final summary as JSON on stdout; progress goes to stderr.
    #[arg(long)]
    pub(super) json: bool,
}

fn parse_speed(text: &str) -> Result<f64, String> {
    let speed: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a number"))?;
    if speed.is_finite() && speed > 0.0 && speed <= MAX_SPEED {
        Ok(speed)
    } else {
        Err(format!("use a value above 0 and at most {MAX_SPEED}"))
    }
}

/// Seconds (`20`, `2.5`) or a number with `s`, `m` or `h`.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let (number, unit) = match text.char_indices().last() {
        Some((i, 's')) => (&text[..i], 1.0),
        Some((i, 'm')) => (&text[..i], 60.0),
        Some((i, 'h')) => (&text[..i], 3600.0),
        _ => (text, 1.0),
    };
    let value: f64 = number
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a duration; use seconds (20) or 90s, 5m, 1h"))?;
    let seconds = value * unit;
    if seconds.is_finite() && seconds > 0.0 && seconds <= 30.0 * 86_400.0 {
        Ok(Duration::from_secs_f64(seconds))
    } else {
        Err("use a duration above 0 and at most 30 days".to_string())
    }
}

fn parse_database_name(text: &str) -> Result<String, String> {
    check_database_name(text)
        .map(|()| text.to_string())
        .map_err(|e| e.to_string())
}

impl DemoArgs {
    pub(super) fn check(&self) -> anyhow::Result<()> {
        let rate = f64::from(self.monitors) * READINGS.len() as f64 * self.speed;
        if rate > MAX_MESSAGE_RATE {
            anyhow::bail!(
                "--monitors {} at --speed {} publishes {rate:.0} MQTT messages per second; \
                 keep monitors x {} readings x speed at most {MAX_MESSAGE_RATE:.0}",
                self.monitors,
                self.speed,
                READINGS.len()
            );
        }
        if let Some(duration) = self.duration
            && duration.as_secs_f64() * self.speed < 1.0
        {
            anyhow::bail!(
                "--duration {:?} at --speed {} is less than one simulated second",
                duration,
                self.speed
            );
        }
        Ok(())
    }

    /// Plant ticks to publish; `None` until stopped.
    pub(super) fn max_ticks(&self) -> Option<u64> {
        self.duration
            .map(|d| (d.as_secs_f64() * self.speed).round().max(1.0) as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_seconds_or_a_unit_and_refuse_nonsense() {
        assert_eq!(parse_duration("20"), Ok(Duration::from_secs(20)));
        assert_eq!(parse_duration("2.5"), Ok(Duration::from_millis(2500)));
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        for bad in ["", "0", "-3", "abc", "5d", "nan", "1e12"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn speeds_above_zero_up_to_the_publisher_limit_are_accepted() {
        assert_eq!(parse_speed("50"), Ok(50.0));
        assert_eq!(parse_speed("0.5"), Ok(0.5));
        assert_eq!(parse_speed("1000"), Ok(1000.0));
        for bad in ["0", "-1", "1000.5", "inf", "fast"] {
            assert!(parse_speed(bad).is_err(), "{bad}");
        }
    }
}
