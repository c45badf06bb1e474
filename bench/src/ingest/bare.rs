//! The ceiling's side: bare rumqttc subscribers that only count.

use std::time::Duration;

use anyhow::Result;

use crate::{
    broker::Mosquitto,
    db::Monitor,
    mqtt::{BareProcess, Publisher},
    system,
};

use super::{
    Consumer, Env, IngestParams, RunResult,
    publish::{publish_if_live, start_run},
    sample::sample_until,
};

/// One repetition of the ceiling: starts the bare subscribers, measures
/// their live and backlog runs and stops them.
pub(super) async fn bare_runs(
    env: &Env,
    broker: &Mosquitto,
    publisher: &mut Publisher,
    monitors: &[Monitor],
    p: &IngestParams,
    rep: usize,
    interval: Duration,
) -> Result<Vec<RunResult>> {
    let bare = BareProcess::start(
        &env.bench_bin,
        broker.port,
        monitors,
        p.readings,
        &env.log_dir,
    )
    .await?;
    let mut results = Vec::new();
    for backlog in [false, true] {
        let run = bare_run(&bare, publisher, monitors, p, rep, interval, backlog).await;
        match run {
            Ok(run) => results.push(run),
            Err(e) => {
                bare.stop().await;
                return Err(e);
            }
        }
    }
    bare.stop().await;
    Ok(results)
}

/// The ceiling's measured run.
async fn bare_run(
    bare: &BareProcess,
    publisher: &mut Publisher,
    monitors: &[Monitor],
    p: &IngestParams,
    rep: usize,
    interval: Duration,
    backlog: bool,
) -> Result<RunResult> {
    let before = bare.received();
    let cpu_before = system::cpu_time(bare.pid());
    let (started, publish_elapsed) = start_run(publisher, monitors, p, bare.pid(), backlog).await?;
    let (published, consumed) = tokio::join!(
        publish_if_live(publisher, monitors, p, started, publish_elapsed),
        sample_until(started, interval.min(p.poll), p, || async {
            Ok(bare.received() - before)
        })
    );
    let cpu = cpu_before
        .zip(system::cpu_time(bare.pid()))
        .map(|(b, a)| a.saturating_sub(b));
    let observations = bare.received() - before;
    let publish_elapsed = published?;
    let (elapsed, complete) = consumed?;
    Ok(RunResult {
        consumer: Consumer::Bare,
        rep,
        backlog,
        observations,
        frames: observations / p.readings as u64,
        elapsed,
        publish_elapsed,
        complete,
        load_1m: system::load_1m(),
        consumer_cpu: cpu,
        rejected: 0,
        flagged: 0,
        checkpoints: 0,
        peak_rss_kib: None,
        model_sleeps: None,
    })
}
