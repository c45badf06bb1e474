//! The whole ingestion path against a private Mosquitto: network side into
//! the bounded queue, model side parsing and aligning into frames, the
//! connection events kept in the coverage history, and watermarks that
//! refuse a retained message the broker delivers again after a reconnect.

use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use chrono::{DateTime, Utc};
use radar::{
    align::{Admission, AlignRejection, Aligner, AlignmentPolicy, Frame},
    coverage::{CoverageHistory, GapCause},
    mqtt::{
        ConnectionEvent, Ingestion,
        payload::{PayloadFormat, PayloadRejection},
        spawn,
    },
};
use radar_testkit::{
    broker::Mosquitto, ingest::events_until, ingest::next_message, ingest::readings,
    ingest::test_options, ingest::unique_prefix, publisher::publish,
};

const WITHIN: Duration = Duration::from_secs(15);
const MAX_BYTES: usize = 4096;

/// The model side of one monitor, as the runtime will run it.
struct Model {
    aligner: Aligner,
    coverage: CoverageHistory,
}

impl Model {
    fn new(readings: &[radar::config::ReadingConfig]) -> Result<Self> {
        Ok(Self {
            aligner: Aligner::new(AlignmentPolicy::default(), readings)?,
            coverage: CoverageHistory::fresh(Utc::now()),
        })
    }

    /// Takes the next queued message through parsing and alignment.
    async fn next(&mut self, ingestion: &mut Ingestion) -> Result<(Admission, bool)> {
        let message = next_message(&mut ingestion.messages, WITHIN).await?;
        let observation = message.observation(&PayloadFormat::default(), MAX_BYTES)?;
        let admission = self
            .aligner
            .admit(observation, message.processing_time(Instant::now()));
        if let Admission::FrameReady(frame) = &admission {
            self.coverage.record_frame(frame.ts);
        }
        Ok((admission, message.retained))
    }

    /// Connection events until `done`, each recorded in the coverage history.
    async fn events_until(
        &mut self,
        ingestion: &mut Ingestion,
        done: impl Fn(&ConnectionEvent) -> bool,
    ) -> Result<ConnectionEvent> {
        let seen = events_until(&mut ingestion.events, WITHIN, done).await?;
        for event in &seen {
            event.record_in(&mut self.coverage);
        }
        Ok(seen
            .last()
            .cloned()
            .unwrap_or(ConnectionEvent::Stopped { at: Utc::now() }))
    }
}

