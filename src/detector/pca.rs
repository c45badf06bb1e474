//! The static model: robust standardization, principal components of the
//! training frames, and the two classic statistics of multivariate process
//! monitoring (Hotelling T-squared inside the retained subspace, squared
//! prediction error outside it).
//!
//! The two statistics live on unrelated scales (T-squared grows with the
//! number of retained components, SPE with the residual noise), so each is
//! divided by its median over the training frames before they are added: a
//! typical training frame then scores about 2, and neither part can drown the
//! other. The median, not the mean, keeps a few training outliers from
//! deflating the combined score. The threshold itself is not derived from
//! any parametric law: it is calibrated on held-out frames (see
//! `conformal`), so this normalization only has to be sensible, not exact.

use nalgebra::{DMatrix, DVector, SymmetricEigen};
use serde::{Deserialize, Serialize};

use super::robust::{RobustScaler, median};

/// Eigenvalues below this fraction of the largest are numerically zero:
/// their directions (collinear or constant sensors, or more readings than
/// frames) belong to the residual subspace, where SPE watches them.
const RELATIVE_EIGEN_FLOOR: f64 = 1.0e-9;
/// Smallest normalizer for either statistic, in squared robust-SD units; far
/// below any real residual, it only keeps an all-constant training set from
/// dividing by zero.
const NORM_FLOOR: f64 = 1.0e-9;

/// A fitted principal-component model over `width` readings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PcaModel {
    pub scaler: RobustScaler,
    /// Mean of the standardized training frames.
    pub mean: Vec<f64>,
    /// Retained loadings, `width` rows by `retained` columns, row-major.
    pub loadings: Vec<f64>,
    /// Variance along each retained component, largest first.
    pub eigenvalues: Vec<f64>,
    /// Training medians of T-squared and SPE.
    pub t2_norm: f64,
    pub spe_norm: f64,
}

/// One frame's statistics and each reading's share of the combined score.
#[derive(Debug, Clone, PartialEq)]
pub struct FrameScore {
    pub t2: f64,
    pub spe: f64,
    /// `t2 / t2_norm + spe / spe_norm`.
    pub combined: f64,
    /// Per reading; sums to `combined`.
    pub contributions: Vec<f64>,
}

impl PcaModel {
    /// Fits on finite rows of `width` values. Defined for any input, including
    /// fewer rows than readings, constant or collinear readings.
    pub fn fit(rows: &[Vec<f64>], width: usize, explained_variance: f64) -> Self {
        let scaler = RobustScaler::fit(rows, width);
        let n = rows.len();
        let z = standardize(&scaler, rows, width);
        let mean = column_means(&z, n, width);
        let cov = covariance(&z, n, width, &mean);
        let eigen = SymmetricEigen::new(cov);
        let order = largest_first(&eigen.eigenvalues, width);
        let values: Vec<f64> = order
            .iter()
            .map(|&i| eigen.eigenvalues[i].max(0.0))
            .collect();
        let retained = retained_components(&values, explained_variance);
        let loadings = retained_loadings(&eigen.eigenvectors, &order, width, retained);
        let mut model = Self {
            scaler,
            mean,
            loadings,
            eigenvalues: values[..retained].to_vec(),
            t2_norm: 1.0,
            spe_norm: 1.0,
        };
        model.calibrate_norms(rows);
        model
    }

    /// Sets each statistic's normalizer to its median over the training
    /// rows (see the module doc), with the floors.
    fn calibrate_norms(&mut self, rows: &[Vec<f64>]) {
        let (mut t2s, mut spes): (Vec<f64>, Vec<f64>) =
            rows.iter().map(|row| self.raw_statistics(row)).unzip();
        let t2_median = median(&mut t2s);
        let spe_median = median(&mut spes);
        self.t2_norm = if t2_median > NORM_FLOOR {
            t2_median
        } else {
            1.0
        };
        self.spe_norm = spe_median.max(NORM_FLOOR);
    }

    pub fn width(&self) -> usize {
        self.mean.len()
    }

    pub fn retained(&self) -> usize {
        self.eigenvalues.len()
    }

    fn raw_statistics(&self, row: &[f64]) -> (f64, f64) {
        let s = self.score(row);
        (s.t2, s.spe)
    }

