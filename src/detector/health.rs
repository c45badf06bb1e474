//! Model health: is the model still describing the process it watches?
//!
//! Two signals over a window of recent monitored frames: the flag rate
//! against the calibrated target (a model that flags far more than the
//! target has gone stale or the process has changed), and the two-sample
//! Kolmogorov-Smirnov distance between the recent scores and the calibration
//! scores (drift shows here before it crosses the threshold).

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

/// The last published health figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelHealth {
    /// Monitored frames the figures were computed from.
    pub window_frames: usize,
    pub flag_rate: f64,
    pub target_rate: f64,
    /// Kolmogorov-Smirnov distance between recent and calibration scores.
    pub score_drift: f64,
    /// Asymptotic p-value of that distance (small: the scores have drifted).
    pub drift_p_value: f64,
    /// Monitored frames seen when these figures were computed.
    pub at_frame: u64,
}

/// Recent monitored frames, kept for the periodic health refresh.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HealthWindow {
    capacity: usize,
    recent: VecDeque<(bool, f64)>,
    #[serde(skip)]
    keys: WindowKeys,
    #[serde(skip)]
    tally: WindowTally,
}

/// How many frames of the window are flagged and how many of its scores are
/// not finite, kept as frames enter and leave it: a refresh reads them
/// instead of walking the whole window twice (those walks were about 40% of
/// the refresh, which was 4% of `radar detect`'s samples). A cache like
/// [`WindowKeys`]: `None` after a restore, counted from `recent` at the
/// next refresh, so it never changes a figure, and not part of any snapshot
/// or comparison.
#[derive(Debug, Clone, Copy, Default)]
struct WindowTally(Option<(usize, usize)>);

impl PartialEq for WindowTally {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl WindowTally {
    fn enter(&mut self, (flagged, score): (bool, f64)) {
        if let Some((f, n)) = &mut self.0 {
            *f += usize::from(flagged);
            *n += usize::from(!score.is_finite());
        }
    }

    fn leave(&mut self, (flagged, score): (bool, f64)) {
        if let Some((f, n)) = &mut self.0 {
            *f -= usize::from(flagged);
            *n -= usize::from(!score.is_finite());
        }
    }

    /// (flagged frames, scores not finite) of `recent`, counted afresh
    /// unless kept.
    fn counts(&mut self, recent: &VecDeque<(bool, f64)>) -> (usize, usize) {
        *self.0.get_or_insert_with(|| {
            let flagged = recent.iter().filter(|(f, _)| *f).count();
            let non_finite = recent.iter().filter(|(_, s)| !s.is_finite()).count();
            (flagged, non_finite)
        })
    }
}

/// Where each score of the window falls among the calibration scores (its
/// key in `ks_distance_against_sorted`), counted per key and kept up to date
/// frame by frame: a refresh then walks the calibration once instead of
/// placing every score of the window again (that placement was an eighth of
/// `radar detect`'s time). A cache: rebuilt from `recent` whenever it was not
/// made against the calibration a refresh is given (after a restore, say),
/// so it never changes a figure, and not part of any snapshot or comparison.
#[derive(Debug, Clone, Default)]
struct WindowKeys {
    /// The sorted calibration the keys were computed against; empty: no keys.
    against: Vec<f64>,
    /// The key of each score of `recent`, in the same order.
    keys: VecDeque<usize>,
    /// How many scores of `recent` have each key.
    count: Vec<usize>,
}

impl PartialEq for WindowKeys {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl WindowKeys {
    fn push(&mut self, score: f64) {
        // Without a calibration the keys are rebuilt at the next refresh.
        if !self.against.is_empty() {
            let key = key(score, &self.against);
            self.count[key] += 1;
            self.keys.push_back(key);
        }
    }

    /// [`WindowKeys::push`] of a score that `below` values of `calibration`
    /// are below, placed once by the caller: the same key when
    /// `calibration` is the one the keys are made against. When it is not,
    /// the next refresh, given that calibration, finds the keys made
    /// against another and rebuilds them, so no figure changes.
    fn push_placed(&mut self, score: f64, calibration: &[f64], below: usize) {
        let placeable = !self.against.is_empty() && self.against.len() == calibration.len();
        if !placeable || below > calibration.len() {
            return self.push(score);
        }
        let key = 2 * below + usize::from(below < calibration.len() && calibration[below] == score);
        self.count[key] += 1;
        self.keys.push_back(key);
    }

    fn pop(&mut self) {
        if let Some(key) = self.keys.pop_front() {
            self.count[key] -= 1;
        }
    }

    /// The counts for `recent` against `calibration`, rebuilt unless they
    /// were made against the same calibration (bit for bit).
    fn counts(&mut self, recent: &VecDeque<(bool, f64)>, calibration: &[f64]) -> &[usize] {
        let same = self.against.len() == calibration.len()
            && self.keys.len() == recent.len()
            && self
                .against
                .iter()
                .zip(calibration)
                .all(|(a, b)| a.to_bits() == b.to_bits());
        if !same {
            self.against = calibration.to_vec();
            self.keys = recent.iter().map(|(_, s)| key(*s, calibration)).collect();
            self.count = vec![0; 2 * calibration.len() + 2];
            for &key in &self.keys {
                self.count[key] += 1;
            }
        }
        &self.count
    }
}

impl HealthWindow {
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            recent: VecDeque::new(),
            keys: WindowKeys::default(),
            tally: WindowTally(Some((0, 0))),
        }
    }

    pub fn push(&mut self, flagged: bool, score: f64) {
        self.make_room();
        self.recent.push_back((flagged, score));
        self.tally.enter((flagged, score));
        self.keys.push(score);
    }

