//! What a run prints: the faults by kind, what was observed, how SIGTERMs
//! during the faults ended, notes on unexpected exits, and each
//! invariant's verdict.

use std::{collections::BTreeMap, time::Duration};

use crate::{
    check::{Observations, Verdict},
    scenario::{Chaos, Fault},
};

pub(super) fn report(
    chaos: &Chaos,
    obs: &Observations,
    verdicts: &[Verdict],
    fault_seconds: f64,
    total: Duration,
) {
    let total_faults: u32 = chaos.injected.values().sum();
    let by_kind: Vec<String> = Fault::ALL
        .iter()
        .map(|f| format!("{f} {}", chaos.injected.get(f).copied().unwrap_or(0)))
        .collect();
    println!(
        "radar-chaos: {total_faults} faults in {fault_seconds:.0} s ({}); run took {:.0} s",
        by_kind.join(", "),
        total.as_secs_f64()
    );
    println!(
        "observed: {} workers, {} audited writes, {} evidence rows, {} alarms, {} restores, {} status samples, {} outages",
        chaos.finished.len(),
        obs.writes.len(),
        obs.final_evidence.len(),
        obs.final_alarms.len(),
        obs.restores.len(),
        obs.status.len(),
        obs.outages.len()
    );
    if !chaos.term_exits.is_empty() {
        let exits: Vec<String> = chaos
            .term_exits
            .iter()
            .map(|(how, n)| format!("{how}: {n}"))
            .collect();
        println!("SIGTERM during faults ended as: {}", exits.join(", "));
    }
    let mut notes: BTreeMap<&str, usize> = BTreeMap::new();
    for note in &chaos.unexpected_exits {
        *notes.entry(note.as_str()).or_default() += 1;
    }
    for (note, n) in notes {
        println!("note: {n} x {note}");
    }
    print_verdicts(verdicts);
}

pub(super) fn print_verdicts(verdicts: &[Verdict]) {
    for v in verdicts {
        println!("{}: {} passed, {} failed", v.name, v.passed, v.failed);
        for f in &v.failures {
            println!("    {f}");
        }
    }
}