    /// T-squared and SPE of one finite row of `width` values, leaving the
    /// centred row and the component scores in `scratch` (no allocation once
    /// it has grown to size): the per-frame path, which needs
    /// `contributions` only for the frames it flags.
    pub fn statistics(&self, row: &[f64], scratch: &mut Scratch) -> (f64, f64) {
        let width = self.width();
        let k = self.retained();
        let Scratch { centred, t, .. } = scratch;
        centred.clear();
        centred.resize(width, 0.0);
        self.scaler.transform_into(row, centred);
        for (c, m) in centred.iter_mut().zip(&self.mean) {
            *c -= m;
        }
        t.clear();
        t.resize(k, 0.0);
        for (j, c) in centred.iter().enumerate() {
            for (comp, tc) in t.iter_mut().enumerate() {
                *tc += self.loadings[j * k + comp] * c;
            }
        }
        let t2: f64 = t
            .iter()
            .zip(&self.eigenvalues)
            .map(|(tc, l)| tc * tc / l)
            .sum();
        let mut spe = 0.0;
        for j in 0..width {
            let residual = self.residual(j, centred, t);
            spe += residual * residual;
        }
        (t2, spe)
    }

    fn residual(&self, j: usize, centred: &[f64], t: &[f64]) -> f64 {
        let k = self.retained();
        let row_loadings = &self.loadings[j * k..(j + 1) * k];
        let projected: f64 = row_loadings.iter().zip(t).map(|(p, tc)| p * tc).sum();
        centred[j] - projected
    }

    /// The combined score of the statistics.
    pub fn combine(&self, t2: f64, spe: f64) -> f64 {
        t2 / self.t2_norm + spe / self.spe_norm
    }

    /// Each reading's share of the combined score of the row `statistics`
    /// last saw in `scratch`; the shares add up to the combined score.
    pub fn contributions(&self, scratch: &Scratch) -> Vec<f64> {
        let k = self.retained();
        let Scratch { centred, t, .. } = scratch;
        (0..self.width())
            .map(|j| {
                let row_loadings = &self.loadings[j * k..(j + 1) * k];
                let residual = self.residual(j, centred, t);
                // Each reading's share of T-squared: its centred value times its
                // weight in the whitened scores; these shares add up to T-squared.
                let t2_share: f64 = row_loadings
                    .iter()
                    .zip(t)
                    .zip(&self.eigenvalues)
                    .map(|((p, tc), l)| p * tc / l)
                    .sum::<f64>()
                    * centred[j];
                t2_share / self.t2_norm + residual * residual / self.spe_norm
            })
            .collect()
    }

    /// Scores one finite row of `width` values.
    pub fn score(&self, row: &[f64]) -> FrameScore {
        let mut scratch = Scratch::default();
        let (t2, spe) = self.statistics(row, &mut scratch);
        FrameScore {
            t2,
            spe,
            combined: self.combine(t2, spe),
            contributions: self.contributions(&scratch),
        }
    }
}

/// Working memory of `PcaModel::statistics`: not part of any model or
/// snapshot, and equal to every other (it holds nothing between frames that
/// a result depends on).
#[derive(Debug, Clone, Default)]
pub struct Scratch {
    centred: Vec<f64>,
    t: Vec<f64>,
    /// The frame's features, for the caller.
    pub features: Vec<f64>,
    /// The frame's level-model readings, for the caller.
    pub level: Vec<f64>,
}

impl PartialEq for Scratch {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

/// The rows standardized by `scaler`, row-major, `width` values per row.
fn standardize(scaler: &RobustScaler, rows: &[Vec<f64>], width: usize) -> Vec<f64> {
    let mut z = vec![0.0; rows.len() * width];
    for (i, row) in rows.iter().enumerate() {
        scaler.transform_into(row, &mut z[i * width..(i + 1) * width]);
    }
    z
}

/// The mean of each column of the `n` rows of `z` (zeros without rows).
fn column_means(z: &[f64], n: usize, width: usize) -> Vec<f64> {
    let mut mean = vec![0.0; width];
    if n > 0 {
        for i in 0..n {
            for j in 0..width {
                mean[j] += z[i * width + j];
            }
        }
        mean.iter_mut().for_each(|m| *m /= n as f64);
    }
    mean
}

/// The sample covariance of the `n` rows of `z` around `mean`: the upper
/// triangle is accumulated, then mirrored.
fn covariance(z: &[f64], n: usize, width: usize, mean: &[f64]) -> DMatrix<f64> {
    let denom = n.saturating_sub(1).max(1) as f64;
    let mut cov = DMatrix::<f64>::zeros(width, width);
    for i in 0..n {
        let row = &z[i * width..(i + 1) * width];
        for a in 0..width {
            let da = row[a] - mean[a];
            for b in a..width {
                cov[(a, b)] += da * (row[b] - mean[b]) / denom;
            }
        }
    }
    for a in 0..width {
        for b in 0..a {
            cov[(a, b)] = cov[(b, a)];
        }
    }
    cov
}

/// Indices of the eigenvalues, largest first.
fn largest_first(eigenvalues: &DVector<f64>, width: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..width).collect();
    // Largest first; ties broken by index so the fit is a pure function of its input.
    order.sort_by(|&a, &b| eigenvalues[b].total_cmp(&eigenvalues[a]).then(a.cmp(&b)));
    order
}

