//! Robust per-reading standardization learned from the training frames.
//!
//! The centre is the median and the scale the MAD (scaled to agree with the
//! standard deviation under a normal law), so a handful of spikes in the
//! training window neither shift nor inflate the scale. Quantized sensors
//! (a value that sits on one level most of the time and jumps one step now
//! and then) have a MAD of zero or far below their real spread, so the scale
//! is the larger of the MAD and a trimmed mean absolute deviation around the
//! median (both scaled to the standard deviation of a normal law): the MAD
//! for ordinary noise, the trimmed mean when most values sit on one level.
//! Trimming the largest tenth keeps a few spikes from inflating it. A sensor that never moved in
//! training gets a unit scale: any later movement is then measured in its own
//! units, which is large against the other readings' noise and therefore
//! flagged, which is what a stuck-then-moving sensor deserves.

use serde::{Deserialize, Serialize};

/// MAD to standard deviation under a normal law: 1 / Phi^-1(3/4).
const MAD_TO_SD: f64 = 1.482_602_218_505_602;
/// Share of the absolute deviations the trimmed mean keeps: the largest
/// tenth (spikes, faults inside the training window) is dropped.
const TRIM_KEEP: f64 = 0.9;
/// Trimmed mean absolute deviation to standard deviation under a normal
/// law: 0.9 / (2 (phi(0) - phi(1.6449))), phi the standard normal density.
const TRIMMED_AD_TO_SD: f64 = 1.521_390_8;
/// Mean absolute deviation to standard deviation under a normal law: sqrt(pi/2).
const MEAN_AD_TO_SD: f64 = 1.253_314_137_315_500_3;
/// Standardized values are clamped here, so a wild reading cannot overflow
/// the squared statistics; a million robust deviations carry no more news.
pub const Z_LIMIT: f64 = 1.0e6;

/// How a reading's scale was obtained; reported so operators can see which
/// sensors were constant during training.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScaleSource {
    Mad,
    TrimmedMeanDeviation,
    MeanDeviation,
    ConstantInTraining,
}

/// Centre and scale per reading.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RobustScaler {
    pub centre: Vec<f64>,
    pub scale: Vec<f64>,
    pub source: Vec<ScaleSource>,
}

impl RobustScaler {
    /// Learns the scaler from finite rows of equal width (`width` columns).
    pub fn fit(rows: &[Vec<f64>], width: usize) -> Self {
        let mut centre = Vec::with_capacity(width);
        let mut scale = Vec::with_capacity(width);
        let mut source = Vec::with_capacity(width);
        let mut column = Vec::with_capacity(rows.len());
        for j in 0..width {
            column.clear();
            column.extend(rows.iter().map(|row| row[j]));
            let med = median(&mut column);
            let mut deviations: Vec<f64> = column.iter().map(|x| (x - med).abs()).collect();
            // `median` sorts the deviations, so the trimmed mean takes a prefix.
            let mad = median(&mut deviations) * MAD_TO_SD;
            let keep = ((deviations.len() as f64 * TRIM_KEEP) as usize).max(1);
            let trimmed = mean(&deviations[..keep.min(deviations.len())]) * TRIMMED_AD_TO_SD;
            // A step too rare to survive the trim still proves the sensor moves.
            let full = mean(&deviations) * MEAN_AD_TO_SD;
            let (s, src) = if mad >= trimmed && mad > 0.0 && mad.is_finite() {
                (mad, ScaleSource::Mad)
            } else if trimmed > 0.0 && trimmed.is_finite() {
                (trimmed, ScaleSource::TrimmedMeanDeviation)
            } else if full > 0.0 && full.is_finite() {
                (full, ScaleSource::MeanDeviation)
            } else {
                (1.0, ScaleSource::ConstantInTraining)
            };
            centre.push(med);
            scale.push(s);
            source.push(src);
        }
        Self {
            centre,
            scale,
            source,
        }
    }

    /// Standardizes one finite row into `out`.
    pub fn transform_into(&self, row: &[f64], out: &mut [f64]) {
        for (j, o) in out.iter_mut().enumerate() {
            *o = ((row[j] - self.centre[j]) / self.scale[j]).clamp(-Z_LIMIT, Z_LIMIT);
        }
    }
}

fn mean(values: &[f64]) -> f64 {
    if values.is_empty() {
        0.0
    } else {
        values.iter().sum::<f64>() / values.len() as f64
    }
}

/// Median of finite values (0 for an empty slice); reorders the slice.
pub fn median(values: &mut [f64]) -> f64 {
    let n = values.len();
    if n == 0 {
        return 0.0;
    }
    values.sort_unstable_by(f64::total_cmp);
    if n % 2 == 1 {
        values[n / 2]
    } else {
        0.5 * (values[n / 2 - 1] + values[n / 2])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_mad_ignore_a_single_spike() {
        let mut rows: Vec<Vec<f64>> = (0..19).map(|i| vec![f64::from(i)]).collect();
        rows.push(vec![1.0e6]);
        let scaler = RobustScaler::fit(&rows, 1);
        assert_eq!(scaler.centre[0], 9.5);
        // Deviations 0.5, 0.5, 1.5, ... : their median is 5.
        assert!((scaler.scale[0] - 5.0 * MAD_TO_SD).abs() < 1e-9);
        assert_eq!(scaler.source[0], ScaleSource::Mad);
    }

    #[test]
    fn quantized_sensor_with_zero_mad_falls_back_to_mean_absolute_deviation() {
        let rows: Vec<Vec<f64>> = [32.0, 32.0, 32.0, 33.0, 32.0]
            .iter()
            .map(|x| vec![*x])
            .collect();
        let scaler = RobustScaler::fit(&rows, 1);
        // Deviations 0, 0, 0, 0, 1: the trimmed mean keeps four zeros, so the
        // full mean deviation is the last resort before "constant".
        assert_eq!(scaler.source[0], ScaleSource::MeanDeviation);
        assert!((scaler.scale[0] - 0.2 * MEAN_AD_TO_SD).abs() < 1e-12);
        let rows: Vec<Vec<f64>> = (0..20)
            .map(|i| vec![if i % 4 == 0 { 33.0 } else { 32.0 }])
            .collect();
        let scaler = RobustScaler::fit(&rows, 1);
        assert_eq!(scaler.source[0], ScaleSource::TrimmedMeanDeviation);
        assert!((scaler.scale[0] - 3.0 / 18.0 * TRIMMED_AD_TO_SD).abs() < 1e-12);
    }

    #[test]
    fn constant_sensor_gets_unit_scale_and_finite_standardized_values() {
        let rows = vec![vec![5.0]; 10];
        let scaler = RobustScaler::fit(&rows, 1);
        assert_eq!(scaler.source[0], ScaleSource::ConstantInTraining);
        assert_eq!(scaler.scale[0], 1.0);
        let mut z = [0.0];
        scaler.transform_into(&[7.5], &mut z);
        assert_eq!(z[0], 2.5);
        scaler.transform_into(&[f64::MAX], &mut z);
        assert_eq!(z[0], Z_LIMIT);
    }
}
