//! The ingest scenario's settings and what it measured.

use std::time::Duration;

use rumqttc::QoS;

use crate::stats;

#[derive(Debug, Clone)]
pub struct IngestParams {
    pub monitors: usize,
    pub readings: usize,
    /// Messages per measured run, over all monitors.
    pub messages: u64,
    pub reps: usize,
    /// How often the consumers' counts are read.
    pub poll: Duration,
    pub qos: QoS,
}

impl IngestParams {
    /// Frames each monitor receives in one measured run.
    pub fn frames_per_monitor(&self) -> usize {
        let per_frame = (self.monitors * self.readings).max(1) as u64;
        (self.messages / per_frame).max(1) as usize
    }

    /// Messages one measured run publishes.
    pub fn run_messages(&self) -> u64 {
        (self.frames_per_monitor() * self.monitors * self.readings) as u64
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Consumer {
    Product,
    Bare,
}

impl Consumer {
    pub fn label(self) -> &'static str {
        match self {
            Self::Product => "radar worker",
            Self::Bare => "bare rumqttc",
        }
    }
}

/// One measured run of one consumer.
#[derive(Debug, Clone)]
pub struct RunResult {
    pub consumer: Consumer,
    pub rep: usize,
    /// The consumer was paused (SIGSTOP) while the run was published and
    /// measured draining the broker's backlog after SIGCONT; otherwise it
    /// consumed while the publisher published.
    pub backlog: bool,
    /// Observations the consumer counted during the run.
    pub observations: u64,
    /// Frames the product emitted (the bare consumer: observations divided
    /// by readings, the frames it would have made).
    pub frames: u64,
    /// First publish to the first poll that found every message consumed.
    pub elapsed: Duration,
    /// First publish to the broker's acknowledgement of the last message.
    pub publish_elapsed: Duration,
    pub complete: bool,
    pub load_1m: f64,
    /// CPU the consuming process (worker or bare subscribers) used.
    pub consumer_cpu: Option<Duration>,
    /// Observations the product rejected during the run (should be 0).
    pub rejected: u64,
    pub flagged: u64,
    pub checkpoints: u64,
    /// Largest worker RSS seen during the run, KiB (product only).
    pub peak_rss_kib: Option<u64>,
    /// How often the worker's model threads went to sleep during the run
    /// (product only; each sleep is followed by a wake-up for the next
    /// message).
    pub model_sleeps: Option<u64>,
}

impl RunResult {
    pub fn observations_per_s(&self) -> f64 {
        self.observations as f64 / self.elapsed.as_secs_f64()
    }

    pub fn frames_per_s(&self) -> f64 {
        self.frames as f64 / self.elapsed.as_secs_f64()
    }

    /// Model-thread sleeps per frame the run made (product only).
    pub fn sleeps_per_frame(&self) -> Option<f64> {
        let sleeps = self.model_sleeps?;
        (self.frames > 0).then(|| sleeps as f64 / self.frames as f64)
    }
}

/// Everything one `ingest` scenario measured for one K.
#[derive(Debug, Clone)]
pub struct IngestReport {
    pub params: IngestParams,
    pub runs: Vec<RunResult>,
    /// Worker start to ready (all monitors connected), per start.
    pub startups: Vec<Duration>,
    /// Worker RSS after warmup, before a measured run (KiB).
    pub settled_rss_kib: Vec<u64>,
    /// How long one `/metrics` scrape took with every monitor loaded.
    pub scrape: Option<Duration>,
    /// How often both consumers' counts were read in measured runs.
    pub interval: Duration,
}

impl IngestReport {
    /// Product over bare observations per second, per repetition.
    pub fn ratios(&self, backlog: bool) -> Vec<f64> {
        (0..self.params.reps)
            .filter_map(|rep| {
                let of = |c| {
                    self.runs.iter().find(|r| {
                        r.rep == rep && r.consumer == c && r.complete && r.backlog == backlog
                    })
                };
                Some(
                    of(Consumer::Product)?.observations_per_s()
                        / of(Consumer::Bare)?.observations_per_s(),
                )
            })
            .collect()
    }

    pub fn median_rate(&self, consumer: Consumer, backlog: bool) -> Option<f64> {
        let rates: Vec<f64> = self
            .runs
            .iter()
            .filter(|r| r.consumer == consumer && r.complete && r.backlog == backlog)
            .map(RunResult::observations_per_s)
            .collect();
        stats::median(&rates)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(monitors: usize, messages: u64) -> IngestParams {
        IngestParams {
            monitors,
            readings: 2,
            messages,
            reps: 2,
            poll: Duration::from_millis(100),
            qos: QoS::AtLeastOnce,
        }
    }

    #[test]
    fn a_run_sends_whole_frames_to_every_monitor() {
        let p = params(1000, 200_000);
        assert_eq!(p.frames_per_monitor(), 100);
        assert_eq!(p.run_messages(), 200_000);
        let p = params(3, 100);
        assert_eq!(p.frames_per_monitor(), 16);
        assert_eq!(p.run_messages(), 96);
        assert_eq!(params(1000, 10).frames_per_monitor(), 1);
    }

    fn run(
        consumer: Consumer,
        rep: usize,
        observations: u64,
        secs: u64,
        complete: bool,
    ) -> RunResult {
        RunResult {
            consumer,
            rep,
            backlog: false,
            observations,
            frames: observations / 2,
            elapsed: Duration::from_secs(secs),
            publish_elapsed: Duration::from_secs(secs),
            complete,
            load_1m: 0.0,
            consumer_cpu: None,
            rejected: 0,
            flagged: 0,
            checkpoints: 0,
            peak_rss_kib: None,
            model_sleeps: None,
        }
    }

    #[test]
    fn ratios_pair_the_runs_of_one_repetition_and_skip_incomplete_ones() {
        let report = IngestReport {
            params: params(1, 100),
            runs: vec![
                run(Consumer::Product, 0, 100, 2, true),
                run(Consumer::Bare, 0, 100, 1, true),
                run(Consumer::Bare, 1, 100, 1, true),
                run(Consumer::Product, 1, 50, 10, false),
            ],
            startups: vec![],
            settled_rss_kib: vec![],
            scrape: None,
            interval: Duration::from_millis(100),
        };
        assert_eq!(report.ratios(false), vec![0.5]);
        assert!(report.ratios(true).is_empty());
        assert_eq!(report.median_rate(Consumer::Bare, false), Some(100.0));
        assert_eq!(report.median_rate(Consumer::Product, false), Some(50.0));
    }
}