fn body(ts: DateTime<Utc>, value: f64) -> Vec<u8> {
    format!(r#"{{"ts": {}, "value": {value}}}"#, ts.timestamp_millis()).into_bytes()
}

fn is_connected(e: &ConnectionEvent) -> bool {
    matches!(e, ConnectionEvent::Connected { .. })
}

fn frame(admission: Admission) -> Result<Frame> {
    match admission {
        Admission::FrameReady(frame) => Ok(frame),
        other => bail!("expected a frame, got {other:?}"),
    }
}

/// Publishes one value per required reading and returns the frame.
async fn publish_pair(
    broker: &Mosquitto,
    topics: &[String],
    model: &mut Model,
    ingestion: &mut Ingestion,
    values: (f64, f64),
) -> Result<Frame> {
    let ts = Utc::now();
    publish(broker.port, &topics[0], &body(ts, values.0), false).await?;
    publish(broker.port, &topics[1], &body(ts, values.1), false).await?;
    assert_eq!(model.next(ingestion).await?.0, Admission::Held);
    frame(model.next(ingestion).await?.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observations_flow_through_the_queue_into_frames() -> Result<()> {
    let broker = Mosquitto::start(1000).await?;
    let prefix = unique_prefix();
    let topics = vec![
        format!("{prefix}/temp"),
        format!("{prefix}/pressure"),
        format!("{prefix}/humidity"),
    ];
    let readings = readings(&topics, &[topics[2].as_str()]);
    let mut model = Model::new(&readings)?;
    let mut ingestion = spawn(test_options(&broker.url()), &readings)?;
    model.events_until(&mut ingestion, is_connected).await?;

    let ts = Utc::now();
    publish(broker.port, &topics[2], &body(ts, 55.0), false).await?;
    assert_eq!(model.next(&mut ingestion).await?.0, Admission::Recorded);
    publish(broker.port, &topics[0], b"not json", false).await?;
    let bad = next_message(&mut ingestion.messages, WITHIN).await?;
    assert_eq!(
        bad.observation(&PayloadFormat::default(), MAX_BYTES),
        Err(PayloadRejection::NotJson)
    );

    let f = publish_pair(&broker, &topics, &mut model, &mut ingestion, (21.5, 1013.0)).await?;
    assert_eq!(f.values, [21.5, 1013.0]);
    assert_eq!(model.coverage.covered_from, Some(f.ts));
    assert!(
        model.coverage.active_causes().is_empty(),
        "the first frame ends the startup gap"
    );
    assert_eq!(model.aligner.counters().frames, 1);
    ingestion.control.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_outage_becomes_a_coverage_gap_and_frames_resume() -> Result<()> {
    let mut broker = Mosquitto::start(1000).await?;
    let prefix = unique_prefix();
    let topics = vec![format!("{prefix}/temp"), format!("{prefix}/pressure")];
    let readings = readings(&topics, &[]);
    let mut model = Model::new(&readings)?;
    let mut ingestion = spawn(test_options(&broker.url()), &readings)?;
    model.events_until(&mut ingestion, is_connected).await?;
    publish_pair(&broker, &topics, &mut model, &mut ingestion, (1.0, 2.0)).await?;
    let version = model.coverage.version;

    broker.kill()?;
    let down = model
        .events_until(&mut ingestion, |e| {
            matches!(e, ConnectionEvent::Disconnected { .. })
        })
        .await?;
    assert_eq!(model.coverage.active_causes(), [GapCause::MqttOutage]);
    broker.restart().await?;
    let up = model.events_until(&mut ingestion, is_connected).await?;
    let (ConnectionEvent::Disconnected { at: from, .. }, ConnectionEvent::Connected { at: to, .. }) =
        (down, up)
    else {
        bail!("unexpected events");
    };
    let gap = model.coverage.gaps.last().cloned().expect("an outage gap");
    assert_eq!(
        (gap.cause, gap.from, gap.to),
        (GapCause::MqttOutage, from, Some(to))
    );
    assert_eq!(
        model.coverage.version,
        version + 2,
        "opening and closing are two changes"
    );

    let f = publish_pair(&broker, &topics, &mut model, &mut ingestion, (3.0, 4.0)).await?;
    assert_eq!(f.values, [3.0, 4.0]);
    assert_eq!(model.aligner.counters().frames, 2);
    ingestion.control.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retained_message_delivered_again_after_reconnect_is_rejected_as_stale() -> Result<()> {
    let mut broker = Mosquitto::start_persistent().await?;
    let prefix = unique_prefix();
    let topics = vec![format!("{prefix}/temp"), format!("{prefix}/pressure")];
    let readings = readings(&topics, &[]);
    // Payloads carry milliseconds; so does the watermark.
    let retained_ts = DateTime::from_timestamp_millis(Utc::now().timestamp_millis()).expect("now");
    publish(broker.port, &topics[0], &body(retained_ts, 9.0), true).await?;

    let mut model = Model::new(&readings)?;
    let mut ingestion = spawn(test_options(&broker.url()), &readings)?;
    model.events_until(&mut ingestion, is_connected).await?;
    // The broker hands the retained value to the new subscriber at once.
    assert_eq!(model.next(&mut ingestion).await?, (Admission::Held, true));
    assert_eq!(model.aligner.watermarks().get("temp"), Some(retained_ts));

    // A broker restart (persistence keeps the retained message): after
    // re-subscribing, the same message arrives again.
    broker.restart_gracefully().await?;
    model
        .events_until(&mut ingestion, |e| {
            matches!(e, ConnectionEvent::Disconnected { .. })
        })
        .await?;
    model.events_until(&mut ingestion, is_connected).await?;
    let again = model.next(&mut ingestion).await;
    let again = again.map_err(|e| anyhow::anyhow!("{e}; broker log:\n{}", broker.log()))?;
    assert_eq!(again, (Admission::Rejected(AlignRejection::Stale), true));
    assert_eq!(model.aligner.counters().stale, 1);
    assert_eq!(model.aligner.watermarks().get("temp"), Some(retained_ts));

    // Newer observations still make frames.
    let f = publish_pair(&broker, &topics, &mut model, &mut ingestion, (10.0, 20.0)).await?;
    assert_eq!(f.values, [10.0, 20.0]);
    ingestion.control.stop().await;
    Ok(())
}
