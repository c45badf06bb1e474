//! Held shifts of change readings: see [`ShiftHold`].

use serde::{Deserialize, Serialize};

use super::robust::{RobustScaler, Z_LIMIT};

/// Holds a sudden shift of a change reading for as long as it lasts.
///
/// The change statistics see a step only while it is fresh: a few frames
/// after a jump the differences are ordinary again, and the reading's new
/// level, however far from the old one, looks like drift. A reading that
/// wanders like a random walk with trend observed in noise (the local
/// level model) has lag-`L` differences `x(t) - x(t - L)` with mean `s L`
/// (the trend) and variance `a + b L` (`a` twice the noise variance, `b`
/// the walk's variance per frame).
///
/// Once a reading's own change score crosses the threshold at frame `t0`,
/// its level before the change is kept as the reference `r`: the median of
/// the three values before `t0`, so that an outlier just before the change
/// cannot be the reference (its noise, about half a value's, is inside the
/// allowance `a`). Each later frame is judged by
/// `z = (x(t) - r - s L) / sqrt(a + b L)`, `L = t - t0 + 1`. On the side
/// the change went, a frame beyond the normal quantile of
/// `1 - false_alarm_rate` is flagged; the hold ends at the first frame
/// within it (unless the change score itself still crosses). Under the
/// model a frame is held after a normal jump with probability at most the
/// channel's rate, and drift after a false arming releases it.
///
/// `a`, `b` and `s` come from the robust spread and centre of the training
/// frames' lag-1 and lag-`H` differences (`H` a sixth of them, at most 50).
/// Only a reading whose walk over `H` frames
/// spreads no more than its noise (`b H <= a`) is held: there the level
/// before a change is a reference that means something for `H` frames.
/// Where the walk dominates (a temperature that moves with the heat
/// balance), the reference is soon lost in the walk, whose variance a few
/// hundred frames estimate poorly; on SKAB's fault-free run those holds
/// were most of the false ones.
///
/// Stated limits: the trend `s` is the training frames'; a reading whose
/// trend changes while it is held stays held until its level comes back
/// (an error of `e` per frame outgrows the allowance `q sqrt(b L)`, `q`
/// the quantile, after about `q^2 b / e^2` frames); and the reference is the level of one moment, so a
/// hold that outlasts the walk's spread over its length is released
/// while the shift may still be there.
///
/// The frame's change score reports a held frame as the threshold times
/// `z` over the quantile: above the threshold exactly when held.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) struct ShiftHold {
    /// Per change reading: `[a, b, s]`, or `None` when it is not held.
    walk: Vec<Option<[f64; 3]>>,
    /// The normal quantile a held frame's `z` must exceed.
    quantile: f64,
    /// Each change reading's last three values, newest last.
    recent: Vec<[f64; 3]>,
    /// Per change reading, while held.
    held: Vec<Option<Held>>,
}

/// A hold: the reference, the frames since the change (`L`) and the side
/// the change went (+1 or -1).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
struct Held {
    reference: f64,
    since: u64,
    side: f64,
}

impl ShiftHold {
    pub(super) fn fit(
        columns: &[usize],
        training: &[Vec<f64>],
        calibration: &[Vec<f64>],
        rate: f64,
    ) -> Self {
        let h = (training.len() / 6).clamp(1, 50);
        let walk = columns
            .iter()
            .map(|&c| {
                let series: Vec<f64> = training.iter().map(|row| row[c]).collect();
                let lagged = |lag: usize| -> Vec<Vec<f64>> {
                    series
                        .windows(lag + 1)
                        .map(|w| vec![w[lag] - w[0]])
                        .collect()
                };
                let one = RobustScaler::fit(&lagged(1), 1);
                let far = RobustScaler::fit(&lagged(h), 1);
                let (v1, vh) = (one.scale[0].powi(2), far.scale[0].powi(2));
                let b = if h > 1 {
                    ((vh - v1) / (h - 1) as f64).max(0.0)
                } else {
                    0.0
                };
                let a = (v1 - b).max(v1 * 1e-6).max(f64::MIN_POSITIVE);
                (b * h as f64 <= a).then_some([a, b, far.centre[0] / h as f64])
            })
            .collect();
        let quantile = statrs::distribution::ContinuousCDF::inverse_cdf(
            &statrs::distribution::Normal::standard(),
            1.0 - rate,
        );
        let rows: Vec<&Vec<f64>> = training.iter().chain(calibration).collect();
        let recent = columns
            .iter()
            .map(|&c| {
                let value = |back: usize| {
                    rows.len()
                        .checked_sub(back)
                        .and_then(|i| rows.get(i))
                        .or(rows.first())
                        .map_or(0.0, |row| row[c])
                };
                [value(3), value(2), value(1)]
            })
            .collect();
        Self {
            walk,
            quantile,
            recent,
            held: vec![None; columns.len()],
        }
    }

    /// Reading `j`'s held `z` over the quantile as it stands (0 when not
    /// held).
    pub(super) fn ratio(&self, j: usize) -> f64 {
        let (Some(held), Some([a, b, s])) = (self.held[j], self.walk[j]) else {
            return 0.0;
        };
        let l = held.since as f64;
        let z = held.side * (self.recent[j][2] - held.reference - s * l) / (a + b * l).sqrt();
        if z.is_finite() {
            (z / self.quantile).clamp(0.0, Z_LIMIT)
        } else {
            0.0
        }
    }

    /// Advances reading `j` on its value `x`, given whether its own change
    /// score crosses the threshold; returns how far the frame is held, as
    /// `z` over the quantile (0 when not held).
    pub(super) fn step(&mut self, j: usize, x: f64, crosses: bool) -> f64 {
        let [x1, x2, x3] = self.recent[j];
        self.recent[j] = [x2, x3, x];
        let Some([_, _, s]) = self.walk[j] else {
            return 0.0;
        };
        // The median of the three values before the change: one outlier
        // just before it cannot become the reference.
        let before = x1.max(x2).min(x3).max(x1.min(x2));
        self.held[j] = match self.held[j] {
            Some(held) => Some(Held {
                since: held.since + 1,
                ..held
            }),
            None if crosses => Some(Held {
                reference: before,
                since: 1,
                side: if x - before - s >= 0.0 { 1.0 } else { -1.0 },
            }),
            None => None,
        };
        let ratio = self.ratio(j);
        if ratio <= 1.0 && !crosses {
            self.held[j] = None;
        }
        ratio
    }
}
