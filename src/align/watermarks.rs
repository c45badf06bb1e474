//! Per-reading watermarks: the highest accepted source timestamp.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// The highest accepted source timestamp of each reading, by reading name.
/// Survives restarts inside the snapshot, so retained or replayed messages
/// cannot advance a restored detector. A reading that never had an accepted
/// observation has no entry.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Watermarks(pub BTreeMap<String, DateTime<Utc>>);

impl Watermarks {
    /// The watermark of a reading, if it has one.
    pub fn get(&self, reading: &str) -> Option<DateTime<Utc>> {
        self.0.get(reading).copied()
    }

    /// Whether `ts` is at or below the reading's watermark: such an
    /// observation was (or could have been) seen already.
    pub fn is_stale(&self, reading: &str, ts: DateTime<Utc>) -> bool {
        self.get(reading).is_some_and(|mark| ts <= mark)
    }

    /// Raises the reading's watermark to `ts`. Returns `false` and changes
    /// nothing when `ts` is stale, so a watermark never moves backwards.
    pub fn advance(&mut self, reading: &str, ts: DateTime<Utc>) -> bool {
        match self.0.get_mut(reading) {
            Some(mark) if ts <= *mark => false,
            Some(mark) => {
                *mark = ts;
                true
            }
            None => {
                self.0.insert(reading.to_owned(), ts);
                true
            }
        }
    }

    /// Reading names that have a watermark.
    pub fn readings(&self) -> impl Iterator<Item = &str> {
        self.0.keys().map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn at(ms: i64) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(ms).unwrap()
    }

    #[test]
    fn an_observation_at_the_watermark_is_stale_and_one_millisecond_later_is_not() {
        let mut marks = Watermarks::default();
        assert!(!marks.is_stale("t", at(1_000)));
        assert!(marks.advance("t", at(1_000)));
        assert!(marks.is_stale("t", at(999)));
        assert!(marks.is_stale("t", at(1_000)));
        assert!(!marks.is_stale("t", at(1_001)));
        assert!(!marks.advance("t", at(1_000)));
        assert_eq!(marks.get("t"), Some(at(1_000)));
    }

    #[test]
    fn readings_have_independent_watermarks() {
        let mut marks = Watermarks::default();
        marks.advance("a", at(5));
        assert!(!marks.is_stale("b", at(1)));
        assert!(marks.advance("b", at(1)));
        assert_eq!(marks.readings().collect::<Vec<_>>(), ["a", "b"]);
    }

    #[test]
    fn watermarks_survive_a_serde_roundtrip_unchanged() {
        let mut marks = Watermarks::default();
        marks.advance("a", at(1_700_000_000_123));
        marks.advance("b", at(-5));
        let bytes = rmp_serde::to_vec(&marks).unwrap();
        assert_eq!(rmp_serde::from_slice::<Watermarks>(&bytes).unwrap(), marks);
    }

    proptest! {
        #[test]
        fn replayed_observations_never_advance_any_watermark(
            stream in proptest::collection::vec((0usize..3, -1_000i64..1_000), 1..60),
            replay_picks in proptest::collection::vec(any::<proptest::sample::Index>(), 1..60),
        ) {
            let names = ["a", "b", "c"];
            let mut marks = Watermarks::default();
            for &(reading, ms) in &stream {
                marks.advance(names[reading], at(ms));
            }
            let before = marks.clone();
            for pick in replay_picks {
                let (reading, ms) = stream[pick.index(stream.len())];
                prop_assert!(marks.is_stale(names[reading], at(ms)));
                prop_assert!(!marks.advance(names[reading], at(ms)));
            }
            prop_assert_eq!(marks, before);
        }

        #[test]
        fn a_watermark_is_the_maximum_of_what_it_was_given(
            stream in proptest::collection::vec(-1_000i64..1_000, 1..60),
        ) {
            let mut marks = Watermarks::default();
            for &ms in &stream {
                marks.advance("a", at(ms));
            }
            prop_assert_eq!(marks.get("a"), stream.iter().max().map(|&ms| at(ms)));
        }
    }
}
