//! Whether a connected monitor is seeing nothing: a required reading that
//! delivered no accepted observation for longer than `alignment.silence_ms`
//! makes the monitor `no_data`, and the time since the last frame becomes a
//! `no_data` coverage gap until frames form again. Pure: the caller passes
//! the clock.

use chrono::{DateTime, TimeDelta, Utc};

use crate::config::MonitorConfig;

/// A change the caller records in the coverage history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SilenceChange {
    /// Open a `no_data` gap at `from` (the last frame, or when watching began).
    Started { from: DateTime<Utc> },
    /// Close the `no_data` gap at `at`.
    Ended { at: DateTime<Utc> },
}

/// One monitor's silence watch.
#[derive(Debug, Clone)]
pub struct Silence {
    limit: TimeDelta,
    /// (reading index, name) of every required reading.
    required: Vec<(usize, String)>,
    /// Newest accepted observation's receipt time, by reading index.
    last_accepted: Vec<Option<DateTime<Utc>>>,
    /// Since when the link is up; silence counts only while connected.
    watching_since: Option<DateTime<Utc>>,
    last_frame: Option<DateTime<Utc>>,
    silent: bool,
}

impl Silence {
    pub fn new(config: &MonitorConfig) -> Self {
        Self {
            limit: config.alignment.silence(),
            required: config
                .readings
                .iter()
                .enumerate()
                .filter(|(_, r)| r.required)
                .map(|(i, r)| (i, r.name.clone()))
                .collect(),
            last_accepted: vec![None; config.readings.len()],
            watching_since: None,
            last_frame: None,
            silent: false,
        }
    }

    /// An observation of `reading` was accepted.
    pub fn accepted(&mut self, reading: usize, received_at: DateTime<Utc>) {
        if let Some(slot) = self.last_accepted.get_mut(reading) {
            *slot = Some(slot.map_or(received_at, |t| t.max(received_at)));
        }
    }

    /// A frame formed: a silent monitor sees data again.
    pub fn frame(&mut self, at: DateTime<Utc>) -> Option<SilenceChange> {
        self.last_frame = Some(at);
        std::mem::take(&mut self.silent).then_some(SilenceChange::Ended { at })
    }

    /// The link came up (every required subscription acknowledged).
    pub fn connected(&mut self, at: DateTime<Utc>) {
        self.watching_since.get_or_insert(at);
    }

    /// The link went down: the outage gap explains the time from here on.
    pub fn disconnected(&mut self, at: DateTime<Utc>) -> Option<SilenceChange> {
        self.watching_since = None;
        std::mem::take(&mut self.silent).then_some(SilenceChange::Ended { at })
    }

    /// The required readings silent at `now`, with how long each has been.
    pub fn silent_readings(&self, now: DateTime<Utc>) -> Vec<(String, TimeDelta)> {
        let Some(since) = self.watching_since else {
            return Vec::new();
        };
        self.required
            .iter()
            .filter_map(|(i, name)| {
                let last = self.last_accepted[*i].map_or(since, |t| t.max(since));
                let quiet = now - last;
                (quiet > self.limit).then(|| (name.clone(), quiet))
            })
            .collect()
    }

    /// Re-evaluates at `now`; returns the change to record, if any.
    pub fn check(&mut self, now: DateTime<Utc>) -> Option<SilenceChange> {
        if self.silent || self.silent_readings(now).is_empty() {
            return None;
        }
        let since = self.watching_since?;
        self.silent = true;
        let from = self.last_frame.map_or(since, |f| f.max(since));
        Some(SilenceChange::Started { from })
    }

    /// True when the clock alone can make the monitor silent: it is
    /// connected, not silent yet, and has required readings. Otherwise only
    /// an event changes it (a connection, a frame), so a caller need not
    /// call [`Silence::check`] meanwhile.
    pub fn can_change(&self) -> bool {
        self.watching_since.is_some() && !self.silent && !self.required.is_empty()
    }

    /// The earliest time at which [`Silence::check`] can report silence
    /// (`None` when only an event can change it, see
    /// [`Silence::can_change`]): the first required reading's last
    /// observation (or the connection, if later) plus the limit, and a
    /// nanosecond, as silence is strictly longer than the limit.
    pub fn due(&self) -> Option<DateTime<Utc>> {
        if !self.can_change() {
            return None;
        }
        let since = self.watching_since?;
        self.required
            .iter()
            .map(|(i, _)| self.last_accepted[*i].map_or(since, |t| t.max(since)))
            .min()
            .map(|last| last + self.limit + TimeDelta::nanoseconds(1))
    }

    pub fn is_silent(&self) -> bool {
        self.silent
    }

