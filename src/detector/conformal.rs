//! Threshold and p-values from the calibration scores (split conformal).
//!
//! With n calibration scores from the same law as future normal frames, the
//! k-th smallest, k = ceil((n + 1)(1 - a)), is exceeded by a new normal score
//! with probability at most a: the finite-sample guarantee that a plain
//! empirical quantile lacks. The p-value of a score s is the rank form of the
//! same statement, (1 + #{calibration >= s}) / (n + 1), never zero.

use serde::{Deserialize, Serialize};

/// Sorted calibration scores and the threshold they imply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    /// Ascending.
    pub scores: Vec<f64>,
    pub threshold: f64,
}

impl Calibration {
    /// Calibrates at false-alarm rate `rate` in (0, 1). With too few scores
    /// for that rate (settings validation prevents it) the largest score is
    /// used, the most conservative choice available; with none, nothing
    /// finite can be exceeded, so the threshold is the largest finite number.
    pub fn new(mut scores: Vec<f64>, rate: f64) -> Self {
        scores.sort_unstable_by(f64::total_cmp);
        let n = scores.len();
        let rank = ((n as f64 + 1.0) * (1.0 - rate)).ceil() as usize;
        let threshold = match rank.clamp(1, n.max(1)).checked_sub(1) {
            Some(i) if n > 0 => scores[i],
            _ => f64::MAX,
        };
        Self { scores, threshold }
    }

    /// Whether a score is beyond the threshold.
    pub fn flags(&self, score: f64) -> bool {
        score > self.threshold
    }

    /// Conformal p-value of `score`.
    pub fn p_value(&self, score: f64) -> f64 {
        self.p_value_of_rank(self.rank(score))
    }

    /// How many calibration scores are below `score`: its place among them.
    pub fn rank(&self, score: f64) -> usize {
        self.scores.partition_point(|s| *s < score)
    }

    /// The p-value of a score that `below` calibration scores are below
    /// (its [`Calibration::rank`]), for a caller that places it once.
    pub fn p_value_of_rank(&self, below: usize) -> f64 {
        let n = self.scores.len();
        (1 + n - below.min(n)) as f64 / (n + 1) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threshold_is_the_corrected_order_statistic() {
        let scores: Vec<f64> = (1..=99).map(f64::from).collect();
        // ceil(100 * 0.9) = 90th smallest.
        assert_eq!(Calibration::new(scores.clone(), 0.1).threshold, 90.0);
        // ceil(100 * 0.99) = 99th: the largest.
        assert_eq!(Calibration::new(scores, 0.01).threshold, 99.0);
    }

    #[test]
    fn p_values_are_ranks_and_never_zero() {
        let cal = Calibration::new(vec![3.0, 1.0, 2.0, 4.0], 0.2);
        assert_eq!(cal.p_value(0.0), 1.0);
        assert_eq!(cal.p_value(2.0), 4.0 / 5.0);
        assert_eq!(cal.p_value(2.5), 3.0 / 5.0);
        assert_eq!(cal.p_value(100.0), 1.0 / 5.0);
    }

    #[test]
    fn empty_calibration_flags_nothing_finite() {
        let cal = Calibration::new(Vec::new(), 0.05);
        assert!(!cal.flags(1e300));
        assert_eq!(cal.p_value(5.0), 1.0);
    }
}
