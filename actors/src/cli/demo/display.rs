//! How the demo shows progress: on a terminal, one progress bar per monitor
//! while it trains and calibrates, turning into a live table row once it
//! monitors; otherwise (piped, as in tests) plain lines, a block of them
//! every few seconds, plus one line per event.

use std::{
    io::{IsTerminal, Write},
    time::{Duration, Instant},
};

use chrono::{DateTime, Utc};
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use radar::detector::Phase;

use super::report::Row;

/// How often plain output repeats the table.
const PLAIN_EVERY: Duration = Duration::from_secs(2);
const COLUMNS: &str =
    "monitor      fault                phase        frames   alarms  last checkpoint";

/// Where human output goes: stdout, or stderr when stdout carries JSON.
#[derive(Debug, Clone, Copy)]
pub struct Console {
    to_stderr: bool,
}

impl Console {
    pub fn new(json: bool) -> Self {
        Self { to_stderr: json }
    }

    pub fn is_terminal(self) -> bool {
        if self.to_stderr {
            std::io::stderr().is_terminal()
        } else {
            std::io::stdout().is_terminal()
        }
    }

    /// Prints one line; a closed pipe is not worth failing the demo over.
    pub fn line(self, text: &str) {
        let _ = if self.to_stderr {
            writeln!(std::io::stderr(), "{text}")
        } else {
            writeln!(std::io::stdout(), "{text}")
        };
    }
}

/// One monitor as the display names it.
pub struct Label {
    pub name: String,
    pub fault: String,
}

/// What the display shows at one instant.
pub struct Frame<'a> {
    pub now: DateTime<Utc>,
    /// Wall time since publishing began, and the simulated time reached.
    pub elapsed: Duration,
    pub simulated: u64,
    pub rows: &'a [Row],
}

pub enum Display {
    Live(Box<Live>),
    Plain(Plain),
}

impl Display {
    pub fn new(console: Console, labels: Vec<Label>, training: usize, calibration: usize) -> Self {
        if console.is_terminal() {
            Display::Live(Box::new(Live::new(console, labels, training, calibration)))
        } else {
            Display::Plain(Plain {
                console,
                labels,
                training,
                calibration,
                last_block: None,
                phases: Vec::new(),
            })
        }
    }

    /// An event line (an alarm, a note), printed above a live table.
    pub fn line(&self, text: &str) {
        match self {
            Display::Live(live) => {
                let _ = live.multi.println(text);
            }
            Display::Plain(plain) => plain.console.line(text),
        }
    }

    pub fn update(&mut self, frame: &Frame<'_>) {
        match self {
            Display::Live(live) => live.update(frame),
            Display::Plain(plain) => plain.update(frame),
        }
    }

    /// Leaves the last table on screen (or prints a last block).
    pub fn finish(&mut self, frame: &Frame<'_>) {
        match self {
            Display::Live(live) => {
                live.update(frame);
                for bar in &live.bars {
                    bar.finish();
                }
                for bar in &live.header {
                    bar.finish();
                }
            }
            Display::Plain(plain) => plain.block(frame),
        }
    }
}

fn clock(seconds: u64) -> String {
    format!(
        "{:02}:{:02}:{:02}",
        seconds / 3600,
        seconds / 60 % 60,
        seconds % 60
    )
}

fn progress(row: &Row, training: usize, calibration: usize) -> Option<(&'static str, u64, u64)> {
    match row.phase {
        None | Some(Phase::Training) => Some(("training", row.buffered.0 as u64, training as u64)),
        Some(Phase::Calibrating) => {
            Some(("calibrating", row.buffered.1 as u64, calibration as u64))
        }
        Some(Phase::Fitting) => Some(("fitting", calibration as u64, calibration as u64)),
        Some(Phase::Monitoring) => None,
    }
}

fn alarms_text(row: &Row) -> String {
    if row.alarm_open {
        format!("{} open", row.alarms)
    } else {
        row.alarms.to_string()
    }
}

pub struct Live {
    multi: MultiProgress,
    /// Simulated clock, then the title or the column names.
    header: [ProgressBar; 2],
    bars: Vec<ProgressBar>,
    /// Whether each bar shows a progress bar (else a table row).
    as_bar: Vec<bool>,
    training: usize,
    calibration: usize,
    bar_style: ProgressStyle,
    row_style: ProgressStyle,
}

