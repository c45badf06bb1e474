//! The fit: once the training and calibration frames are in, the level
//! model (robust spread, feature state, principal components, conformal
//! threshold), the change channels and the stuck-value channel are fitted
//! from them, and the kept frames are dropped. A pure function of those
//! frames and the settings, so a restored detector fits exactly as the
//! original would have.

use super::{Detector, Fitted, Phase, ewma};
use crate::detector::{
    Calibration, ChangeChannels, Features, PcaModel, RobustScaler, StuckChannel, pca::Scratch,
};

impl Detector {
    /// Fits the model from the kept frames and starts monitoring.
    pub(super) fn run_fit(&mut self) {
        // Training and calibration frames pass through the feature state in
        // arrival order, exactly as monitored frames will, and leave it where
        // monitoring starts.
        let level = |rows: &[Vec<f64>]| -> Vec<Vec<f64>> {
            rows.iter().map(|row| self.level_values(row)).collect()
        };
        let (level_training, level_calibration) = (level(&self.training), level(&self.calibration));
        let level_width = self.width - self.change_columns.len();
        let spread = RobustScaler::fit(&level_training, level_width).scale;
        let mut features = Features::new(
            self.settings.feature_smoothing,
            self.settings.level_tracking.clone(),
            &spread,
        );
        let training: Vec<Vec<f64>> = level_training
            .iter()
            .map(|row| features.next(row, false))
            .collect();
        let model = PcaModel::fit(&training, level_width, self.settings.explained_variance);
        let weight = self.settings.score_smoothing;
        let mut smoothed = None;
        let scores = level_calibration
            .iter()
            .map(|row| {
                let s = ewma(
                    smoothed,
                    model.score(&features.next(row, false)).combined,
                    weight,
                );
                smoothed = Some(s);
                s
            })
            .collect();
        let calibration = Calibration::new(scores, self.settings.false_alarm_rate);
        let change = self.settings.change.as_ref().map(|settings| {
            ChangeChannels::fit(
                settings,
                self.change_columns.clone(),
                &self.training,
                &self.calibration,
            )
        });
        let stuck = self
            .settings
            .stuck
            .as_ref()
            .map(|settings| StuckChannel::fit(settings, &self.training, &self.calibration));
        self.fitted = Some(Fitted {
            features,
            model,
            calibration,
            smoothed,
            change,
            stuck,
            scratch: Scratch::default(),
        });
        self.training = Vec::new();
        self.calibration = Vec::new();
        self.phase = Phase::Monitoring;
    }
}
