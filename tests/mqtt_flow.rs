//! Messages published on a real (private) Mosquitto reach the model side
//! through the bounded ingress queue, stamped and mapped to their reading.

use std::time::{Duration, Instant};

use anyhow::Result;
use chrono::Utc;
use radar::mqtt::{ConnectionEvent, spawn};
use radar_testkit::{
    broker::Mosquitto, ingest::events_until, ingest::next_message, ingest::readings,
    ingest::test_options, ingest::unique_prefix, poll, publisher::publish,
};

const WITHIN: Duration = Duration::from_secs(10);

fn is_connected(e: &ConnectionEvent) -> bool {
    matches!(e, ConnectionEvent::Connected { .. })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn published_messages_arrive_stamped_and_mapped_to_their_reading() -> Result<()> {
    let broker = Mosquitto::start(1000).await?;
    let prefix = unique_prefix();
    let topics = vec![format!("{prefix}/a"), format!("{prefix}/b")];
    let mut ingestion = spawn(test_options(&broker.url()), &readings(&topics, &[]))?;
    events_until(&mut ingestion.events, WITHIN, is_connected).await?;
    assert!(ingestion.status.borrow().connected);

    let before = (Utc::now(), Instant::now());
    publish(
        broker.port,
        &topics[1],
        br#"{"ts": 1, "value": 2.5}"#,
        false,
    )
    .await?;
    publish(
        broker.port,
        &topics[0],
        br#"{"ts": 2, "value": 3.5}"#,
        false,
    )
    .await?;
    let b = next_message(&mut ingestion.messages, WITHIN).await?;
    let a = next_message(&mut ingestion.messages, WITHIN).await?;
    assert_eq!(
        (b.reading, &b.payload[..]),
        (1, &br#"{"ts": 1, "value": 2.5}"#[..])
    );
    assert_eq!(
        (a.reading, &a.payload[..]),
        (0, &br#"{"ts": 2, "value": 3.5}"#[..])
    );
    for m in [&a, &b] {
        assert!(m.received_at >= before.0 && m.received_at <= Utc::now());
        assert!(m.received_instant >= before.1 && m.received_instant <= Instant::now());
        assert!(!m.retained);
    }
    let counters = std::sync::Arc::clone(&ingestion.counters);
    poll::within(WITHIN)
        .every(poll::QUICK)
        .until("both messages are counted", || {
            counters.snapshot().admitted == 2
        })
        .await?;
    let counts = counters.snapshot();
    assert_eq!(
        (counts.received, counts.admitted, counts.connections),
        (2, 2, 1)
    );
    ingestion.control.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_payload_is_counted_and_the_connection_survives() -> Result<()> {
    let broker = Mosquitto::start(1000).await?;
    let topic = format!("{}/big", unique_prefix());
    let mut options = test_options(&broker.url());
    options.max_payload_bytes = 1024;
    // Above rumqttc's 10 KiB default: with the default limit this message
    // would drop the connection instead of being counted.
    let big = vec![b'x'; 200 * 1024];
    let mut ingestion = spawn(options, &readings(std::slice::from_ref(&topic), &[]))?;
    events_until(&mut ingestion.events, WITHIN, is_connected).await?;

    publish(broker.port, &topic, &big, false).await?;
    publish(broker.port, &topic, b"small", false).await?;
    let m = next_message(&mut ingestion.messages, WITHIN).await?;
    assert_eq!(&m.payload[..], b"small");
    // The counter moves just after the message enters the queue.
    let counters = std::sync::Arc::clone(&ingestion.counters);
    poll::within(WITHIN)
        .every(poll::QUICK)
        .until("both messages are counted", || {
            counters.snapshot().admitted == 1
        })
        .await?;
    let counts = counters.snapshot();
    assert_eq!(
        (counts.received, counts.too_large, counts.admitted),
        (2, 1, 1)
    );
    assert!(
        ingestion.events.try_recv().is_err(),
        "no disconnect expected"
    );
    ingestion.control.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_unsubscribes_disconnects_and_closes_the_queue() -> Result<()> {
    let broker = Mosquitto::start(1000).await?;
    let topic = format!("{}/t", unique_prefix());
    let mut options = test_options(&broker.url());
    options.queue_capacity = 1;
    let client_id = options.client_id.clone();
    let mut ingestion = spawn(options, &readings(std::slice::from_ref(&topic), &[]))?;
    events_until(&mut ingestion.events, WITHIN, is_connected).await?;

    // Fill the one-slot queue and leave the owner waiting for room.
    for i in 0..3 {
        publish(broker.port, &topic, format!("{i}").as_bytes(), false).await?;
    }
    let counters = std::sync::Arc::clone(&ingestion.counters);
    // One message queued, at least one more received (the rest of its socket
    // read with it) and waiting for room.
    poll::within(WITHIN)
        .every(poll::QUICK)
        .until("the owner waits for a queue slot", || {
            let c = counters.snapshot();
            c.admitted == 1 && c.received >= 2
        })
        .await?;

    let stopped = tokio::time::timeout(WITHIN, ingestion.control.stop()).await;
    assert!(stopped.is_ok(), "stop must not hang on a full queue");
    assert_eq!(
        &next_message(&mut ingestion.messages, WITHIN).await?.payload[..],
        b"0"
    );
    assert!(
        ingestion.messages.recv().await.is_none(),
        "the queue ends after a stop"
    );
    let rest = events_until(&mut ingestion.events, WITHIN, |e| {
        matches!(e, ConnectionEvent::Stopped { .. })
    })
    .await?;
    assert!(
        !rest
            .iter()
            .any(|e| matches!(e, ConnectionEvent::Disconnected { .. }))
    );
    assert!(!ingestion.status.borrow().connected);
    // Mosquitto logs a DISCONNECT as "disconnected" and a dropped socket as
    // "closed its connection"; it may log after the client has gone.
    let polite = format!("Client {client_id} disconnected");
    poll::within(WITHIN)
        .every(poll::QUICK)
        .until("the broker logged a DISCONNECT", || {
            broker.log().contains(&polite)
        })
        .await?;
    assert!(
        !broker
            .log()
            .contains(&format!("Client {client_id} closed its connection"))
    );
    // Mosquitto logs an UNSUBSCRIBE as "<client> <topic>" (a SUBSCRIBE
    // carries the QoS between them).
    assert!(
        broker.log().contains(&format!("{client_id} {topic}\n")),
        "{}",
        broker.log()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_overlapping_workers_of_one_monitor_do_not_kick_each_other_off() -> Result<()> {
    let broker = Mosquitto::start(1000).await?;
    let topic = format!("{}/t", unique_prefix());
    let monitor = uuid::Uuid::new_v4();
    let mut workers = Vec::new();
    for worker in ["worker-old", "worker-new"] {
        let mut options = radar::mqtt::IngestOptions::new(&broker.url(), worker, monitor)?;
        options.backoff = test_options(&broker.url()).backoff;
        let mut ingestion = spawn(options, &readings(std::slice::from_ref(&topic), &[]))?;
        events_until(&mut ingestion.events, WITHIN, is_connected).await?;
        workers.push(ingestion);
    }
    publish(broker.port, &topic, b"both", false).await?;
    for ingestion in &mut workers {
        assert_eq!(
            &next_message(&mut ingestion.messages, WITHIN).await?.payload[..],
            b"both"
        );
        assert!(
            ingestion.events.try_recv().is_err(),
            "no worker was disconnected"
        );
        assert!(ingestion.status.borrow().connected);
    }
    for ingestion in workers {
        ingestion.control.stop().await;
    }
    Ok(())
}
