//! The demo while it runs: the display refreshed, notices taken, and the
//! wind-down (plant first, then the worker's last snapshots).

use std::time::{Duration, Instant};

use chrono::Utc;
use radar::telemetry::Board;
use radar_demo::{CALIBRATION_FRAMES, PublishReport, READINGS, TRAINING_FRAMES};
use tokio::sync::{broadcast, watch};

use super::{
    DRAIN_DEADLINE, Ended, REFRESH, ReportReceiver,
    display::{Console, Display, Frame, Label},
    report::Tracked,
    stop_publisher,
};
use crate::worker::{Notice, RunningWorker, WorkerOutcome, shutdown_signal};

/// The demo while it runs: the display, the trackers and what they read.
pub(super) struct Live {
    pub(super) display: Display,
    pub(super) tracked: Vec<Tracked>,
    pub(super) board: Board,
    pub(super) notices: broadcast::Receiver<Notice>,
    pub(super) worker: RunningWorker,
    /// When the plant started publishing.
    pub(super) published_at: Instant,
}

impl Live {
    /// The display starts here; the plant's clock with it.
    pub(super) fn new(
        console: Console,
        tracked: Vec<Tracked>,
        board: Board,
        notices: broadcast::Receiver<Notice>,
        worker: RunningWorker,
    ) -> Self {
        let labels = tracked
            .iter()
            .map(|t| Label {
                name: t.name.clone(),
                fault: t.fault_text(),
            })
            .collect();
        Self {
            display: Display::new(console, labels, TRAINING_FRAMES, CALIBRATION_FRAMES),
            tracked,
            board,
            notices,
            worker,
            published_at: Instant::now(),
        }
    }

    /// Refreshes the display and takes notices until the plant, a signal or
    /// the worker ends the run.
    pub(super) async fn main_loop(&mut self, report_rx: &mut ReportReceiver, speed: f64) -> Ended {
        let mut refresh = tokio::time::interval(REFRESH);
        let signal = shutdown_signal();
        tokio::pin!(signal);
        let published_at = self.published_at;
        loop {
            tokio::select! {
                _ = refresh.tick() => {
                    let now = Utc::now();
                    let rows: Vec<_> =
                        self.tracked.iter().map(|t| t.row(&self.board, now)).collect();
                    self.display.update(&Frame {
                        now,
                        elapsed: published_at.elapsed(),
                        simulated: (published_at.elapsed().as_secs_f64() * speed) as u64,
                        rows: &rows,
                    });
                }
                notice = self.notices.recv() => match notice {
                    Ok(notice) => {
                        take_notice(&notice, &mut self.tracked, &self.display, published_at, speed)
                    }
                    Err(broadcast::error::RecvError::Lagged(missed)) => {
                        self.display
                            .line(&format!("(the display fell behind and missed {missed} notices)"));
                    }
                    Err(broadcast::error::RecvError::Closed) => {}
                },
                report = &mut *report_rx => {
                    return Ended::Published(report.unwrap_or_else(|_| {
                        Err("the publisher thread ended without a report".to_string())
                    }));
                }
                signal = &mut signal => return Ended::Signal(signal),
                outcome = self.worker.ended() => return Ended::Worker(outcome),
            }
        }
    }

    /// Stops the plant, lets the worker take in what was published, then
    /// stops the worker gracefully (each monitor commits its last snapshot)
    /// and draws the last frame. Returns the plant's report, how the worker
    /// ended and when it was asked to stop.
    pub(super) async fn wind_down(
        &mut self,
        ended: Ended,
        stop_tx: &watch::Sender<bool>,
        report_rx: Option<ReportReceiver>,
    ) -> (Option<PublishReport>, WorkerOutcome, chrono::DateTime<Utc>) {
        let (published, worker_ended) = match ended {
            Ended::Published(result) => (Some(result), None),
            Ended::Worker(outcome) => (stop_publisher(stop_tx, report_rx).await, Some(outcome)),
            Ended::Signal(_) | Ended::NothingRunning => {
                (stop_publisher(stop_tx, report_rx).await, None)
            }
        };
        let report = match published {
            Some(Ok(report)) => Some(report),
            Some(Err(e)) => {
                self.display
                    .line(&format!("The plant publisher failed: {e}"));
                None
            }
            None => None,
        };
        if let Some(report) = &report {
            drain(&mut self.tracked, report, &mut self.notices, &self.display).await;
        }
        let stop_requested_at = Utc::now();
        let outcome = match worker_ended {
            Some(outcome) => outcome,
            None => self.worker.stop().await,
        };
        take_notices(
            &mut self.notices,
            &mut self.tracked,
            &self.display,
            self.published_at,
            0.0,
        );
        let now = Utc::now();
        let rows: Vec<_> = self
            .tracked
            .iter()
            .map(|t| t.row(&self.board, now))
            .collect();
        self.display.finish(&Frame {
            now,
            elapsed: self.published_at.elapsed(),
            simulated: report.as_ref().map_or(0, |r| r.ticks),
            rows: &rows,
        });
        (report, outcome, stop_requested_at)
    }
}

/// Waits (briefly) until every running monitor has taken in every message
/// the plant published, so the summary covers the whole run.
async fn drain(
    tracked: &mut [Tracked],
    report: &PublishReport,
    notices: &mut broadcast::Receiver<Notice>,
    display: &Display,
) {
    let per_monitor = report.ticks * READINGS.len() as u64;
    let deadline = Instant::now() + DRAIN_DEADLINE;
    let mut poll = tokio::time::interval(Duration::from_millis(50));
    loop {
        poll.tick().await;
        let done = tracked.iter().all(|t| {
            t.watch
                .as_ref()
                .is_none_or(|w| w.model.borrow().consumed >= per_monitor)
        });
        take_notices(notices, tracked, display, Instant::now(), 0.0);
        if done || Instant::now() >= deadline {
            return;
        }
    }
}

fn take_notices(
    notices: &mut broadcast::Receiver<Notice>,
    tracked: &mut [Tracked],
    display: &Display,
    published_at: Instant,
    speed: f64,
) {
    loop {
        match notices.try_recv() {
            Ok(notice) => take_notice(&notice, tracked, display, published_at, speed),
            Err(broadcast::error::TryRecvError::Lagged(_)) => continue,
            Err(_) => return,
        }
    }
}

fn take_notice(
    notice: &Notice,
    tracked: &mut [Tracked],
    display: &Display,
    published_at: Instant,
    speed: f64,
) {
    let id = match notice {
        Notice::Flagged { monitor_id, .. }
        | Notice::AlarmOpened { monitor_id, .. }
        | Notice::AlarmClosed { monitor_id, .. } => *monitor_id,
    };
    let Some(t) = tracked.iter_mut().find(|t| t.id == id) else {
        return;
    };
    let name = t.name.clone();
    let fault = t.fault_text();
    let simulated = if speed > 0.0 {
        format!(
            " (simulated {:.0} s)",
            published_at.elapsed().as_secs_f64() * speed
        )
    } else {
        String::new()
    };
    if let Some(alarm) = t.take(notice) {
        display.line(&format!(
            "ALARM {name} [fault: {fault}] #{} opened at {}{simulated}, peak score {:.1}; top readings: {}",
            alarm.seq,
            alarm.opened_at.format("%H:%M:%S%.3f"),
            alarm.peak_score,
            alarm.readings_text()
        ));
    } else if let Notice::AlarmClosed {
        seq, peak_score, ..
    } = notice
    {
        display.line(&format!(
            "{name}: alarm #{seq} closed{simulated}, peak score {peak_score:.1}"
        ));
    }
}
