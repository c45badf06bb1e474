//! The plant's publisher: played on its own thread, gated by the ticks the
//! monitors have taken in, and stopped (with its report) when the run ends.

use std::{
    sync::Arc,
    sync::atomic::{AtomicU64, Ordering},
    time::Duration,
};

use anyhow::Context as _;
use radar_demo::{Plant, PublishOptions, PublishReport, READINGS, publish_plant};
use tokio::sync::{oneshot, watch};

use super::{DemoArgs, report::Tracked};
use crate::monitor::ModelView;

/// How long the publisher may take to stop and flush.
const PUBLISHER_DEADLINE: Duration = Duration::from_secs(15);

pub(super) type ReportReceiver = oneshot::Receiver<Result<PublishReport, String>>;

/// Asks a running publisher to stop and waits for its report.
pub(super) async fn stop_publisher(
    stop: &watch::Sender<bool>,
    report_rx: Option<ReportReceiver>,
) -> Option<Result<PublishReport, String>> {
    let report_rx = report_rx?;
    let _ = stop.send(true);
    match tokio::time::timeout(PUBLISHER_DEADLINE, report_rx).await {
        Ok(Ok(result)) => Some(result),
        Ok(Err(_)) => Some(Err(
            "the publisher thread ended without a report".to_string()
        )),
        Err(_) => Some(Err(format!(
            "the publisher did not stop within {} s",
            PUBLISHER_DEADLINE.as_secs()
        ))),
    }
}

/// Plays the plant on its own thread (its own timer, unaffected by the
/// worker's load); the report arrives when it stops.
pub(super) fn spawn_publisher(
    plant: &Plant,
    args: &DemoArgs,
    port: u16,
    stop: watch::Receiver<bool>,
    taken_in: watch::Receiver<u64>,
) -> anyhow::Result<ReportReceiver> {
    let (report_tx, report_rx) = oneshot::channel();
    let mut plant = plant.clone();
    let options = PublishOptions {
        host: "127.0.0.1".to_string(),
        port,
        client_id: format!("radar-demo-plant-{}", std::process::id()),
        speed: args.speed,
        max_ticks: args.max_ticks(),
        taken_in: Some(taken_in),
    };
    std::thread::Builder::new()
        .name("demo-plant".to_string())
        .spawn(move || {
            let result = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| format!("cannot start the publisher's runtime: {e}"))
                .and_then(|runtime| {
                    runtime
                        .block_on(publish_plant(&mut plant, &options, stop))
                        .map_err(|e| e.to_string())
                });
            let _ = report_tx.send(result);
        })
        .context("starting the plant thread")?;
    Ok(report_rx)
}

/// Keeps `taken` at the number of ticks every running monitor has taken
/// from its queue since now, for the publisher's gate. A monitor whose model
/// stops (its view's sender is gone) no longer holds the plant back.
pub(super) fn count_ticks_taken_in(tracked: &[Tracked], taken: watch::Sender<u64>) {
    let models: Vec<watch::Receiver<ModelView>> = tracked
        .iter()
        .filter_map(|t| t.watch.as_ref().map(|w| w.model.clone()))
        .collect();
    let slots: Arc<[AtomicU64]> = models.iter().map(|_| AtomicU64::new(0)).collect();
    let taken = Arc::new(taken);
    let per_tick = READINGS.len() as u64;
    for (i, mut model) in models.into_iter().enumerate() {
        let base = model.borrow().consumed;
        let slots = slots.clone();
        let taken = taken.clone();
        actix_rt::spawn(async move {
            let publish = |ticks: u64| {
                slots[i].store(ticks, Ordering::Relaxed);
                let all = slots
                    .iter()
                    .map(|s| s.load(Ordering::Relaxed))
                    .min()
                    .unwrap_or(u64::MAX);
                taken.send_if_modified(|v| std::mem::replace(v, all) != all);
            };
            loop {
                let consumed = model.borrow_and_update().consumed;
                publish(consumed.saturating_sub(base) / per_tick);
                if model.changed().await.is_err() {
                    publish(u64::MAX);
                    return;
                }
            }
        });
    }
}
