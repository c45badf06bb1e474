//! Stuck values: a reading that repeats its value for longer than it
//! plausibly does.
//!
//! A sensor that freezes (a dead transmitter, a held register, a failed
//! analogue input) keeps sending its last value. Neither the level model nor
//! the change channels see that: the frozen value is a normal level, and a
//! difference of zero is the most ordinary change there is. What is
//! abnormal is the *run*: how many frames in a row the value has repeated
//! (exact equality of the numbers: a frozen sensor sends the same bits, and
//! a quantized one repeats a level as often as its noise allows).
//!
//! Per reading, let `K` be the number of frames in a row that have repeated
//! the value before, at a frame picked at random from normal operation.
//! The reading's p-value for a run of `k` repeats is the survival function
//! `S(k) = P(K >= k)`. A p-value from a survival function is valid (`P(S(K)
//! <= c) <= c` for any `c`), so a reading judged against the level
//! `false_alarm_rate / readings` is flagged with probability at most that
//! level, and the frame (the smallest p-value over the readings, Bonferroni)
//! with probability at most `false_alarm_rate`, whatever the dependence
//! between readings. The statistic is reported as the surprise `-ln S` of
//! the smallest p-value, against the threshold `-ln(rate / readings)`.
//!
//! `S` is estimated from the training and calibration frames as a product
//! of continuation probabilities, `S(k) = g(0) g(1) ... g(k - 1)` with
//! `g(d) = P(a frame repeats | K >= d before it)` (in a stationary series
//! `P(K >= d + 1) = P(K >= d) g(d)`, so the product is exact):
//!
//! - Each `g(d)` is the observed share with one added success and one added
//!   failure (the rule of succession): never 0 or 1, so the logarithms stay
//!   finite, and a reading that never repeated in 400 frames has `g(0)`
//!   about 1/400 and `g(d)` 1/2 beyond.
//! - For `d >= 1` the estimate is made non-decreasing in `d` (the running
//!   largest). A quantized reading's runs are a mixture: a level between two
//!   quantization steps repeats more than one on a step, and a slow process
//!   holds some levels for long. In any mixture of geometric run lengths
//!   the continuation probability can only grow with the run's length (the
//!   longer a run, the likelier it is from a persistent component), and a
//!   single geometric tail fitted to the average underestimates the long
//!   runs: on the SKAB flow readings `g` rises from about 0.6 at `d = 1` to
//!   0.9 at `d = 8`, and a one-parameter chain flagged runs the fault-free
//!   operation makes.
//! - Beyond the longest run seen, the tail continues at the last `g`: the
//!   most persistent continuation observed, a geometric extrapolation.
//!
//! Stated approximations: `S` is an estimate from a few hundred frames
//! (runs longer than any seen are extrapolated), and neighbouring frames'
//! `K` are dependent by construction, which the survival argument does not
//! need but the estimate's precision does. The unit tests measure the rate
//! on quantized Gaussian and heavy-tailed noise.
//!
//! A reading that never changed over the training and calibration frames is
//! not watched: nothing there says how long it normally holds a value, and
//! a constant setpoint held for hours is not a fault.

use serde::{Deserialize, Serialize};

use super::settings::probability_error;
use crate::config::FieldError;

/// The stuck-value channel's settings (`[detector.stuck]`). Every required
/// reading is watched.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StuckSettings {
    /// Target probability that a normal frame is flagged because some
    /// reading has repeated its value for too long.
    pub false_alarm_rate: f64,
}

impl StuckSettings {
    pub fn validate(&self, field: &dyn Fn(&str) -> String) -> Option<FieldError> {
        probability_error(field("stuck.false_alarm_rate"), self.false_alarm_rate)
    }
}

/// The fitted run model of every reading and the current runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StuckChannel {
    /// Per reading, `ln S(k)` for `k = 1, 2, ...` up to one beyond the
    /// longest run seen while fitting; empty for a reading that is not
    /// watched (it never changed while fitting).
    log_survival: Vec<Vec<f64>>,
    /// Per reading, `ln g` of the tail beyond the table.
    log_tail: Vec<f64>,
    /// `-ln(false_alarm_rate / readings)`: a frame whose surprise is beyond
    /// it is flagged.
    pub threshold: f64,
    /// The last frame's values.
    last: Vec<f64>,
    /// Per reading, how many frames in a row have repeated the value before
    /// (0: the last frame changed it).
    repeats: Vec<u64>,
}

