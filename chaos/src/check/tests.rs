//! Each invariant passes a healthy history and fails a deliberately broken
//! one: a check that cannot fail proves nothing.

use std::time::Duration;

use chrono::TimeZone;
use uuid::Uuid;

use super::*;

fn t(seconds: f64) -> Ts {
    let base = Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 0).unwrap();
    base + chrono::Duration::milliseconds((seconds * 1000.0).round() as i64)
}

const M: Uuid = Uuid::from_u128(7);

/// A run in the making: writes are appended in commit order.
struct Run {
    obs: Observations,
    /// The snapshot row: its signature and writer.
    row: Option<Vec<u8>>,
    next_sig: u8,
}

impl Run {
    fn new() -> Self {
        let mut obs = Observations {
            monitors: vec![M],
            limits: Limits {
                checkpoint_timeout: Duration::from_secs(5),
                ..Limits::default()
            },
            ..Observations::default()
        };
        obs.published.insert(
            M,
            (1..=100)
                .map(|s| t(f64::from(s)).timestamp_millis())
                .collect(),
        );
        obs.resumed.insert(M, true);
        Self {
            obs,
            row: None,
            next_sig: 1,
        }
    }

    fn write(&mut self, table: Table, op: Op, writer: &str, at: f64) -> &mut Write {
        let seq = self.obs.writes.len() as i64 + 1;
        self.obs.writes.push(Write {
            seq,
            table,
            op,
            monitor: M,
            writer: writer.into(),
            txid: seq,
            signature: Vec::new(),
            replaced: None,
            processed: None,
            saved_at: None,
            frame_ts: None,
            score: None,
            at: t(at),
        });
        self.obs.writes.last_mut().unwrap()
    }

    /// A checkpoint that replaces whatever the row holds.
    fn checkpoint(&mut self, writer: &str, at: f64, processed: i64, saved: f64) -> &mut Self {
        let sig = vec![self.next_sig; 32];
        self.next_sig += 1;
        let replaced = self.row.replace(sig.clone());
        let op = if replaced.is_some() {
            Op::Update
        } else {
            Op::Insert
        };
        let w = self.write(Table::Checkpoint, op, writer, at);
        w.signature = sig;
        w.replaced = replaced;
        w.processed = Some(processed);
        w.saved_at = Some(t(saved));
        self
    }

    /// Evidence of the frame at `frame` seconds, under the row's signature.
    fn evidence(&mut self, writer: &str, at: f64, frame: f64) -> &mut Self {
        let sig = self.row.clone().unwrap_or_default();
        let w = self.write(Table::Evidence, Op::Insert, writer, at);
        w.signature = sig.clone();
        w.frame_ts = Some(t(frame));
        w.score = Some(frame * 2.0);
        self.obs.final_evidence.push(ResultRow {
            monitor: M,
            frame_ts: t(frame),
            score: frame * 2.0,
            signature: sig,
        });
        self
    }

    fn restore(&mut self, writer: &str, at: f64, processed: i64, saved: f64) -> &mut Self {
        self.obs.restores.push(Restore {
            writer: writer.into(),
            monitor: M,
            at: t(at),
            processed,
            saved_at: t(saved),
        });
        self
    }

    fn status(&mut self, writer: &str, heartbeat: f64, processed: i64) -> &mut Self {
        self.obs.status.push(StatusSample {
            monitor: M,
            writer: writer.into(),
            heartbeat_at: t(heartbeat),
            processed,
            // Read 1 s after it was written.
            sampled_at: Some(t(heartbeat + 1.0)),
        });
        self
    }
}

fn gap(cause: &str, from: f64, to: f64) -> Gap {
    Gap {
        cause: cause.into(),
        from: t(from),
        to: Some(t(to)),
    }
}