/// How many of the sorted eigenvalues `values` to keep: enough to explain
/// `explained_variance` of the total, none that is numerically zero.
fn retained_components(values: &[f64], explained_variance: f64) -> usize {
    let total: f64 = values.iter().sum();
    let largest = values.first().copied().unwrap_or(0.0);
    let mut retained = 0;
    let mut cumulative = 0.0;
    if total.is_finite() && total > 0.0 {
        for &v in values {
            if cumulative >= explained_variance * total || v <= largest * RELATIVE_EIGEN_FLOOR {
                break;
            }
            cumulative += v;
            retained += 1;
        }
    }
    retained
}

/// The first `retained` eigenvectors in `order`, as a `width` x `retained`
/// row-major matrix.
fn retained_loadings(
    eigenvectors: &DMatrix<f64>,
    order: &[usize],
    width: usize,
    retained: usize,
) -> Vec<f64> {
    let mut loadings = vec![0.0; width * retained];
    for j in 0..width {
        for (c, &col) in order.iter().take(retained).enumerate() {
            loadings[j * retained + c] = eigenvectors[(j, col)];
        }
    }
    loadings
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(data: &[[f64; 3]]) -> Vec<Vec<f64>> {
        data.iter().map(|r| r.to_vec()).collect()
    }

    fn wobbly(n: usize) -> Vec<Vec<f64>> {
        (0..n)
            .map(|i| {
                let x = i as f64;
                vec![(x * 0.7).sin(), (x * 1.3).cos(), (x * 0.37).sin() * 2.0]
            })
            .collect()
    }

    #[test]
    fn contributions_add_up_to_the_combined_score() {
        let model = PcaModel::fit(&wobbly(50), 3, 0.6);
        let s = model.score(&[3.0, -2.0, 1.0]);
        let total: f64 = s.contributions.iter().sum();
        assert!((total - s.combined).abs() < 1e-9 * s.combined.max(1.0));
    }

    #[test]
    fn collinear_readings_give_finite_scores_and_a_residual_that_sees_broken_collinearity() {
        let data: Vec<Vec<f64>> = (0..40)
            .map(|i| {
                let x = (i as f64 * 0.9).sin();
                vec![x, 2.0 * x, -x]
            })
            .collect();
        let model = PcaModel::fit(&data, 3, 0.99);
        assert_eq!(model.retained(), 1);
        let on = model.score(&[0.5, 1.0, -0.5]);
        let off = model.score(&[0.5, -1.0, -0.5]);
        assert!(on.combined.is_finite() && off.combined.is_finite());
        assert!(off.combined > 1e3 * on.combined.max(1e-6));
    }

    #[test]
    fn fewer_frames_than_readings_fit_a_finite_model() {
        let data = rows(&[[1.0, 2.0, 3.0], [2.0, 1.0, 0.5]]);
        let model = PcaModel::fit(&data, 3, 0.9);
        assert!(model.retained() <= 1);
        let s = model.score(&[1.5, 1.5, 2.0]);
        assert!(s.combined.is_finite() && s.combined >= 0.0);
    }

    #[test]
    fn all_constant_training_gives_zero_for_the_same_frame_and_finite_for_another() {
        let data = rows(&[[1.0, 1.0, 1.0]; 10]);
        let model = PcaModel::fit(&data, 3, 0.9);
        assert_eq!(model.retained(), 0);
        assert_eq!(model.score(&[1.0, 1.0, 1.0]).combined, 0.0);
        let moved = model.score(&[1.0, 9.0, 1.0e300]);
        assert!(moved.combined.is_finite() && moved.combined > 0.0);
    }

    #[test]
    fn refitting_the_same_frames_gives_an_identical_model() {
        let a = PcaModel::fit(&wobbly(60), 3, 0.8);
        let b = PcaModel::fit(&wobbly(60), 3, 0.8);
        assert_eq!(a, b);
    }
}
