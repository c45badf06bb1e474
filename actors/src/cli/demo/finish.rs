//! The end of a run: one line on why it stopped early, the summary built
//! from what ran, printed as a table, and the exit code.

use std::{process::ExitCode, time::Instant};

use chrono::Utc;
use radar::telemetry::Board;
use radar_demo::{PublishReport, READINGS};

use super::{
    DemoArgs, Ended,
    display::{Console, Display},
    report::{MonitorSummary, Start, Summary, Tracked},
    storage::{Mode, Storage},
};
use crate::worker::WorkerOutcome;

/// One line on why the run stopped before the plant finished, if it did.
pub(super) fn say_why_it_ended(display: &Display, ended: &Ended) {
    match ended {
        Ended::Signal(signal) => display.line(&format!(
            "{signal}: stopping gracefully (plant first, then each monitor's last snapshot)."
        )),
        Ended::Published(Err(error)) => display.line(&format!("The plant stopped: {error}")),
        Ended::NothingRunning => display.line("No monitor could start; see the reasons above."),
        Ended::Worker(outcome) => display.line(&format!("The worker ended early: {outcome:?}.")),
        Ended::Published(Ok(_)) => {}
    }
}

/// What a finished run leaves for its summary.
pub(super) struct Ran<'a> {
    pub(super) args: &'a DemoArgs,
    pub(super) storage: &'a Storage,
    pub(super) board: &'a Board,
    pub(super) report: Option<&'a PublishReport>,
    pub(super) published_at: Instant,
    pub(super) stop_requested_at: chrono::DateTime<Utc>,
    pub(super) outcome: &'a WorkerOutcome,
}

impl Ran<'_> {
    pub(super) fn summarize(&self, tracked: &mut [Tracked]) -> Summary {
        let mode = &self.storage.mode;
        Summary {
            database_mode: match mode {
                Mode::Postgres { .. } => "postgres",
                Mode::Disabled { .. } => "disabled",
            },
            database: match mode {
                Mode::Postgres { database, .. } => Some(database.clone()),
                Mode::Disabled { .. } => None,
            },
            database_disabled_reason: match mode {
                Mode::Disabled { reason } => Some(reason.clone()),
                Mode::Postgres { .. } => None,
            },
            seed: self.args.seed,
            speed: self.args.speed,
            wall_seconds: self.published_at.elapsed().as_secs_f64(),
            simulated_seconds: self.report.map_or(0, |r| r.ticks),
            monitors: tracked
                .iter_mut()
                .map(|t| t.summarize(self.board, self.report, self.stop_requested_at))
                .collect(),
            outcome: match self.outcome {
                WorkerOutcome::Stopped => "stopped".to_string(),
                other => format!("{other:?}"),
            },
        }
    }
}

/// Success only when the worker stopped cleanly after every monitor started
/// and the plant published to the end.
pub(super) fn exit_code(summary: &Summary, outcome: WorkerOutcome, published: bool) -> ExitCode {
    let all_started = summary
        .monitors
        .iter()
        .all(|m| m.start != Start::NotStarted);
    match outcome {
        WorkerOutcome::Stopped if all_started && published => ExitCode::SUCCESS,
        WorkerOutcome::Stopped => ExitCode::FAILURE,
        other => other.exit_code(),
    }
}

pub(super) fn print_summary(console: Console, summary: &Summary) {
    let database = match (&summary.database, &summary.database_disabled_reason) {
        (Some(db), _) => format!("PostgreSQL database {db}"),
        (None, _) => "database writes disabled".to_string(),
    };
    console.line("");
    console.line(&format!(
        "Summary: {:.1} s wall, {} simulated seconds at {}x, {database}; worker {}.",
        summary.wall_seconds, summary.simulated_seconds, summary.speed, summary.outcome
    ));
    console.line(
        "monitor      fault                start      frames  alarms  faults caught  restore gap  last snapshot",
    );
    for m in &summary.monitors {
        console.line(&summary_row(m));
    }
    for m in &summary.monitors {
        if let Some(error) = &m.error {
            console.line(&format!("{}: {error}", m.name));
        }
        if let (Start::Restored, Some(processed)) = (m.start, m.restored_processed) {
            let gap = m
                .possible_gap_seconds
                .map_or("not measured (no new frame)".to_string(), |s| {
                    format!("{s:.1} s")
                });
            console.line(&format!(
                "{} restored {processed} processed frames from its snapshot; possible coverage gap {gap} \
                 (restart_rollback: input between the last snapshot and the first new frame was not seen; the live stream is not replayed).",
                m.name
            ));
        }
    }
}

fn summary_row(m: &MonitorSummary) -> String {
    let fault = match m.fault {
        Some(kind) => format!("{} ({})", kind.as_str(), READINGS[kind.reading()].name),
        None => "none".to_string(),
    };
    let caught = if m.faults.is_empty() {
        if m.fault.is_some() {
            "not yet".to_string()
        } else {
            "-".to_string()
        }
    } else {
        format!(
            "{} of {}",
            m.faults.iter().filter(|f| f.detected).count(),
            m.faults.len()
        )
    };
    let start = match m.start {
        Start::Fresh => "fresh",
        Start::Restored => "restored",
        Start::NotStarted => "not started",
    };
    let gap = m
        .possible_gap_seconds
        .map_or("-".to_string(), |s| format!("{s:.1} s"));
    let snapshot = match m.final_checkpoint {
        Some(true) => "committed at stop",
        Some(false) => "NOT committed at stop",
        None => "off (no database)",
    };
    format!(
        "{:<12} {:<20} {:<10} {:>6}  {:>6}  {:<13}  {:<11}  {snapshot}",
        m.name, fault, start, m.frames, m.alarms, caught, gap
    )
}