/// w1 runs the monitor, is killed at 12 s; w2 restores w1's last snapshot
/// (saved at 10 s) at 14 s and carries on. The broker was down 6-8 s.
fn healthy() -> Run {
    let mut run = Run::new();
    run.checkpoint("w1", 1.0, 0, 1.0)
        .status("w1", 3.0, 20)
        .checkpoint("w1", 5.0, 40, 5.0)
        .evidence("w1", 5.1, 4.0)
        .status("w1", 9.0, 85)
        .checkpoint("w1", 10.0, 90, 10.0)
        .restore("w2", 14.0, 90, 10.0)
        .checkpoint("w2", 14.5, 90, 14.4)
        .status("w2", 15.0, 90)
        .evidence("w2", 17.0, 16.0)
        .status("w2", 19.0, 140)
        .checkpoint("w2", 20.0, 150, 20.0);
    run.obs.sampled_evidence = run.obs.final_evidence[..1].to_vec();
    run.obs.final_alarms.push(ResultRow {
        monitor: M,
        frame_ts: t(16.0),
        score: 3.0,
        signature: vec![9; 32],
    });
    run.obs.alarm_rows = vec![
        AlarmRow {
            monitor: M,
            seq: 1,
            opened_at: t(5.0),
            closed_at: Some(t(8.0)),
        },
        AlarmRow {
            monitor: M,
            seq: 2,
            opened_at: t(16.0),
            closed_at: None,
        },
    ];
    run.obs.coverage.insert(
        M,
        Coverage {
            covered_from: Some(t(1.0)),
            covered_to: Some(t(20.0)),
            gaps: vec![
                gap("startup", 0.5, 1.0),
                gap("mqtt_outage", 6.3, 8.2),
                gap("restart_rollback", 10.0, 15.0),
            ],
            complete_from: None,
            restores: 1,
        },
    );
    run.obs.outages.push(Outage {
        kind: OutageKind::Broker,
        from: t(6.0),
        to: t(8.0),
        what: "broker restart".into(),
    });
    run.obs.logs = healthy_logs();
    run.obs.offset_workers = vec!["w3-clock".into()];
    run.obs.replays = vec![Replay {
        monitor: M,
        at: t(200.0),
        reported_at: Some(t(230.0)),
        repaired_at: Some(t(231.0)),
    }];
    run
}

/// The logs of the healthy run: a worker's start, a clean exit and the
/// clock-offset worker's own report.
fn healthy_logs() -> Vec<ProcessLog> {
    vec![
        ProcessLog {
            name: "w1".into(),
            text: "{\"level\":\"INFO\",\"message\":\"Monitor started; subscribing.\"}\n".into(),
            exit_code: None,
        },
        ProcessLog {
            name: "w2".into(),
            text: String::new(),
            exit_code: Some(0),
        },
        ProcessLog {
            name: "w3-clock".into(),
            text: "{\"message\":\"this worker's clock is 60.0 s ahead of PostgreSQL's; source times are judged on it, so fix\"}".into(),
            exit_code: Some(0),
        },
    ]
}

fn verdict(obs: &Observations, prefix: &str) -> Verdict {
    check(obs)
        .into_iter()
        .find(|v| v.name.starts_with(prefix))
        .expect("an invariant with that prefix")
}

fn assert_fails(obs: &Observations, prefix: &str, mentions: &str) {
    let v = verdict(obs, prefix);
    assert!(v.failed > 0, "{prefix} should fail: {v:#?}");
    assert!(
        v.failures.iter().any(|f| f.contains(mentions)),
        "{prefix} failures should mention {mentions:?}: {:#?}",
        v.failures
    );
}

#[test]
fn a_healthy_history_passes_every_invariant() {
    let run = healthy();
    for v in check(&run.obs) {
        assert_eq!(v.failed, 0, "{v:#?}");
        assert!(v.passed > 0, "{v:#?}");
    }
}

#[test]
fn an_empty_run_fails_every_invariant_rather_than_passing_vacuously() {
    let obs = Observations::default();
    for v in check(&obs) {
        assert!(v.failed > 0, "{v:#?}");
    }
}

