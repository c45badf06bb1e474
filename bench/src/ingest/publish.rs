//! The publishing side of a measured run: live beside the consumer, or as
//! a backlog to a paused consumer.

use std::time::{Duration, Instant};

use anyhow::Result;

use crate::{db::Monitor, mqtt::Publisher};

use super::{IngestParams, deadline_for};

/// Starts a measured run. Live: the clock starts now and publishing runs
/// beside the consumer. Backlog: the consumer is paused while the whole run
/// is published and acknowledged by the broker, then resumed, and the clock
/// starts at the resume; returns how long publishing took.
pub(super) async fn start_run(
    publisher: &mut Publisher,
    monitors: &[Monitor],
    p: &IngestParams,
    consumer: u32,
    backlog: bool,
) -> Result<(Instant, Option<Duration>)> {
    if !backlog {
        return Ok((Instant::now(), None));
    }
    pause(consumer);
    let t = Instant::now();
    let published = publish(publisher, monitors, p, t).await;
    let started = Instant::now();
    resume(consumer);
    Ok((started, Some(published?)))
}

/// Publishes the run unless the backlog was published already.
pub(super) async fn publish_if_live(
    publisher: &mut Publisher,
    monitors: &[Monitor],
    p: &IngestParams,
    started: Instant,
    published: Option<Duration>,
) -> Result<Duration> {
    match published {
        Some(took) => Ok(took),
        None => publish(publisher, monitors, p, started).await,
    }
}

fn pause(pid: u32) {
    // SAFETY: kill only sends a signal to our own child.
    unsafe {
        libc::kill(pid as libc::pid_t, libc::SIGSTOP);
    }
}

pub(super) fn resume(pid: u32) {
    // SAFETY: as above.
    unsafe {
        libc::kill(pid as libc::pid_t, libc::SIGCONT);
    }
}

/// Publishes one run's frames; returns when the broker has them all.
async fn publish(
    publisher: &mut Publisher,
    monitors: &[Monitor],
    p: &IngestParams,
    started: Instant,
) -> Result<Duration> {
    publisher
        .frames(monitors, p.readings, p.frames_per_monitor())
        .await?;
    publisher.flush(deadline_for(p)).await?;
    Ok(started.elapsed())
}
