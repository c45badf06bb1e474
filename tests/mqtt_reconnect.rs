//! The reconnect owner against a real Mosquitto that is killed and
//! restarted on the same port, and one that is not up yet at start.

use std::time::Duration;

use anyhow::Result;
use radar::mqtt::{ConnectionEvent, spawn};
use radar_testkit::{
    broker::Mosquitto, broker::free_port, ingest::events_until, ingest::next_message,
    ingest::readings, ingest::test_options, ingest::unique_prefix, publisher::publish,
};

const WITHIN: Duration = Duration::from_secs(15);

fn is_connected(e: &ConnectionEvent) -> bool {
    matches!(e, ConnectionEvent::Connected { .. })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_broker_is_reported_and_the_client_resubscribes_after_restart() -> Result<()> {
    let mut broker = Mosquitto::start(1000).await?;
    let prefix = unique_prefix();
    let topics = vec![format!("{prefix}/a"), format!("{prefix}/b")];
    let mut ingestion = spawn(test_options(&broker.url()), &readings(&topics, &[]))?;
    events_until(&mut ingestion.events, WITHIN, is_connected).await?;
    publish(broker.port, &topics[0], b"before", false).await?;
    assert_eq!(
        &next_message(&mut ingestion.messages, WITHIN).await?.payload[..],
        b"before"
    );

    broker.kill()?;
    let dropped = events_until(&mut ingestion.events, WITHIN, |e| {
        matches!(e, ConnectionEvent::Disconnected { .. })
    })
    .await?;
    let Some(ConnectionEvent::Disconnected { at: down_at, .. }) = dropped.last().cloned() else {
        unreachable!("events_until returns the matching event last");
    };
    assert!(!ingestion.status.borrow().connected);
    // Let a few attempts fail against the dead port before the restart.
    events_until(&mut ingestion.events, WITHIN, |e| {
        matches!(
            e,
            ConnectionEvent::Retrying {
                next_attempt: 3,
                ..
            }
        )
    })
    .await?;

    broker.restart().await?;
    let back = events_until(&mut ingestion.events, WITHIN, is_connected).await?;
    let Some(ConnectionEvent::Connected { at: up_at, attempt }) = back.last().cloned() else {
        unreachable!("events_until returns the matching event last");
    };
    assert!(up_at > down_at);
    assert!(attempt >= 3, "attempt {attempt} after {back:#?}");
    assert!(ingestion.status.borrow().connected);

    // Both subscriptions are back: the clean session kept nothing.
    publish(broker.port, &topics[1], b"after-b", false).await?;
    publish(broker.port, &topics[0], b"after-a", false).await?;
    let m1 = next_message(&mut ingestion.messages, WITHIN).await?;
    let m2 = next_message(&mut ingestion.messages, WITHIN).await?;
    assert_eq!((m1.reading, &m1.payload[..]), (1, &b"after-b"[..]));
    assert_eq!((m2.reading, &m2.payload[..]), (0, &b"after-a"[..]));
    let counts = ingestion.counters.snapshot();
    assert_eq!(counts.connections, 2);
    assert!(counts.connect_attempts >= 4);
    ingestion.control.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_initial_connection_retries_on_the_schedule_until_the_broker_is_up() -> Result<()> {
    let port = free_port()?;
    let topic = format!("{}/t", unique_prefix());
    let mut ingestion = spawn(
        test_options(&format!("mqtt://127.0.0.1:{port}")),
        &readings(&[topic], &[]),
    )?;

    let failed = events_until(&mut ingestion.events, WITHIN, |e| {
        matches!(
            e,
            ConnectionEvent::Retrying {
                next_attempt: 5,
                ..
            }
        )
    })
    .await?;
    let waits: Vec<(u32, u128)> = failed
        .iter()
        .filter_map(|e| match e {
            ConnectionEvent::Retrying {
                next_attempt,
                retry_in,
                ..
            } => Some((*next_attempt, retry_in.as_millis())),
            _ => None,
        })
        .collect();
    assert_eq!(waits, [(2, 50), (3, 100), (4, 200), (5, 400)]);
    assert!(
        !failed
            .iter()
            .any(|e| matches!(e, ConnectionEvent::Disconnected { .. }))
    );
    assert_eq!(ingestion.status.borrow().failed_attempts, 4);

    let _broker = Mosquitto::start_on(port, 1000).await?;
    let up = events_until(&mut ingestion.events, WITHIN, is_connected).await?;
    assert!(matches!(up.last(), Some(ConnectionEvent::Connected { attempt, .. }) if *attempt >= 5));
    ingestion.control.stop().await;
    Ok(())
}
