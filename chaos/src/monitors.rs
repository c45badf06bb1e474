//! The run's monitors: created through the real `radar monitor create`
//! until every shard has one, then waited for until each committed a
//! snapshot past calibration, before any fault.

use std::{collections::BTreeMap, fs, time::Duration};

use anyhow::{Context, Result, bail};
use radar_testkit::poll;
use uuid::Uuid;

use crate::{
    fleet::{self, WorkerEnv, radar_cli},
    observe,
    publisher::Feed,
};

/// Creates monitors through `radar monitor create` until there are at least
/// `wanted` and every shard has one.
pub(super) async fn create_monitors(
    env: &WorkerEnv,
    wanted: usize,
) -> Result<(BTreeMap<Uuid, u32>, Vec<Feed>)> {
    let mut monitors = BTreeMap::new();
    let mut feeds = Vec::new();
    let shard_of = |id: Uuid| {
        (1..=env.shards)
            .find(|&index| {
                radar::runtime::owns(
                    radar::config::Shard {
                        index,
                        count: env.shards,
                    },
                    id,
                )
            })
            .unwrap_or(1)
    };
    while monitors.len() < wanted || (1..=env.shards).any(|s| !monitors.values().any(|&v| v == s)) {
        if monitors.len() >= wanted + 20 {
            bail!("could not give every shard a monitor");
        }
        let n = monitors.len();
        let prefix = format!("chaos/{}/m{n}", Uuid::new_v4().simple());
        let path = env.dir.join(format!("m{n}.toml"));
        // Calibrated after 40 frames (4 s at 10 per second).
        fs::write(
            &path,
            radar_testkit::monitor::two_readings(&format!("chaos-m{n}"), &prefix),
        )?;
        let path = path.display().to_string();
        let (ok, out) = radar_cli(
            env,
            &["monitor", "create", "--config", &path],
            Duration::from_secs(30),
        )
        .await?;
        if !ok {
            bail!(
                "radar monitor create failed; see {}",
                env.dir.join(fleet::CLI_LOG).display()
            );
        }
        let id: Uuid = out
            .trim()
            .parse()
            .context("radar monitor create printed no id")?;
        monitors.insert(id, shard_of(id));
        feeds.push(Feed {
            monitor: id,
            prefix,
        });
    }
    Ok((monitors, feeds))
}

/// Waits until every monitor has a committed snapshot past calibration.
pub(super) async fn warm_up(
    db_url: &str,
    monitors: &BTreeMap<Uuid, u32>,
    within: Duration,
) -> Result<()> {
    poll::within(within)
        .every(Duration::from_millis(250))
        .try_wait_async(
            "every monitor calibrates before any fault (60 frames committed)",
            async || {
                let rows = observe::snapshot_rows(db_url).await.unwrap_or_default();
                let ready = monitors.keys().all(|m| {
                    rows.iter()
                        .any(|r| r.service_id == *m && r.processed_count >= 60)
                });
                let committed = || {
                    rows.iter()
                        .map(|r| (r.service_id, r.processed_count))
                        .collect::<Vec<_>>()
                };
                poll::check(ready, committed)
            },
        )
        .await
}
