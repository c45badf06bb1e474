//! (h) No alarm is left open that no live detector owns; (i) alarm numbers
//! are unique per monitor. Checked on the alarm table after every worker
//! stopped gracefully: each monitor's one detector, restored from its last
//! snapshot, can hold at most one alarm open, the newest one. An older open
//! alarm was opened by a detector that was rolled back (a hard crash after
//! a background batch committed it) and would never be closed.

use std::collections::BTreeMap;

use super::{AlarmRow, Observations, Verdict, ms};

fn by_monitor(obs: &Observations) -> BTreeMap<uuid::Uuid, Vec<&AlarmRow>> {
    let mut by: BTreeMap<uuid::Uuid, Vec<&AlarmRow>> = BTreeMap::new();
    for a in &obs.alarm_rows {
        by.entry(a.monitor).or_default().push(a);
    }
    for alarms in by.values_mut() {
        alarms.sort_by_key(|a| a.opened_at);
    }
    by
}

pub fn no_orphaned_open_alarm(obs: &Observations) -> Verdict {
    let mut v = Verdict::new("(h) no alarm left open that no live detector owns");
    for (monitor, alarms) in by_monitor(obs) {
        let newest = alarms.last().map(|a| a.opened_at);
        for a in alarms {
            v.expect(a.closed_at.is_some() || Some(a.opened_at) == newest, || {
                format!(
                    "monitor {monitor}: alarm {} opened at {} is still open, and a newer alarm opened after it",
                    a.seq,
                    ms(a.opened_at)
                )
            });
        }
    }
    v.vacuous_fails("alarms")
}

pub fn alarm_numbers_unique(obs: &Observations) -> Verdict {
    let mut v = Verdict::new("(i) alarm numbers unique per monitor");
    for (monitor, alarms) in by_monitor(obs) {
        let mut seen: BTreeMap<i64, &AlarmRow> = BTreeMap::new();
        for a in alarms {
            match seen.get(&a.seq) {
                Some(first) => v.fail(format!(
                    "monitor {monitor}: alarm number {} used twice (opened at {} and {})",
                    a.seq,
                    ms(first.opened_at),
                    ms(a.opened_at)
                )),
                None => {
                    v.pass();
                    seen.insert(a.seq, a);
                }
            }
        }
    }
    v.vacuous_fails("alarms")
}
