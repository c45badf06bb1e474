//! Ingesting a whole row of observations at once, and the fit that follows
//! a step when it is due: the two entry points that `radar detect`, the
//! demo and the benchmarks share with the worker's model thread.

use chrono::{DateTime, Utc};

use super::{CoreError, MonitorCore, Step};
use crate::align::{Frame, Row, RowFrame};

impl MonitorCore {
    /// Ingests `row` (observations of distinct readings sharing their
    /// clocks) as [`MonitorCore::ingest`] on each of its observations would,
    /// when they are sure to complete the row's own frame: the same frame,
    /// verdict, counters, coverage and watermarks, without a partial frame.
    /// The outcome fills `step`, the caller's, in place: a long replay
    /// neither builds nor moves a step per row, and the frame a previous
    /// row left in `step` is taken back for this row's. `false`, with
    /// nothing changed but `step` emptied, when they are not sure to
    /// (something is held, the row is not newer than every watermark, late,
    /// from the future, or the model is stopped): ingest them one by one
    /// then.
    pub fn ingest_row(&mut self, row: Row<'_>, now: DateTime<Utc>, step: &mut Step) -> bool {
        if let Some(frame) = step.frame.take() {
            self.aligner.recycle(frame);
        }
        step.clear();
        if self.suspended || self.quarantine().is_some() {
            return false;
        }
        let Some(RowFrame { frame, optional }) = self.aligner.admit_row(row, now) else {
            return false;
        };
        let counters = &mut self.counters;
        counters.observations_received += row.readings.len() as u64;
        // Optional readings are accepted on their own; the frame's values
        // are counted when the engine takes the frame.
        counters.observations_accepted += optional as u64;
        self.offer(frame, step);
        true
    }

    /// Takes back a frame that a step returned, once the caller is done
    /// with it: the next [`MonitorCore::ingest_row`] reuses its storage.
    pub fn recycle(&mut self, frame: Frame) {
        self.aligner.recycle(frame);
    }

    /// Runs the static fit if `step` made it due, after `checkpoint` has
    /// saved the state that still holds the training and calibration
    /// frames (so a fit cut short by a crash reruns from them). Returns the
    /// fit's step, or `None` when no fit was due. The one "checkpoint, then
    /// fit" of every runtime; one that keeps no snapshot passes
    /// [`no_snapshot`].
    pub fn fit_when_due<E: From<CoreError>>(
        &mut self,
        step: &Step,
        checkpoint: impl FnOnce(&MonitorCore) -> Result<(), E>,
    ) -> Result<Option<Step>, E> {
        if !step.fit_due {
            return Ok(None);
        }
        checkpoint(self)?;
        Ok(Some(self.fit()?))
    }
}

/// The checkpoint of a runtime that keeps no snapshot (`radar detect`, the
/// demo's offline run, a benchmark's model): nothing to save before a fit.
pub fn no_snapshot(_: &MonitorCore) -> Result<(), CoreError> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use chrono::{DateTime, Duration, TimeZone, Utc};
    use uuid::Uuid;

    use super::no_snapshot;
    use crate::{
        align::{Frame, Observation, Row},
        config::MonitorConfig,
        detector::{Phase, Scored},
        runtime::{MonitorCore, Step, Verdict},
        store::PendingResults,
    };

    /// Required `a`, `b`, `c` and optional `o`; a short warm-up so that
    /// most frames are scored, and alarms that open and close quickly.
    const MONITOR: &str = r#"