/// One reading's `ln S(k)` table and tail `ln g` from its values in
/// arrival order (see the module's docs); `None` when it never changed.
fn survival(values: impl Iterator<Item = f64>) -> (Option<(Vec<f64>, f64)>, u64) {
    // at_depth[d]: frames with a frame after them whose run was d repeats;
    // continued[d]: of those, the ones the next frame repeated.
    let (mut at_depth, mut continued) = (Vec::<u64>::new(), Vec::<u64>::new());
    let (mut run, mut last, mut changed) = (0u64, None::<f64>, false);
    for x in values {
        if let Some(previous) = last {
            let d = run as usize;
            if at_depth.len() <= d {
                at_depth.resize(d + 1, 0);
                continued.resize(d + 1, 0);
            }
            at_depth[d] += 1;
            if x == previous {
                continued[d] += 1;
                run += 1;
            } else {
                run = 0;
                changed = true;
            }
        }
        last = Some(x);
    }
    if !changed {
        return (None, run);
    }
    // n_d = frames with K >= d before a frame, s_d = of those, repeats:
    // suffix sums of the per-depth counts.
    let depths = at_depth.len().max(2);
    at_depth.resize(depths, 0);
    continued.resize(depths, 0);
    let (mut n, mut s) = (0u64, 0u64);
    let mut g = vec![0.0; depths];
    for d in (0..depths).rev() {
        n += at_depth[d];
        s += continued[d];
        g[d] = (s + 1) as f64 / (n + 2) as f64;
    }
    let mut table = Vec::with_capacity(depths);
    let (mut log_s, mut largest) = (0.0, 0.0f64);
    for (d, gd) in g.iter().enumerate() {
        let step = if d == 0 {
            *gd
        } else {
            largest = largest.max(*gd);
            largest
        };
        log_s += step.ln();
        table.push(log_s);
    }
    (Some((table, largest.ln())), run)
}

impl StuckChannel {
    /// Fits the run model on the training then calibration frames (full
    /// frames, in arrival order) and leaves the runs where they stand after
    /// the last of them. A pure function of its input.
    pub fn fit(settings: &StuckSettings, training: &[Vec<f64>], calibration: &[Vec<f64>]) -> Self {
        let rows: Vec<&Vec<f64>> = training.iter().chain(calibration).collect();
        let width = rows.first().map_or(0, |r| r.len());
        let mut log_survival = Vec::with_capacity(width);
        let mut log_tail = Vec::with_capacity(width);
        let mut repeats = Vec::with_capacity(width);
        for j in 0..width {
            let (model, run) = survival(rows.iter().map(|r| r[j]));
            let (table, tail) = model.unwrap_or_default();
            log_survival.push(table);
            log_tail.push(tail);
            repeats.push(run);
        }
        let level = settings.false_alarm_rate / width.max(1) as f64;
        Self {
            log_survival,
            log_tail,
            threshold: -level.ln(),
            last: rows.last().map(|r| r.to_vec()).unwrap_or_default(),
            repeats,
        }
    }

    /// Advances on one full frame and returns its surprise: `-ln` of the
    /// smallest run p-value over the readings (0 when nothing repeated).
    pub fn observe(&mut self, row: &[f64]) -> f64 {
        let mut surprise: f64 = 0.0;
        for (j, &x) in row.iter().enumerate().take(self.last.len()) {
            if x == self.last[j] {
                self.repeats[j] += 1;
                surprise = surprise.max(self.reading_surprise(j));
            } else {
                self.repeats[j] = 0;
                self.last[j] = x;
            }
        }
        surprise
    }

    /// `-ln S(k)` for reading `j`'s current run of `k` repeats.
    fn reading_surprise(&self, j: usize) -> f64 {
        let table = &self.log_survival[j];
        let k = self.repeats[j] as usize;
        match (k, table.last()) {
            (0, _) | (_, None) => 0.0,
            (k, Some(&deepest)) if k > table.len() => {
                -(deepest + (k - table.len()) as f64 * self.log_tail[j])
            }
            (k, _) => -table[k - 1],
        }
    }

    /// Whether a surprise is beyond the threshold.
    pub fn flags(&self, surprise: f64) -> bool {
        surprise > self.threshold
    }

    /// The frame's p-value for a surprise: the smallest reading p-value,
    /// Bonferroni over the readings.
    pub fn p_value(&self, surprise: f64) -> f64 {
        ((-surprise).exp() * self.last.len() as f64).min(1.0)
    }
}
