//! A flood far larger than the ingress queue: the client stops taking
//! messages from the broker while the queue is full, so the broker holds
//! the backlog and this process's memory stays flat. Its own test binary so
//! the peak RSS belongs to this test alone.

use std::{
    io::Write,
    process::{Command, Stdio},
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::{Context, Result};
use radar::mqtt::{ConnectionEvent, spawn};
use radar_testkit::{
    broker::Mosquitto, ingest::events_until, ingest::next_message, ingest::readings,
    ingest::test_options, ingest::unique_prefix, poll,
};

const MESSAGES: usize = 20_000;
const PAYLOAD: usize = 1_000;
const CAPACITY: usize = 64;

/// A field of /proc/<pid>/status in KiB (VmHWM = peak RSS, VmRSS = now).
fn status_kib(pid: &str, field: &str) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status
        .lines()
        .find(|l| l.starts_with(field))
        .with_context(|| format!("{field} missing"))?;
    Ok(line
        .split_whitespace()
        .nth(1)
        .context("no value")?
        .parse()?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_larger_than_the_queue_waits_at_the_broker_not_in_memory() -> Result<()> {
    // The broker must hold the whole backlog rather than drop it.
    let broker = Mosquitto::start(u32::try_from(MESSAGES * 2)?).await?;
    let broker_pid = broker.pid().context("broker pid")?.to_string();
    let topic = format!("{}/flood", unique_prefix());
    let mut options = test_options(&broker.url());
    options.queue_capacity = CAPACITY;
    let mut ingestion = spawn(options, &readings(std::slice::from_ref(&topic), &[]))?;
    events_until(&mut ingestion.events, Duration::from_secs(10), |e| {
        matches!(e, ConnectionEvent::Connected { .. })
    })
    .await?;

    let rss_before = status_kib("self", "VmRSS:")?;
    let broker_before = status_kib(&broker_pid, "VmRSS:")?;
    // mosquitto_pub -l publishes each stdin line as one message; a separate
    // process, so its buffers do not count against this one.
    let mut publisher = Command::new("mosquitto_pub")
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &broker.port.to_string(),
            "-t",
            &topic,
            "-q",
            "1",
            "-l",
        ])
        .stdin(Stdio::piped())
        .spawn()
        .context("starting mosquitto_pub")?;
    let started = Instant::now();
    {
        let mut stdin = publisher.stdin.take().context("publisher stdin")?;
        let pad = "x".repeat(PAYLOAD - 10);
        for i in 0..MESSAGES {
            writeln!(stdin, "{i:09} {pad}")?;
        }
    }
    let published = publisher.wait()?;
    assert!(published.success(), "mosquitto_pub failed: {published}");
    let publish_time = started.elapsed();

    // The owner waits for a slot: it took the queue's worth and a handful in
    // flight, and nothing more while nobody reads.
    let counters = Arc::clone(&ingestion.counters);
    poll::within(Duration::from_secs(10))
        .every(poll::QUICK)
        .until("the queue is full", || {
            counters.snapshot().received > CAPACITY as u64
        })
        .await?;
    // The model stalls for a while (this is the scenario, not a wait for a
    // condition): a client without back-pressure would take thousands of
    // messages from the broker meanwhile.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let stalled = counters.snapshot();
    let broker_held = status_kib(&broker_pid, "VmRSS:")?;
    let rss_held = status_kib("self", "VmRSS:")?;
    let peak_held = status_kib("self", "VmHWM:")?;
    // Queue + the rest of one socket read waiting to enter it (rumqttc reads
    // at most 10 packets at once) + what the broker sends before it wants
    // acks (max_inflight_messages 20).
    assert!(
        stalled.received <= (CAPACITY + 1 + 10 + 20) as u64,
        "{stalled:?}"
    );
    assert_eq!(stalled.queue_peak, CAPACITY as u64);
    let backlog_kib = (MESSAGES * PAYLOAD / 1024) as u64;

    // Now drain: every message arrives, in order, and the queue never held
    // more than its capacity.
    let drain_started = Instant::now();
    for i in 0..MESSAGES {
        let m = next_message(&mut ingestion.messages, Duration::from_secs(20)).await?;
        let seq: usize = std::str::from_utf8(&m.payload[..9])?.parse()?;
        assert_eq!(seq, i, "messages arrive in publish order, none lost");
    }
    let drain_time = drain_started.elapsed();
    // The counter moves just after a message enters the queue.
    poll::within(Duration::from_secs(5))
        .every(poll::QUICK)
        .until("every message is counted", || {
            counters.snapshot().admitted == MESSAGES as u64
        })
        .await?;
    let done = counters.snapshot();
    let peak_after = status_kib("self", "VmHWM:")?;
    println!(
        "flood: {MESSAGES} x {PAYLOAD} B = {backlog_kib} KiB, queue capacity {CAPACITY}; \
         published in {publish_time:?}; client took {} while blocked; \
         client RSS {rss_before} -> {rss_held} KiB (peak {peak_held} KiB, {peak_after} KiB after drain); \
         broker RSS {broker_before} -> {broker_held} KiB while holding the backlog; \
         drained in {drain_time:?}; queue peak {}, full-queue waits {}, blocked {} ms",
        stalled.received,
        done.queue_peak,
        done.queue_full_waits,
        done.queue_blocked_micros / 1000,
    );
    assert_eq!(done.admitted, MESSAGES as u64);
    assert!(done.queue_peak <= CAPACITY as u64);
    assert!(done.queue_full_waits > 0);
    // The backlog waited in the broker, not here.
    assert!(
        broker_held - broker_before > backlog_kib / 2,
        "broker held {broker_held} KiB"
    );
    assert!(
        rss_held.saturating_sub(rss_before) < backlog_kib / 4,
        "client grew to {rss_held} KiB"
    );
    ingestion.control.stop().await;
    Ok(())
}
