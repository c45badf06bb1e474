//! A worker killed (kill -9) while its detector fits: the snapshot taken
//! before the fit keeps the training and calibration frames, and the
//! restarted worker refits from them instead of training again. The fit
//! takes milliseconds, so the test-only `RADAR_TEST_FIT_DELAY_MS` (a
//! `fault-injection` build) holds it up long enough to kill the worker
//! inside it.

use std::time::Duration;

use radar_testkit::prelude::*;

const START: Duration = Duration::from_secs(60);

/// Training plus calibration frames of `radar_testkit::monitor::two_readings`.
const FIT_FRAMES: u64 = WARMUP_FRAMES;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_while_fitting_restarts_the_fit_from_the_preserved_frames() {
    let h = Harness::new("worker_fit_kill").await;
    let (id, prefix) = h.create_monitor("fit-kill");
    let mut worker = h.spawn_worker("w-fit-1", &[("RADAR_TEST_FIT_DELAY_MS", "600000")], &[]);
    h.wait_status(id, START, "the monitor runs", |s| state(s) == "running")
        .await;
    let mut publisher = Publisher::connect(h.broker.port).await;
    publisher.frames(&prefix, FIT_FRAMES as usize).await;
    publisher.flush(START).await;
    worker
        .wait_log("Test hook: the static fit is held up.", START)
        .await;

    // The checkpoint before the fit is committed while the fit runs.
    let fitting = |inspected: &serde_json::Value| {
        inspected["phase"] == "fitting" && inspected["processed_count"] == FIT_FRAMES
    };
    wait_until(START, "the snapshot before the fit is committed", || {
        fitting(&h.inspect(id).0)
    })
    .await
    .unwrap_or_else(|e| panic!("{e}: {:#}\nlog:\n{}", h.inspect(id).0, worker.log()));
    assert!(
        !worker.log().contains("Fitted the detector"),
        "the fit was still running when the worker was killed"
    );
    worker.kill9();
    let (inspected, code) = h.inspect(id);
    assert_eq!(
        code,
        Some(0),
        "the interrupted fit's snapshot restores: {inspected:#}"
    );
    assert!(fitting(&inspected), "{inspected:#}");

    let restarted = h.spawn_worker("w-fit-2", &[], &[]);
    let restored = h
        .wait_status(id, START, "the restarted monitor runs", |s| {
            state(s) == "running" && s["worker_id"] == "w-fit-2"
        })
        .await;
    assert_eq!(
        restored["recovery"]["restored_processed_count"].as_u64(),
        Some(FIT_FRAMES),
        "{restored:#}"
    );
    // One new frame: the restored detector fits from the preserved frames
    // and scores it; it does not collect training frames again.
    publisher.frames(&prefix, 1).await;
    publisher.flush(START).await;
    wait_until(START, "the refitted detector monitors", || {
        let inspected = h.inspect(id).0;
        inspected["phase"] == "monitoring" && inspected["processed_count"] == FIT_FRAMES + 1
    })
    .await
    .unwrap_or_else(|e| panic!("{e}: {:#}\nlog:\n{}", h.inspect(id).0, restarted.log()));
    h.wait_status(id, START, "the status reports monitoring", |s| {
        s["phase"] == "monitoring" && processed(s) == FIT_FRAMES + 1
    })
    .await;
}
