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

/// The feature state: the tracked levels, when level tracking is on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Features {
    tracking: Option<LevelTracking>,
    level: Option<Vec<f64>>,
}

impl Features {
    pub fn new(tracking: Option<LevelTracking>) -> Self {
        Self {
            tracking,
            level: None,
        }
    }

    /// The features of `values` given the state before this frame.
    pub fn extract(&self, values: &[f64]) -> Vec<f64> {
        match (&self.tracking, &self.level) {
            (None, _) => values.to_vec(),
            // The first frame defines the level: it deviates by nothing.
            (Some(_), None) => vec![0.0; values.len()],
            (Some(_), Some(level)) => values.iter().zip(level).map(|(v, l)| v - l).collect(),
        }
    }

    /// Moves the levels towards `values`; flagged frames move them at the
    /// flagged weight.
    pub fn update(&mut self, values: &[f64], flagged: bool) {
        let Some(tracking) = &self.tracking else {
            return;
        };
        let weight = if flagged {
            tracking.flagged_weight
        } else {
            tracking.weight
        };
        match &mut self.level {
            None => self.level = Some(values.to_vec()),
            Some(level) => {
                for (l, v) in level.iter_mut().zip(values) {
                    *l += weight * (v - *l);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_tracking_features_are_the_raw_values() {
        let mut f = Features::new(None);
        f.update(&[1.0, 2.0], false);
        assert_eq!(f.extract(&[3.0, 4.0]), vec![3.0, 4.0]);
    }

    #[test]
    fn tracked_level_follows_normal_frames_and_freezes_on_flagged_ones() {
        let mut f = Features::new(Some(LevelTracking {
            weight: 0.5,
            flagged_weight: 0.0,
        }));
        assert_eq!(f.extract(&[10.0]), vec![0.0]);
        f.update(&[10.0], false);
        f.update(&[12.0], false);
        assert_eq!(f.extract(&[12.0]), vec![1.0]);
        f.update(&[100.0], true);
        assert_eq!(f.extract(&[11.0]), vec![0.0]);
    }
}