    /// Each required reading with the receipt time of its newest accepted
    /// observation (`None`: none yet).
    pub fn last_accepted(&self) -> Vec<(String, Option<DateTime<Utc>>)> {
        self.required
            .iter()
            .map(|(i, name)| (name.clone(), self.last_accepted[*i]))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    fn at(s: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_800_000_000 + s, 0).unwrap()
    }

    fn config() -> MonitorConfig {
        MonitorConfig::from_toml(
            r#"
name = "m"
[[readings]]
name = "a"
topic = "t/a"
[[readings]]
name = "b"
topic = "t/b"
[alignment]
freshness_ms = 5000
max_age_ms = 60000
future_tolerance_ms = 2000
max_skew_ms = 0
silence_ms = 10000
[detector]
training_frames = 20
calibration_frames = 20
false_alarm_rate = 0.05
"#,
        )
        .unwrap()
    }

    #[test]
    fn a_reading_that_never_arrives_is_silent_after_the_limit_from_connecting() {
        let mut s = Silence::new(&config());
        assert_eq!(s.check(at(100)), None, "not connected: nothing to say");
        s.connected(at(0));
        s.accepted(0, at(5));
        assert_eq!(s.check(at(9)), None);
        assert_eq!(
            s.check(at(11)),
            Some(SilenceChange::Started { from: at(0) })
        );
        let silent = s.silent_readings(at(11));
        assert_eq!(silent.len(), 1);
        assert_eq!(silent[0].0, "b");
        assert_eq!(s.check(at(12)), None, "reported once");
    }

    #[test]
    fn silence_is_due_just_past_the_limit_from_the_stalest_reading() {
        let mut s = Silence::new(&config());
        assert_eq!(s.due(), None, "not connected: only an event changes it");
        s.connected(at(0));
        let ms = TimeDelta::nanoseconds(1);
        assert_eq!(s.due(), Some(at(10) + ms), "nothing yet: from connecting");
        s.accepted(0, at(3));
        assert_eq!(s.due(), Some(at(10) + ms), "b is still the stalest");
        s.accepted(1, at(4));
        let due = at(13) + ms;
        assert_eq!(s.due(), Some(due));
        assert_eq!(s.clone().check(due - ms), None, "not before it");
        assert!(s.check(due).is_some(), "silent at it");
        assert_eq!(s.due(), None, "silent: only a frame ends it");
    }

    #[test]
    fn the_gap_starts_at_the_last_frame_and_ends_at_the_next() {
        let mut s = Silence::new(&config());
        s.connected(at(0));
        s.accepted(0, at(1));
        s.accepted(1, at(1));
        assert_eq!(s.frame(at(1)), None);
        assert_eq!(
            s.check(at(20)),
            Some(SilenceChange::Started { from: at(1) })
        );
        s.accepted(0, at(30));
        s.accepted(1, at(30));
        assert_eq!(s.frame(at(30)), Some(SilenceChange::Ended { at: at(30) }));
        assert!(!s.is_silent());
    }

    #[test]
    fn only_a_connected_watch_that_is_not_silent_yet_can_change_with_time() {
        let mut s = Silence::new(&config());
        assert!(!s.can_change(), "not connected");
        s.connected(at(0));
        assert!(s.can_change());
        assert!(s.check(at(20)).is_some());
        assert!(!s.can_change(), "silent: only a frame ends it");
        assert_eq!(s.check(at(10_000)), None);
        s.frame(at(30));
        assert!(s.can_change(), "data again: it can fall silent again");
        s.disconnected(at(31));
        assert!(
            !s.can_change(),
            "disconnected: the outage explains the time"
        );
    }

    proptest::proptest! {
        /// Whatever the events: while `can_change` is false, checking at any
        /// later time changes nothing.
        #[test]
        fn a_watch_that_cannot_change_reports_nothing_at_any_later_time(
            events in proptest::collection::vec((0u8..5, 0i64..30), 1..30),
            later in 0i64..100_000,
        ) {
            let mut s = Silence::new(&config());
            let mut now = 0i64;
            for (kind, advance) in events {
                now += advance;
                match kind {
                    0 => s.connected(at(now)),
                    1 => { s.disconnected(at(now)); }
                    2 => { s.accepted((now % 2) as usize, at(now)); }
                    3 => { s.frame(at(now)); }
                    _ => { s.check(at(now)); }
                }
                if !s.can_change() {
                    proptest::prop_assert_eq!(s.clone().check(at(now + later)), None);
                }
            }
        }
    }

    #[test]
    fn a_disconnect_ends_the_silence_and_stops_the_watch() {
        let mut s = Silence::new(&config());
        s.connected(at(0));
        assert!(s.check(at(20)).is_some());
        assert_eq!(
            s.disconnected(at(21)),
            Some(SilenceChange::Ended { at: at(21) })
        );
        assert_eq!(s.check(at(100)), None);
    }
}
