//! (a) No checkpoint or evidence written by a writer after its successor's
//! first commit.
//!
//! Walks each monitor's audited writes in commit order, keeping the row's
//! signature and its owner (the worker whose checkpoint put it there). A
//! checkpoint by another worker is that owner's successor's first commit:
//! from then on the old owner may write nothing, unless it restored the
//! successor's snapshot in a new start (a takeover of its own, which its log
//! must show). Every result must also be written by the row's owner under
//! the row's current signature, and every checkpoint must replace exactly
//! the signature the row held (no lost update).

use std::collections::BTreeMap;

use super::{Observations, Op, Table, Verdict, Write, ms, short};

pub fn no_write_after_successor(obs: &Observations) -> Verdict {
    let mut v = Verdict::new(
        "(a) no checkpoint or evidence by a writer after its successor's first commit",
    );
    for (monitor, writes) in super::writes_by_monitor(obs) {
        let mut row: Option<&Write> = None;
        // Superseded writer -> the successor's first commit.
        let mut superseded: BTreeMap<&str, &Write> = BTreeMap::new();
        for w in writes {
            match w.table {
                Table::Checkpoint => {
                    check_checkpoint(obs, monitor, w, row, &mut superseded, &mut v);
                    // The row is what the database holds, refused or not.
                    row = Some(w);
                }
                Table::Evidence | Table::Alarm => {
                    check_result(monitor, w, row, &superseded, &mut v);
                }
            }
        }
    }
    v.vacuous_fails("checkpoint writes")
}

/// A checkpoint replaces exactly the signature the row held, and is not by
/// a superseded writer unless that writer took the row over again after a
/// restart; a takeover supersedes the row's previous owner.
fn check_checkpoint<'a>(
    obs: &Observations,
    monitor: uuid::Uuid,
    w: &'a Write,
    row: Option<&'a Write>,
    superseded: &mut BTreeMap<&'a str, &'a Write>,
    v: &mut Verdict,
) {
    let linear = replaces_the_held_signature(monitor, w, row, v);
    let mut ok = linear;
    let takeover = row.is_some_and(|r| r.writer != w.writer);
    if let Some(&successor) = superseded.get(w.writer.as_str()) {
        if takeover && restarted_since(obs, monitor, w, row, successor) {
            superseded.remove(w.writer.as_str());
        } else {
            v.fail(stale(monitor, w, successor));
            ok = false;
        }
    }
    if takeover && let Some(previous) = row {
        superseded.insert(previous.writer.as_str(), w);
    }
    if ok {
        v.pass();
    }
}

/// Whether a checkpoint replaced exactly the signature the row held (an
/// insert: that there was none); a failure otherwise.
fn replaces_the_held_signature(
    monitor: uuid::Uuid,
    w: &Write,
    row: Option<&Write>,
    v: &mut Verdict,
) -> bool {
    let linear = match (w.op, row) {
        (Op::Insert, None) => true,
        (Op::Update, Some(current)) => w.replaced.as_deref() == Some(current.signature.as_slice()),
        _ => false,
    };
    if !linear {
        v.fail(format!(
            "monitor {monitor}: checkpoint {op:?} #{seq} by {writer} at {at} replaced {replaced} while the row held {held}",
            op = w.op,
            seq = w.seq,
            writer = w.writer,
            at = ms(w.at),
            replaced = w.replaced.as_deref().map_or("nothing".into(), short),
            held = row.map_or("nothing".into(), |r| short(&r.signature)),
        ));
    }
    linear
}

/// Whether the checkpoint's writer restored the row's current snapshot in
/// a new start after its successor's first commit.
fn restarted_since(
    obs: &Observations,
    monitor: uuid::Uuid,
    w: &Write,
    row: Option<&Write>,
    successor: &Write,
) -> bool {
    row.is_some_and(|current| {
        obs.restores.iter().any(|r| {
            r.writer == w.writer
                && r.monitor == monitor
                && r.at > successor.at
                && r.at < w.at
                && Some(r.saved_at) == current.saved_at
        })
    })
}

/// Evidence or an alarm is written by the row's owner, not superseded,
/// under the row's current signature.
fn check_result(
    monitor: uuid::Uuid,
    w: &Write,
    row: Option<&Write>,
    superseded: &BTreeMap<&str, &Write>,
    v: &mut Verdict,
) {
    if let Some(successor) = superseded.get(w.writer.as_str()) {
        v.fail(stale(monitor, w, successor));
    } else if let Some(current) = row.filter(|r| r.writer == w.writer) {
        v.expect(w.signature == current.signature, || {
            format!(
                "monitor {monitor}: {table:?} #{seq} by {writer} at {at} is signed {sig}, but the row held {held}",
                table = w.table,
                seq = w.seq,
                writer = w.writer,
                at = ms(w.at),
                sig = short(&w.signature),
                held = short(&current.signature),
            )
        });
    } else {
        v.fail(format!(
            "monitor {monitor}: {table:?} #{seq} written at {at} by {writer}, which did not own the row (owner: {owner})",
            table = w.table,
            seq = w.seq,
            at = ms(w.at),
            writer = w.writer,
            owner = row.map_or("nobody", |r| r.writer.as_str()),
        ));
    }
}

fn stale(monitor: uuid::Uuid, w: &Write, successor: &Write) -> String {
    format!(
        "monitor {monitor}: {table:?} {op:?} #{seq} by {writer} at {at}, after its successor {next} first committed (#{next_seq} at {next_at})",
        table = w.table,
        op = w.op,
        seq = w.seq,
        writer = w.writer,
        at = ms(w.at),
        next = successor.writer,
        next_seq = successor.seq,
        next_at = ms(successor.at),
    )
}
