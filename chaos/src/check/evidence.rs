//! (b) No committed evidence lost; (c) no duplicate evidence.
//!
//! Committed evidence is what the audit saw committed and what the run read
//! from the table while it went on; all of it must still be there at the
//! end, unchanged (same score, same writer signature). Evidence rows are
//! never updated or deleted, and alarms are never deleted.
//!
//! A frame has at most one evidence row and was committed at most once, and
//! every evidence row and alarm belongs to a frame the run published for
//! that monitor.

use std::collections::BTreeMap;

use uuid::Uuid;

use super::{Observations, Op, ResultRow, Table, Ts, Verdict, ms, short};

pub fn no_committed_evidence_lost(obs: &Observations) -> Verdict {
    let mut v = Verdict::new("(b) no committed evidence lost");
    let evidence = index(&obs.final_evidence);
    let alarms = index(&obs.final_alarms);
    for w in &obs.writes {
        let key = w.frame_ts.map(|ts| (w.monitor, ts));
        match (w.table, w.op) {
            (Table::Evidence, Op::Insert) => {
                let kept = key.and_then(|k| evidence.get(&k));
                v.expect(
                    kept.is_some_and(|row| {
                        row.signature == w.signature && Some(row.score) == w.score
                    }),
                    || {
                        format!(
                            "monitor {}: evidence of frame {} committed by {} (#{} at {}, signed {}) is {} at the end",
                            w.monitor,
                            w.frame_ts.map_or("?".into(), ms),
                            w.writer,
                            w.seq,
                            ms(w.at),
                            short(&w.signature),
                            if kept.is_some() { "different" } else { "missing" },
                        )
                    },
                );
            }
            (Table::Evidence, op) => v.fail(format!(
                "monitor {}: evidence of frame {} was {op:?}d by {} (#{} at {}); evidence is never rewritten",
                w.monitor,
                w.frame_ts.map_or("?".into(), ms),
                w.writer,
                w.seq,
                ms(w.at),
            )),
            (Table::Alarm, Op::Delete) => v.fail(format!(
                "monitor {}: the alarm opened at {} was deleted by {} (#{})",
                w.monitor,
                w.frame_ts.map_or("?".into(), ms),
                w.writer,
                w.seq,
            )),
            (Table::Alarm, _) => v.expect(key.is_some_and(|k| alarms.contains_key(&k)), || {
                format!(
                    "monitor {}: the alarm opened at {} (committed by {}, #{}) is missing at the end",
                    w.monitor,
                    w.frame_ts.map_or("?".into(), ms),
                    w.writer,
                    w.seq,
                )
            }),
            (Table::Checkpoint, _) => {}
        }
    }
    for seen in &obs.sampled_evidence {
        let kept = evidence.get(&(seen.monitor, seen.frame_ts));
        v.expect(kept.is_some_and(|row| *row == seen), || {
            format!(
                "monitor {}: evidence of frame {} read during the run (signed {}) is {} at the end",
                seen.monitor,
                ms(seen.frame_ts),
                short(&seen.signature),
                if kept.is_some() {
                    "different"
                } else {
                    "missing"
                },
            )
        });
    }
    v.vacuous_fails("committed evidence")
}

pub fn no_duplicate_evidence(obs: &Observations) -> Verdict {
    let mut v = Verdict::new("(c) no duplicate evidence");
    let mut committed: BTreeMap<(Uuid, Ts), Vec<String>> = BTreeMap::new();
    for w in &obs.writes {
        if let (Table::Evidence, Op::Insert, Some(ts)) = (w.table, w.op, w.frame_ts) {
            committed
                .entry((w.monitor, ts))
                .or_default()
                .push(format!("{} (#{})", w.writer, w.seq));
        }
    }
    for ((monitor, ts), by) in &committed {
        v.expect(by.len() == 1, || {
            format!(
                "monitor {monitor}: the evidence of frame {} was committed {} times: {}",
                ms(*ts),
                by.len(),
                by.join(", ")
            )
        });
    }
    let mut rows: BTreeMap<(Uuid, Ts), usize> = BTreeMap::new();
    for row in &obs.final_evidence {
        *rows.entry((row.monitor, row.frame_ts)).or_default() += 1;
    }
    for ((monitor, ts), n) in &rows {
        v.expect(*n == 1, || {
            format!("monitor {monitor}: frame {} has {n} evidence rows", ms(*ts))
        });
    }
    for (kind, list) in [
        ("evidence", &obs.final_evidence),
        ("alarm", &obs.final_alarms),
    ] {
        for row in list {
            let published = obs
                .published
                .get(&row.monitor)
                .is_some_and(|frames| frames.contains(&row.frame_ts.timestamp_millis()));
            v.expect(published, || {
                format!(
                    "monitor {}: {kind} for frame {}, which the run never published to it",
                    row.monitor,
                    ms(row.frame_ts)
                )
            });
        }
    }
    v.vacuous_fails("evidence rows")
}

fn index(rows: &[ResultRow]) -> BTreeMap<(Uuid, Ts), &ResultRow> {
    rows.iter().map(|r| ((r.monitor, r.frame_ts), r)).collect()
}