#[test]
fn fencing_fails_on_evidence_by_a_writer_after_its_successors_first_commit() {
    let mut run = healthy();
    // w1 is still holding w2's signature somehow and writes under it.
    run.evidence("w1", 21.0, 20.0);
    assert_fails(&run.obs, "(a)", "after its successor w2 first committed");
}

#[test]
fn fencing_fails_on_a_checkpoint_by_a_superseded_writer_that_did_not_restart() {
    let mut run = healthy();
    run.checkpoint("w1", 21.0, 160, 21.0);
    assert_fails(&run.obs, "(a)", "Checkpoint Update");
}

#[test]
fn fencing_accepts_a_superseded_writer_that_restored_its_successors_snapshot() {
    let mut run = healthy();
    run.restore("w1", 22.0, 150, 20.0)
        .checkpoint("w1", 22.5, 150, 22.4);
    assert_eq!(verdict(&run.obs, "(a)").failed, 0);
}

#[test]
fn fencing_fails_when_a_checkpoint_replaced_a_signature_the_row_did_not_hold() {
    let mut run = healthy();
    run.checkpoint("w2", 21.0, 160, 21.0);
    run.obs.writes.last_mut().unwrap().replaced = Some(vec![1; 32]);
    assert_fails(&run.obs, "(a)", "while the row held");
}

#[test]
fn fencing_fails_on_evidence_under_a_signature_the_row_no_longer_holds() {
    let mut run = healthy();
    run.evidence("w2", 21.0, 20.0);
    run.obs.writes.last_mut().unwrap().signature = vec![1; 32];
    assert_fails(&run.obs, "(a)", "but the row held");
}

#[test]
fn lost_evidence_fails_when_a_committed_row_is_gone_at_the_end() {
    let mut run = healthy();
    run.obs.final_evidence.remove(0);
    assert_fails(&run.obs, "(b)", "is missing at the end");
}

#[test]
fn lost_evidence_fails_when_a_committed_row_was_rewritten() {
    let mut run = healthy();
    run.obs.final_evidence[1].signature = vec![42; 32];
    assert_fails(&run.obs, "(b)", "is different at the end");
    let mut run = healthy();
    run.write(Table::Evidence, Op::Delete, "w2", 21.0).frame_ts = Some(t(4.0));
    assert_fails(&run.obs, "(b)", "Deleted");
}

#[test]
fn lost_evidence_fails_when_a_sampled_row_is_gone_at_the_end() {
    let mut run = healthy();
    run.obs.sampled_evidence.push(ResultRow {
        monitor: M,
        frame_ts: t(30.0),
        score: 1.0,
        signature: vec![2; 32],
    });
    assert_fails(&run.obs, "(b)", "read during the run");
}

#[test]
fn duplicate_evidence_fails_when_a_frame_was_committed_twice() {
    let mut run = healthy();
    run.evidence("w2", 19.5, 16.0);
    assert_fails(&run.obs, "(c)", "was committed 2 times");
    assert_fails(&run.obs, "(c)", "has 2 evidence rows");
}

#[test]
fn duplicate_evidence_fails_on_evidence_for_a_frame_never_published() {
    let mut run = healthy();
    run.evidence("w2", 19.5, 16.5);
    assert_fails(&run.obs, "(c)", "never published");
}

#[test]
fn counts_fail_when_a_committed_snapshot_counts_fewer_frames_than_its_predecessor() {
    let mut run = healthy();
    run.checkpoint("w2", 21.0, 120, 21.0);
    assert_fails(&run.obs, "(d)", "its predecessor by w2 counted Some(150)");
}