impl Live {
    fn new(console: Console, labels: Vec<Label>, training: usize, calibration: usize) -> Self {
        let target = if console.to_stderr {
            ProgressDrawTarget::stderr_with_hz(5)
        } else {
            ProgressDrawTarget::stdout_with_hz(5)
        };
        let multi = MultiProgress::with_draw_target(target);
        let plain =
            ProgressStyle::with_template("{msg}").unwrap_or_else(|_| ProgressStyle::default_bar());
        let bar_style =
            ProgressStyle::with_template("{prefix} {msg:<12} [{bar:30.cyan/blue}] {pos:>4}/{len}")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> ");
        let header = [
            multi.add(ProgressBar::new(0).with_style(plain.clone())),
            multi.add(ProgressBar::new(0).with_style(plain.clone())),
        ];
        let bars = labels
            .iter()
            .map(|label| {
                multi.add(
                    ProgressBar::new(training as u64)
                        .with_style(bar_style.clone())
                        .with_prefix(format!("{:<12} {:<20}", label.name, label.fault)),
                )
            })
            .collect::<Vec<_>>();
        Self {
            as_bar: vec![true; bars.len()],
            multi,
            header,
            bars,
            training,
            calibration,
            bar_style,
            row_style: plain,
        }
    }

    fn update(&mut self, frame: &Frame<'_>) {
        let all_monitoring = frame
            .rows
            .iter()
            .all(|r| r.phase == Some(Phase::Monitoring));
        let title = if all_monitoring {
            COLUMNS.to_string()
        } else {
            format!(
                "Training ({} frames) and calibrating ({} frames); then a live table. Ctrl-C stops.",
                self.training, self.calibration
            )
        };
        self.header[0].set_message(format!(
            "simulated {}  ({:.0}s wall)",
            clock(frame.simulated),
            frame.elapsed.as_secs_f64()
        ));
        self.header[1].set_message(title);
        for (i, row) in frame.rows.iter().enumerate() {
            let bar = &self.bars[i];
            match progress(row, self.training, self.calibration) {
                Some((label, pos, len)) if row.state.is_none_or(|s| !s.is_terminal()) => {
                    if !self.as_bar[i] {
                        bar.set_style(self.bar_style.clone());
                        self.as_bar[i] = true;
                    }
                    bar.set_length(len);
                    bar.set_position(pos);
                    bar.set_message(label);
                }
                _ => {
                    if self.as_bar[i] {
                        bar.set_style(self.row_style.clone());
                        self.as_bar[i] = false;
                    }
                    let prefix = bar.prefix();
                    bar.set_message(format!(
                        "{prefix} {:<12} {:>6}   {:>6}  {}",
                        row.phase_text(),
                        row.frames,
                        alarms_text(row),
                        row.checkpoint_text(frame.now)
                    ));
                }
            }
        }
    }
}

pub struct Plain {
    console: Console,
    labels: Vec<Label>,
    training: usize,
    calibration: usize,
    last_block: Option<Instant>,
    /// The phase text last printed per monitor, to print changes once.
    phases: Vec<String>,
}

impl Plain {
    fn update(&mut self, frame: &Frame<'_>) {
        if self.phases.len() != frame.rows.len() {
            self.phases = vec![String::new(); frame.rows.len()];
        }
        for (i, row) in frame.rows.iter().enumerate() {
            let phase = row.phase_text();
            if phase != self.phases[i] {
                self.console.line(&format!(
                    "[{:>6.1}s] {} is {phase}",
                    frame.elapsed.as_secs_f64(),
                    self.labels[i].name
                ));
                self.phases[i] = phase;
            }
        }
        if self.last_block.is_none_or(|at| at.elapsed() >= PLAIN_EVERY) {
            self.block(frame);
        }
    }

    fn block(&mut self, frame: &Frame<'_>) {
        self.last_block = Some(Instant::now());
        for (label, row) in self.labels.iter().zip(frame.rows) {
            let phase = match progress(row, self.training, self.calibration) {
                Some((label, pos, len)) => format!("{label} {pos}/{len}"),
                None => row.phase_text(),
            };
            self.console.line(&format!(
                "[{:>6.1}s sim {}] {} fault={} phase={} frames={} alarms={} checkpoint={}",
                frame.elapsed.as_secs_f64(),
                clock(frame.simulated),
                label.name,
                label.fault.replace(' ', ""),
                phase.replace(' ', ":"),
                row.frames,
                alarms_text(row).replace(' ', ":"),
                row.checkpoint_text(frame.now).replace(' ', "_"),
            ));
        }
    }
}
