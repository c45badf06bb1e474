//! A start overtaken during its first write: worker B loads the snapshot,
//! and before its checkpoint before subscribing lands, another writer
//! replaces the row. B's fenced write must find the row replaced (zero
//! rows), so B neither commits over the successor nor ends the monitor: it
//! loads the successor and starts again from it, in the same start.
//!
//! Deterministic: the test holds the snapshot row's lock while it writes
//! the successor, waits until B's first write is queued behind that lock,
//! and only then commits.

use std::time::Duration;

use radar_testkit::prelude::*;

const START: Duration = Duration::from_secs(30);

/// What a start logs when its first write finds the row replaced.
const SUPERSEDED: &str = "another worker committed a newer snapshot while this one was starting";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_whose_first_write_finds_the_row_replaced_loads_the_successor_and_starts_again() {
    let h = Harness::new("worker_superseded_start").await;
    let mut conn = h.connect().await;
    let (id, _prefix) = h.create_monitor("superseded");
    let (successor, loaded) = a_first_worker_leaves_two_snapshots(&h, &mut conn, id).await;

    // The other writer: the earlier snapshot becomes the row's newest
    // commit, in a transaction that holds the row until B's write waits.
    let mut other_writer = lock_snapshot_row(&h, id).await;
    write_back_kept_snapshot(&mut other_writer, id).await;
    let mut second = h.spawn_worker("w-second", &[], &[]);
    wait_for_lock_waiter(&mut conn, START).await;
    diesel_async::RunQueryDsl::execute(diesel::sql_query("COMMIT"), &mut other_writer)
        .await
        .expect("commit the successor");

    second.wait_log(SUPERSEDED, START).await;
    let row = wait_snapshot(&mut conn, id, START, "the second worker commits", |r| {
        r.writer_id == "w-second"
    })
    .await;
    assert_ne!(row.signature, loaded.signature, "never over the successor");
    assert_ne!(row.signature, successor.signature);
    assert_eq!(
        row.processed_count, successor.processed_count,
        "the second worker continues from the successor it reloaded"
    );
    h.wait_status(id, START, "the second worker runs the monitor", |s| {
        s["worker_id"] == "w-second" && state(s) == "running"
    })
    .await;
    let log = second.log();
    for exit in [
        "Monitor failed; it will be restarted.",
        "Monitor ended for good",
    ] {
        assert!(
            !log.contains(exit),
            "the overtaken start retries in place; the monitor never exits:\n{log}"
        );
    }
    assert!(second.running(), "{log}");
}

/// A first worker commits its initial snapshot (kept aside: the successor
/// the test writes back later), then stops gracefully, committing a newer
/// one (the row the second worker will load). Returns both.
async fn a_first_worker_leaves_two_snapshots(
    h: &Harness,
    conn: &mut diesel_async::AsyncPgConnection,
    id: uuid::Uuid,
) -> (SnapshotRow, SnapshotRow) {
    let first = h.spawn_worker("w-first", &[], &[]);
    h.wait_status(id, START, "the first worker runs the monitor", |s| {
        state(s) == "running"
    })
    .await;
    let initial = keep_snapshot(conn, id).await;
    let exit = first.terminate();
    assert!(exit.success(), "the first worker stops cleanly: {exit:?}");
    let last = wait_snapshot(conn, id, START, "a newer snapshot at shutdown", |r| {
        r.signature != initial.signature
    })
    .await;
    (initial, last)
}