#[test]
fn counts_fail_when_a_restart_resumes_from_an_older_snapshot_than_the_last_committed() {
    let mut run = Run::new();
    run.checkpoint("w1", 1.0, 0, 1.0)
        .checkpoint("w1", 5.0, 40, 5.0)
        .checkpoint("w1", 10.0, 90, 10.0)
        // w2 claims to restore the 5 s snapshot, yet commits over the 10 s one.
        .restore("w2", 14.0, 40, 5.0)
        .checkpoint("w2", 14.5, 40, 14.4);
    assert_fails(&run.obs, "(d)", "replaced the snapshot saved 12:00:10.000");
    assert_fails(&run.obs, "(d)", "counts Some(40) frames");
}

#[test]
fn counts_fail_when_a_restore_loaded_a_snapshot_nobody_committed() {
    let mut run = healthy();
    run.restore("w3", 25.0, 151, 20.0);
    assert_fails(&run.obs, "(d)", "which no commit wrote");
}

#[test]
fn counts_fail_when_a_worker_reports_fewer_frames_without_a_restore() {
    let mut run = healthy();
    run.status("w2", 19.5, 100);
    assert_fails(&run.obs, "(d)", "reported 100 frames");
}

#[test]
fn counts_accept_a_drop_back_to_the_snapshot_a_worker_restored_itself() {
    let mut run = healthy();
    // w2's monitor restarts inside the same process from its 20 s snapshot,
    // rolling back from 170 frames to 150.
    run.status("w2", 20.5, 170)
        .restore("w2", 21.0, 150, 20.0)
        .checkpoint("w2", 21.5, 150, 21.4)
        .status("w2", 22.0, 155);
    assert_eq!(verdict(&run.obs, "(d)").failed, 0);
    run.status("w2", 22.5, 149);
    assert_fails(&run.obs, "(d)", "reported 149 frames");
}

#[test]
fn counts_ignore_a_refused_starts_status_while_a_replayed_row_is_in_place() {
    // The replay (200 s to 231 s): w2 refuses it and its unowned status
    // row keeps an older count than w2 reported before.
    let mut run = healthy();
    run.status("w2", 210.0, 100);
    assert_eq!(verdict(&run.obs, "(d)").failed, 0);
    // The same row after the repair is w2's own report, and a drop.
    let mut run = healthy();
    run.status("w2", 232.0, 100);
    assert_fails(&run.obs, "(d)", "reported 100 frames");
}

#[test]
fn coverage_fails_when_a_restart_is_not_a_gap() {
    let mut run = healthy();
    let coverage = run.obs.coverage.get_mut(&M).unwrap();
    coverage.gaps.retain(|g| g.cause != "restart_rollback");
    assert_fails(
        &run.obs,
        "(e)",
        "restart: w2 restored the snapshot saved 12:00:10.000",
    );
}

#[test]
fn coverage_fails_when_a_gap_starts_later_than_the_rolled_back_snapshot() {
    let mut run = healthy();
    let coverage = run.obs.coverage.get_mut(&M).unwrap();
    coverage.gaps[2] = gap("restart_rollback", 12.0, 15.0);
    assert_fails(&run.obs, "(e)", "2.0 s of 12:00:10.000 .. 12:00:14.000");
}

#[test]
fn coverage_accepts_a_restart_gap_ending_at_frames_a_blackhole_held_back_past_the_restore() {
    let mut run = healthy();
    // w2 restores at 14 s; the gap ends at 12.5 s, the source time of the
    // first frame it processed: one the blackholed link (12-13.5 s) held
    // back and delivered after the restore.
    run.obs.coverage.get_mut(&M).unwrap().gaps[2] = gap("restart_rollback", 10.0, 12.5);
    assert_fails(&run.obs, "(e)", "1.5 s of 12:00:10.000 .. 12:00:14.000");
    run.obs.outages.push(Outage {
        kind: OutageKind::BrokerLink,
        from: t(12.0),
        to: t(13.5),
        what: "broker blackhole".into(),
    });
    assert_eq!(verdict(&run.obs, "(e)").failed, 0);
    // A blackhole long over before the restore held nothing back: the
    // restart window runs to the restore again.
    run.obs.outages.last_mut().unwrap().from = t(5.0);
    run.obs.outages.last_mut().unwrap().to = t(6.0);
    assert_fails(&run.obs, "(e)", "restart: w2");
}

