//! A broker that refuses one subscription (SUBACK 0x80) leaves the monitor
//! not connected, with an error naming the topic, and it keeps retrying.

use std::{sync::atomic::Ordering, time::Duration};

use anyhow::Result;
use radar::mqtt::{ConnectionEvent, spawn};
use radar_testkit::{
    broker::FakeBroker, ingest::events_until, ingest::readings, ingest::test_options, poll,
};

const WITHIN: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_subscription_keeps_the_monitor_disconnected_and_retrying() -> Result<()> {
    let fake = FakeBroker::start("plant/forbidden").await?;
    let topics = vec!["plant/allowed".to_string(), "plant/forbidden".to_string()];
    let mut ingestion = spawn(test_options(&fake.url()), &readings(&topics, &[]))?;

    let seen = events_until(&mut ingestion.events, WITHIN, |e| {
        matches!(
            e,
            ConnectionEvent::Retrying {
                next_attempt: 4,
                ..
            }
        )
    })
    .await?;
    assert!(
        !seen
            .iter()
            .any(|e| matches!(e, ConnectionEvent::Connected { .. })),
        "{seen:#?}"
    );
    let refused: Vec<_> = seen
        .iter()
        .filter_map(|e| match e {
            ConnectionEvent::SubscriptionRefused {
                topic,
                required: true,
                ..
            } => Some(topic.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(refused, ["plant/forbidden"; 3]);
    let reasons: Vec<_> = seen
        .iter()
        .filter_map(|e| match e {
            ConnectionEvent::Retrying {
                reason, retry_in, ..
            } => Some((reason.clone(), *retry_in)),
            _ => None,
        })
        .collect();
    assert!(
        reasons
            .iter()
            .all(|(r, _)| r.contains("\"plant/forbidden\"") && r.contains("0x80")),
        "{reasons:#?}"
    );
    // The shrunk schedule: 50, 100, 200 ms.
    let waits: Vec<u128> = reasons.iter().map(|(_, d)| d.as_millis()).collect();
    assert_eq!(waits, [50, 100, 200]);

    let status = ingestion.status.borrow().clone();
    assert!(!status.connected);
    assert_eq!(status.failed_attempts, 3);
    assert!(
        status
            .last_error
            .unwrap_or_default()
            .contains("plant/forbidden")
    );
    let connections = std::sync::Arc::clone(&fake.connections);
    poll::within(WITHIN)
        .every(poll::QUICK)
        .until("the client tried a fourth time", || {
            connections.load(Ordering::SeqCst) >= 4
        })
        .await?;
    assert!(fake.refusals.load(Ordering::SeqCst) >= 3);
    let counts = ingestion.counters.snapshot();
    assert_eq!(counts.connections, 0);
    assert!(counts.subscription_refusals >= 3);
    ingestion.control.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_optional_reading_is_reported_without_holding_back_the_connection() -> Result<()>
{
    let fake = FakeBroker::start("plant/optional").await?;
    let topics = vec!["plant/required".to_string(), "plant/optional".to_string()];
    let mut ingestion = spawn(
        test_options(&fake.url()),
        &readings(&topics, &["plant/optional"]),
    )?;
    let seen = events_until(&mut ingestion.events, WITHIN, |e| {
        matches!(e, ConnectionEvent::SubscriptionRefused { .. })
    })
    .await?;
    assert!(
        matches!(
            seen.as_slice(),
            [
                ConnectionEvent::Connected { attempt: 1, .. },
                ConnectionEvent::SubscriptionRefused { topic, required: false, .. },
            ] if topic == "plant/optional"
        ),
        "{seen:#?}"
    );
    assert!(ingestion.status.borrow().connected);
    assert_eq!(fake.connections.load(Ordering::SeqCst), 1);
    ingestion.control.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_during_a_long_backoff_ends_ingestion_at_once() -> Result<()> {
    let fake = FakeBroker::start("plant/forbidden").await?;
    let topics = vec!["plant/forbidden".to_string()];
    let mut options = test_options(&fake.url());
    options.backoff = radar::mqtt::Backoff::PRODUCTION;
    let mut ingestion = spawn(options, &readings(&topics, &[]))?;
    let seen = events_until(&mut ingestion.events, WITHIN, |e| {
        matches!(e, ConnectionEvent::Retrying { .. })
    })
    .await?;
    assert!(matches!(
        seen.last(),
        Some(ConnectionEvent::Retrying { retry_in, next_attempt: 2, .. }) if retry_in.as_secs() == 5
    ));
    let started = std::time::Instant::now();
    tokio::time::timeout(WITHIN, ingestion.control.stop()).await?;
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "stop waited for the backoff"
    );
    assert!(ingestion.messages.recv().await.is_none());
    Ok(())
}