    /// [`HealthWindow::push`] of a score that `below` values of the sorted
    /// `calibration` are below (the detector places each score once, for
    /// its p-value); `calibration` must be the one given to `assess`.
    pub fn push_placed(&mut self, flagged: bool, score: f64, calibration: &[f64], below: usize) {
        self.make_room();
        self.recent.push_back((flagged, score));
        self.tally.enter((flagged, score));
        self.keys.push_placed(score, calibration, below);
    }

    /// Drops the oldest frame when the window is full.
    fn make_room(&mut self) {
        if self.recent.len() == self.capacity {
            if let Some(oldest) = self.recent.pop_front() {
                self.tally.leave(oldest);
            }
            self.keys.pop();
        }
    }

    /// Computes the health figures against the sorted calibration scores.
    pub fn assess(&mut self, calibration: &[f64], target_rate: f64, at_frame: u64) -> ModelHealth {
        let n = self.recent.len();
        let (flagged, non_finite) = self.tally.counts(&self.recent);
        let score_drift = if non_finite == 0 {
            let count = self.keys.counts(&self.recent, calibration);
            ks_distance_from_counts(count, n, calibration)
        } else {
            let mut scores: Vec<f64> = self.recent.iter().map(|(_, s)| *s).collect();
            scores.sort_unstable_by(f64::total_cmp);
            ks_distance(&scores, calibration)
        };
        ModelHealth {
            window_frames: n,
            flag_rate: if n == 0 {
                0.0
            } else {
                flagged as f64 / n as f64
            },
            target_rate,
            score_drift,
            drift_p_value: ks_p_value(score_drift, n, calibration.len()),
            at_frame,
        }
    }
}

/// Largest gap between the empirical distribution functions of two sorted samples.
fn ks_distance(a: &[f64], b: &[f64]) -> f64 {
    if a.is_empty() || b.is_empty() {
        return 0.0;
    }
    let (mut i, mut j, mut d) = (0, 0, 0.0f64);
    while i < a.len() && j < b.len() {
        let x = if a[i] <= b[j] { a[i] } else { b[j] };
        while i < a.len() && a[i] <= x {
            i += 1;
        }
        while j < b.len() && b[j] <= x {
            j += 1;
        }
        d = d.max((i as f64 / a.len() as f64 - j as f64 / b.len() as f64).abs());
    }
    d
}

/// `ks_distance` of `n` finite unsorted values against the sorted `b`,
/// without sorting them (the sort dominated the monitoring step): each value
/// is placed by binary search among `b`, and the distance is taken at the
/// points where it can be largest: every value of `b`, and the largest value
/// of `a` between two neighbouring values of `b` (between them the
/// distribution function of `b` is constant and that of `a` rises, so the
/// gap is largest at that value or at the value of `b` just below, already
/// counted). The largest gap comes from the same `(i, j)` pair as in the
/// merge, computed by the same expression: the result is bit-identical.
#[cfg(test)]
fn ks_distance_against_sorted(a: impl Iterator<Item = f64>, n: usize, b: &[f64]) -> f64 {
    let mut count = vec![0usize; 2 * b.len() + 2];
    for x in a {
        count[key(x, b)] += 1;
    }
    ks_distance_from_counts(&count, n, b)
}

/// Where `x` falls among the sorted `b`: key 2p, strictly between b[p - 1]
/// and b[p] (p values of b below); key 2p + 1, equal to b[p], p the first
/// index of that value.
fn key(x: f64, b: &[f64]) -> usize {
    let p = b.partition_point(|c| *c < x);
    2 * p + usize::from(p < b.len() && b[p] == x)
}

/// `ks_distance_against_sorted` of `n` values given by their key counts.
fn ks_distance_from_counts(count: &[usize], n: usize, b: &[f64]) -> f64 {
    let m = b.len();
    if n == 0 || m == 0 {
        return 0.0;
    }
    let gap = |i: usize, j: usize| (i as f64 / n as f64 - j as f64 / m as f64).abs();
    let mut d = 0.0f64;
    let mut below = 0; // values of `a` with a key below the current one
    let mut p = 0;
    while p <= m {
        // Values strictly between b[p - 1] and b[p]: p values of b at or below.
        let between = count[2 * p];
        if between > 0 {
            d = d.max(gap(below + between, p));
        }
        below += between;
        if p == m {
            break;
        }
        // The first value of `b` above b[p]: `b` is sorted, so a step
        // past b[p]'s ties (a binary search here cost a third of a refresh).
        let mut next = p + 1;
        while next < m && b[next] <= b[p] {
            next += 1;
        }
        below += count[2 * p + 1];
        d = d.max(gap(below, next));
        p = next;
    }
    d
}

/// Kolmogorov's asymptotic tail with Stephens' small-sample correction.
fn ks_p_value(d: f64, n: usize, m: usize) -> f64 {
    if n == 0 || m == 0 || d <= 0.0 {
        return 1.0;
    }
    let ne = (n * m) as f64 / (n + m) as f64;
    let lambda = (ne.sqrt() + 0.12 + 0.11 / ne.sqrt()) * d;
    let mut sum = 0.0;
    for k in 1..=100 {
        let k = f64::from(k);
        let term = 2.0 * (-1.0f64).powf(k - 1.0) * (-2.0 * k * k * lambda * lambda).exp();
        sum += term;
        if term.abs() < 1e-12 {
            break;
        }
    }
    sum.clamp(0.0, 1.0)
}

#[cfg(test)]
mod tests;