#[test]
fn coverage_fails_when_a_broker_outage_is_not_a_gap() {
    let mut run = healthy();
    let coverage = run.obs.coverage.get_mut(&M).unwrap();
    coverage.gaps.retain(|g| g.cause != "mqtt_outage");
    assert_fails(&run.obs, "(e)", "broker restart");
}

#[test]
fn coverage_requires_a_stall_gap_only_for_database_outages_longer_than_the_timeout() {
    let mut run = healthy();
    run.obs.outages.push(Outage {
        kind: OutageKind::Database,
        from: t(15.0),
        to: t(19.0),
        what: "short pause".into(),
    });
    assert_eq!(verdict(&run.obs, "(e)").failed, 0);
    run.obs.outages.push(Outage {
        kind: OutageKind::Database,
        from: t(2.0),
        to: t(21.0),
        what: "long pause".into(),
    });
    assert_fails(&run.obs, "(e)", "long pause");
}

#[test]
fn coverage_counts_the_stall_timeout_from_when_frames_flow_again_after_a_broker_outage() {
    let mut run = healthy();
    // The database is down 8-18 s, the broker until 9 s: frames flow from
    // 11 s (reconnect), so the model must have stalled by 19.5 s: nothing
    // to cover before the database came back.
    run.obs.outages.push(Outage {
        kind: OutageKind::Database,
        from: t(8.0),
        to: t(18.0),
        what: "pause after the broker".into(),
    });
    run.obs.outages[0].to = t(9.0);
    run.obs.coverage.get_mut(&M).unwrap().gaps[1] = gap("mqtt_outage", 6.3, 9.2);
    assert_eq!(verdict(&run.obs, "(e)").failed, 0);
    // Without the broker outage the stall was due from 16.5 s.
    run.obs.outages.remove(0);
    assert_fails(&run.obs, "(e)", "pause after the broker");
}

#[test]
fn coverage_counts_the_stall_timeout_from_when_a_blackholed_link_delivers_again() {
    let mut run = healthy();
    // The database is down 8-18 s and the broker link blackholed 7-9 s:
    // its frames reach the broker by 12 s at the latest (2 s of held-back
    // retransmissions plus 1 s), so the stall was due from 20.5 s at the
    // earliest: nothing to cover before the database came back.
    run.obs.outages.push(Outage {
        kind: OutageKind::Database,
        from: t(8.0),
        to: t(18.0),
        what: "pause during a blackhole".into(),
    });
    run.obs.outages.push(Outage {
        kind: OutageKind::BrokerLink,
        from: t(7.0),
        to: t(9.0),
        what: "broker blackhole".into(),
    });
    assert_eq!(verdict(&run.obs, "(e)").failed, 0);
    // Without the blackhole the stall was due from 16.5 s.
    run.obs.outages.pop();
    assert_fails(&run.obs, "(e)", "pause during a blackhole");
}

#[test]
fn coverage_fails_when_the_history_miscounts_restores() {
    let mut run = healthy();
    run.obs.coverage.get_mut(&M).unwrap().restores = 0;
    assert_fails(
        &run.obs,
        "(e)",
        "counts 0 restores, but 1 restores took effect",
    );
}

#[test]
fn coverage_ignores_time_folded_into_totals() {
    let mut run = healthy();
    let coverage = run.obs.coverage.get_mut(&M).unwrap();
    coverage.gaps.retain(|g| g.cause != "mqtt_outage");
    coverage.complete_from = Some(t(9.0));
    assert_eq!(verdict(&run.obs, "(e)").failed, 0);
}

