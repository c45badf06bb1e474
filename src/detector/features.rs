//! What the model sees of a frame: its raw values, or their deviations
//! from slowly tracked levels (see `LevelTracking`).
//!
//! Many plant signals (temperatures, vibration levels) wander slowly with
//! ambient conditions over hours. A static model of raw levels fitted on a
//! few minutes of training flags all of that wander. Deviations from a level
//! that follows the unflagged frames keep what a fault changes (a step or a
//! burst away from where the signal just was) and drop what it does not.

use serde::{Deserialize, Serialize};

use super::LevelTracking;

/// The feature state: the smoothed values and the tracked levels.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Features {
    smoothing: f64,
    tracking: Option<LevelTracking>,
    /// Largest pull of one frame on each level, in reading units.
    max_pull: Vec<f64>,
    smoothed: Option<Vec<f64>>,
    level: Option<Vec<f64>>,
}

impl Features {
    /// `smoothing`: weight of the newest frame in the per-reading moving
    /// average (1: none). `spread`: each reading's robust spread over the
    /// training frames, the unit of the level tracking's clip.
    pub fn new(smoothing: f64, tracking: Option<LevelTracking>, spread: &[f64]) -> Self {
        let clip = tracking.as_ref().map_or(0.0, |t| t.clip);
        Self {
            smoothing,
            tracking,
            max_pull: spread.iter().map(|s| s * clip).collect(),
            smoothed: None,
            level: None,
        }
    }

    /// Takes one frame's values and returns its features. With `hold` the
    /// tracked levels stay where they are: an alarm is open, the frames are
    /// suspect, and a level that followed them would learn the fault as the
    /// new normal and close the alarm while the fault lasts. The smoothing
    /// still follows the values.
    pub fn next(&mut self, values: &[f64], hold: bool) -> Vec<f64> {
        let mut out = Vec::with_capacity(values.len());
        self.next_into(values, hold, &mut out);
        out
    }

    /// `next`, writing the features into `out` (cleared first).
    pub fn next_into(&mut self, values: &[f64], hold: bool, out: &mut Vec<f64>) {
        out.clear();
        let smoothed = match &mut self.smoothed {
            None => self.smoothed.insert(values.to_vec()),
            Some(s) => {
                for (s, v) in s.iter_mut().zip(values) {
                    *s += self.smoothing * (v - *s);
                }
                s
            }
        };
        let Some(tracking) = &self.tracking else {
            out.extend_from_slice(smoothed);
            return;
        };
        match &mut self.level {
            None => {
                // The first frame defines the level: it deviates by nothing.
                self.level = Some(smoothed.clone());
                out.resize(values.len(), 0.0);
            }
            Some(level) => {
                out.extend(smoothed.iter().zip(level.iter()).map(|(s, l)| s - l));
                if !hold {
                    for ((l, s), max) in level.iter_mut().zip(smoothed.iter()).zip(&self.max_pull) {
                        *l += tracking.weight * (s - *l).clamp(-max, *max);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_smoothing_or_tracking_features_are_the_raw_values() {
        let mut f = Features::new(1.0, None, &[1.0, 1.0]);
        f.next(&[1.0, 2.0], false);
        assert_eq!(f.next(&[3.0, 4.0], false), vec![3.0, 4.0]);
    }

    #[test]
    fn smoothing_averages_the_values() {
        let mut f = Features::new(0.25, None, &[1.0]);
        assert_eq!(f.next(&[8.0], false), vec![8.0]);
        assert_eq!(f.next(&[0.0], false), vec![6.0]);
    }

    #[test]
    fn tracked_level_follows_small_moves_and_absorbs_a_step_only_linearly() {
        let tracking = LevelTracking {
            weight: 0.5,
            clip: 2.0,
        };
        let mut f = Features::new(1.0, Some(tracking), &[1.0]);
        assert_eq!(f.next(&[10.0], false), vec![0.0]);
        assert_eq!(f.next(&[11.0], false), vec![1.0]);
        // Level now 10.5. A step of 100 moves it by weight * clip * spread =
        // 1 per frame, so the deviation stays large.
        assert_eq!(f.next(&[110.5], false), vec![100.0]);
        assert_eq!(f.next(&[110.5], false), vec![99.0]);
    }

    #[test]
    fn a_held_level_does_not_move_and_resumes_where_it_stood() {
        let tracking = LevelTracking {
            weight: 0.5,
            clip: 2.0,
        };
        let mut f = Features::new(1.0, Some(tracking), &[1.0]);
        f.next(&[10.0], false);
        // Held: the level stays at 10 however long the values sit at 14.
        for _ in 0..5 {
            assert_eq!(f.next(&[14.0], true), vec![4.0]);
        }
        // Released: the first frame still sees the full 4, then the level
        // moves by weight * clip = 1.
        assert_eq!(f.next(&[14.0], false), vec![4.0]);
        assert_eq!(f.next(&[14.0], false), vec![3.0]);
    }
}