name = "rows"
[[readings]]
name = "b"
topic = "t/b"
[[readings]]
name = "o"
topic = "t/o"
required = false
[[readings]]
name = "a"
topic = "t/a"
[[readings]]
name = "c"
topic = "t/c"
[alignment]
freshness_ms = 4000
max_age_ms = 20000
future_tolerance_ms = 2000
max_skew_ms = 1000
[detector]
training_frames = 20
calibration_frames = 10
false_alarm_rate = 0.1
[detector.alarm]
open_k = 1
open_n = 1
close_m = 1
"#;

    fn at(ms: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_790_000_000, 0).unwrap() + Duration::milliseconds(ms)
    }

    /// What a row's steps showed, merged: frames, verdicts, scores, phase
    /// changes, results, and whether a fit or a coverage change was due.
    #[derive(Debug, Default, PartialEq)]
    struct Seen {
        frames: Vec<Frame>,
        verdicts: Vec<Verdict>,
        scored: Vec<Scored>,
        phases: Vec<Phase>,
        results: PendingResults,
        fit_due: bool,
        coverage_changed: bool,
    }

    impl Seen {
        /// Adds `step`, fitting `core` when the step made the fit due.
        fn add(&mut self, core: &mut MonitorCore, step: &Step) {
            if let Some(fit) = core.fit_when_due(step, no_snapshot).unwrap() {
                self.phases.extend(fit.phase_changed);
            }
            self.frames.extend(step.frame.clone());
            self.verdicts.extend(step.verdict.clone());
            self.scored.extend(step.scored.clone());
            self.phases.extend(step.phase_changed);
            self.results
                .alarms
                .extend(step.results.alarms.iter().cloned());
            self.results
                .evidence
                .extend(step.results.evidence.iter().cloned());
            self.fit_due |= step.fit_due;
            self.coverage_changed |= step.coverage_changed;
        }
    }

    /// One row of a generated stream: readings with their values and the
    /// row's source, receipt and processing times.
    struct TestRow {
        readings: Vec<usize>,
        values: Vec<f64>,
        ts: DateTime<Utc>,
        received_at: DateTime<Utc>,
        now: DateTime<Utc>,
    }

    /// Mostly punctual complete rows, and among them partial rows, rows in
    /// any column order, repeated and backward times, late, early and
    /// queued rows, a repeated reading and a value that is not finite.
    fn stream(seed: u64, rows: usize) -> Vec<TestRow> {
        let mut state = seed | 1;
        let mut next = move |n: u64| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (state >> 33) % n
        };
        let mut t = 0i64;
        (0..rows)
            .map(|i| {
                t += [0, -1500, 30_000, 300, 1000, 1000, 1000, 1000][next(8) as usize];
                let mut readings: Vec<usize> = vec![2, 0, 3, 1];
                match next(12) {
                    0 => readings.truncate(2),
                    1 => readings.truncate(3),
                    2 => readings.reverse(),
                    3 => readings.push(0),
                    _ => {}
                }
                let values = readings
                    .iter()
                    .map(|&r| match next(60) {
                        0 => f64::NAN,
                        1 => 40.0,
                        _ => (i as f64 * (0.3 + r as f64)).sin() + r as f64,
                    })
                    .collect();
                let ts = at(t);
                let received_at =
                    ts + Duration::milliseconds([0, 0, 0, -3000, 6000][next(5) as usize]);
                let queued = [0, 0, 0, 500, 25_000][next(5) as usize];
                TestRow {
                    readings,
                    values,
                    ts,
                    received_at,
                    now: received_at + Duration::milliseconds(queued),
                }
            })
            .collect()
    }

    /// Ingests `row` one observation at a time, in its order.
    fn ingest_each(core: &mut MonitorCore, row: &TestRow) -> Seen {
        let mut seen = Seen::default();
        for (&reading, &value) in row.readings.iter().zip(&row.values) {
            let observation = Observation {
                reading,
                ts: row.ts,
                value,
                received_at: row.received_at,
            };
            let step = core.ingest(Ok(observation), row.now);
            seen.add(core, &step);
        }
        seen
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

        #[test]
        fn a_row_at_once_changes_what_its_observations_one_by_one_change(
            seed in proptest::prelude::any::<u64>(),
        ) {
            let config = MonitorConfig::from_toml(MONITOR).unwrap();
            let id = Uuid::from_u128(9);
            let mut rows_at_once = MonitorCore::fresh(id, config.clone(), at(0)).unwrap();
            let mut one_by_one = MonitorCore::fresh(id, config, at(0)).unwrap();
            let mut taken = 0;
            let mut left_over = Step::default();
            for (i, row) in stream(seed, 240).iter().enumerate() {
                if i % 97 == 50 {
                    proptest::prop_assert_eq!(rows_at_once.suspend(row.now), one_by_one.suspend(row.now));
                }
                if i % 97 == 60 {
                    proptest::prop_assert_eq!(rows_at_once.resume(row.now), one_by_one.resume(row.now));
                }
                let whole = Row {
                    readings: &row.readings,
                    values: &row.values,
                    ts: row.ts,
                    received_at: row.received_at,
                };
                // A step left over from the previous row, holding its frame,
                // or storage handed back with stale values of any length.
                let mut step = std::mem::take(&mut left_over);
                if i % 3 == 0 {
                    rows_at_once.recycle(Frame { ts: row.ts, values: vec![f64::NAN; i % 7] });
                }
                let fast = if rows_at_once.ingest_row(whole, row.now, &mut step) {
                    taken += 1;
                    let mut seen = Seen::default();
                    seen.add(&mut rows_at_once, &step);
                    seen
                } else {
                    proptest::prop_assert!(step.frame.is_none() && step.scored.is_none());
                    ingest_each(&mut rows_at_once, row)
                };
                left_over = step;
                let slow = ingest_each(&mut one_by_one, row);
                proptest::prop_assert_eq!(&fast, &slow, "row {}", i);
                proptest::prop_assert_eq!(rows_at_once.counters(), one_by_one.counters());
                proptest::prop_assert_eq!(
                    rows_at_once.aligner().held_values(),
                    one_by_one.aligner().held_values()
                );
            }
            proptest::prop_assert!(taken > 24, "only {} rows taken at once", taken);
            proptest::prop_assert!(rows_at_once.phase() == Phase::Monitoring);
            proptest::prop_assert_eq!(
                rows_at_once.managed_state().unwrap(),
                one_by_one.managed_state().unwrap()
            );
        }
    }

    #[test]
    fn the_fit_runs_after_the_checkpoint_saw_the_frames_it_fits_on() {
        let config = MonitorConfig::from_toml(MONITOR).unwrap();
        let mut core = MonitorCore::fresh(Uuid::from_u128(3), config, at(0)).unwrap();
        let mut saved = Vec::new();
        for i in 0..30 {
            let values = [1.0 + (i as f64).sin(), 2.0, 3.0 + (i as f64).cos()];
            let row = Row {
                readings: &[0, 2, 3],
                values: &values,
                ts: at(1000 * i),
                received_at: at(1000 * i),
            };
            let mut step = Step::default();
            assert!(core.ingest_row(row, at(1000 * i), &mut step));
            let fit = core
                .fit_when_due(&step, |core| {
                    // What the checkpoint saves still holds every frame.
                    let detector = core.detector().unwrap();
                    saved.push((core.phase(), detector.buffered_frames()));
                    Ok::<_, crate::runtime::CoreError>(())
                })
                .unwrap();
            assert_eq!(fit.is_some(), i == 29, "frame {i}");
        }
        assert_eq!(
            saved,
            vec![(Phase::Fitting, (20, 10))],
            "one checkpoint, before the one fit"
        );
        assert_eq!(core.phase(), Phase::Monitoring);
    }
}