#[test]
fn panics_fail_on_a_panic_line_or_a_panic_exit_code() {
    let mut run = healthy();
    run.obs.logs[0]
        .text
        .push_str("thread 'actix-rt|system:0|arbiter:1' panicked at actors/src/x.rs:1:1:\n");
    assert_fails(&run.obs, "(f)", "w1: thread");
    let mut run = healthy();
    run.obs.logs[1].exit_code = Some(101);
    assert_fails(&run.obs, "(f)", "exited with code 101");
}

#[test]
fn liveness_fails_for_a_monitor_that_never_resumed() {
    let mut run = healthy();
    run.obs.resumed.insert(M, false);
    assert_fails(&run.obs, "(g)", "was not owned and processing");
}

#[test]
fn uncovered_measures_time_outside_every_gap() {
    let gaps = [gap("a", 1.0, 2.0), gap("b", 3.0, 4.0)];
    assert_eq!(
        uncovered(t(0.0), t(5.0), &gaps),
        chrono::Duration::seconds(3)
    );
    let open = [Gap {
        cause: "a".into(),
        from: t(1.0),
        to: None,
    }];
    assert_eq!(
        uncovered(t(0.0), t(5.0), &open),
        chrono::Duration::seconds(1)
    );
}

#[test]
fn an_older_alarm_left_open_is_an_orphan() {
    let mut run = healthy();
    run.obs.alarm_rows[0].closed_at = None;
    assert_fails(
        &run.obs,
        "(h)",
        "alarm 1 opened at 12:00:05.000 is still open",
    );
}

#[test]
fn an_alarm_number_used_twice_fails() {
    let mut run = healthy();
    run.obs.alarm_rows[1].seq = 1;
    assert_fails(&run.obs, "(i)", "alarm number 1 used twice");
}

#[test]
fn a_heartbeat_older_than_the_bound_outside_outages_fails_and_inside_one_is_excused() {
    let mut run = healthy();
    // An idle owner's row is refreshed every 10 s: ages well past that
    // but within the bound are a live owner.
    run.obs.status[1].sampled_at = Some(t(9.0 + 59.0));
    assert_eq!(verdict(&run.obs, "(j)").failed, 0);
    run.obs.status[1].sampled_at = Some(t(9.0 + 61.0));
    assert_fails(&run.obs, "(j)", "was 61.0 s old");
    run.obs.outages.push(Outage {
        kind: OutageKind::Database,
        from: t(30.0),
        to: t(40.0),
        what: "database pause".into(),
    });
    assert_eq!(verdict(&run.obs, "(j)").failed, 0);
}

#[test]
fn an_offset_clock_worker_that_wrote_or_never_noticed_fails() {
    let mut run = healthy();
    assert_eq!(verdict(&run.obs, "(l)").failed, 0);
    run.checkpoint("w3-clock", 21.0, 160, 21.0);
    assert_fails(&run.obs, "(l)", "w3-clock: wrote 1 rows");
    run.obs.logs.last_mut().unwrap().text.clear();
    assert_fails(&run.obs, "(l)", "never says its clock disagrees");
}

#[test]
fn a_replay_never_reported_fails() {
    let mut run = healthy();
    run.obs.replays[0].reported_at = None;
    assert_fails(&run.obs, "(k)", "never reported as replayed");
}

#[test]
fn a_replay_reported_late_fails_with_its_delay() {
    let mut run = healthy();
    let at = run.obs.replays[0].at;
    run.obs.replays[0].reported_at = Some(at + chrono::Duration::seconds(121));
    assert_fails(&run.obs, "(k)", "(121.0 s later)");
}

#[test]
fn the_drivers_own_replay_writes_are_not_a_workers_chain() {
    let mut run = healthy();
    let held = run.row.clone();
    run.checkpoint(REPLAY_WRITER, 20.5, 40, 5.0);
    // The repair puts back exactly what the replay overwrote.
    let w = run.obs.writes.last_mut().unwrap();
    w.signature = held.clone().unwrap();
    assert_eq!(verdict(&run.obs, "(a)").failed, 0);
    assert_eq!(verdict(&run.obs, "(d)").failed, 0);
}
