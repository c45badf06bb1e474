//! Checkpoint commits: the product's fenced writer
//! ([`radar::store::CheckpointWriter::checkpoint`]: its transaction, the
//! statement timeout, the compare-and-swap on the signature) against a bare
//! conditional `UPDATE ... WHERE signature = $x` of the same bytes on the
//! same table with the same driver (diesel-async), one statement in
//! autocommit: the ceiling.
//!
//! Snapshots are real states of the requested size, sealed ahead of time (a
//! ring of distinct signatures per monitor), so only the commit is timed.
//! Blocks of product and bare commits alternate, the order swapped every
//! round, with `concurrency` monitors committing side by side.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};
use chrono::{TimeDelta, Utc};
use diesel::sql_types::{BigInt, Bytea, Timestamptz, Uuid as SqlUuid};
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use radar::{
    snapshot::{SealedSnapshot, seal},
    store::{CheckpointStore, CheckpointWriter, Claim, PendingResults, WriteOutcome},
};

use crate::{db::BenchDb, ingest::Env, stats, system, workload};

/// Distinct snapshots per monitor; consecutive commits always differ.
const RING: usize = 16;
/// The worker's pool size (actors/src/worker/mod.rs).
const POOL_SIZE: usize = 16;

#[derive(Debug, Clone)]
pub struct CheckpointParams {
    pub sizes: Vec<usize>,
    pub concurrency: Vec<usize>,
    pub rounds: usize,
    /// Commits per monitor per block.
    pub block: usize,
}

/// One side's figures for one size and concurrency.
#[derive(Debug, Clone, Default)]
pub struct Side {
    pub latencies: Vec<Duration>,
    /// Commits per second of each block.
    pub block_rates: Vec<f64>,
}

impl Side {
    pub fn rate(&self) -> f64 {
        stats::median(&self.block_rates).unwrap_or(f64::NAN)
    }

    pub fn quantile(&mut self, q: f64) -> Duration {
        self.latencies.sort();
        stats::quantile(&self.latencies, q).unwrap_or_default()
    }
}

#[derive(Debug, Clone)]
pub struct CheckpointResult {
    pub target_bytes: usize,
    pub payload_bytes: usize,
    pub concurrency: usize,
    pub product: Side,
    pub bare: Side,
    /// Product over bare commits/s, per round.
    pub round_ratios: Vec<f64>,
    pub load_1m: f64,
}

struct ProductLane {
    writer: Option<CheckpointWriter>,
    ring: Arc<Vec<SealedSnapshot>>,
    next: usize,
}

struct BareLane {
    conn: AsyncPgConnection,
    ring: Arc<Vec<SealedSnapshot>>,
    /// Index of the snapshot the row holds now.
    current: usize,
}

pub async fn run(env: &Env, p: &CheckpointParams) -> Result<Vec<CheckpointResult>> {
    let db = BenchDb::create(&env.db_server, "checkpoint").await?;
    let result = run_in(&db, p).await;
    db.drop_db().await?;
    result
}

async fn run_in(db: &BenchDb, p: &CheckpointParams) -> Result<Vec<CheckpointResult>> {
    let pool = db.pool(POOL_SIZE).await?;
    let store = CheckpointStore::new(pool, "radar-bench");
    let mut results = Vec::new();
    for &bytes in &p.sizes {
        for &concurrency in &p.concurrency {
            let mut product = Vec::new();
            let mut bare = Vec::new();
            let mut payload_bytes = 0;
            for _ in 0..concurrency {
                let (ring, size) = sealed_ring(db, bytes).await?;
                payload_bytes = size;
                product.push(ProductLane {
                    writer: Some(claim(&store, &ring[0]).await?),
                    ring: Arc::new(ring),
                    next: 1,
                });
                let (ring, _) = sealed_ring(db, bytes).await?;
                // The bare row starts like any other: claimed by the store.
                claim(&store, &ring[0]).await?;
                bare.push(BareLane {
                    conn: db.connect().await?,
                    ring: Arc::new(ring),
                    current: 0,
                });
            }
            let mut r = CheckpointResult {
                target_bytes: bytes,
                payload_bytes,
                concurrency,
                product: Side::default(),
                bare: Side::default(),
                round_ratios: Vec::new(),
                load_1m: 0.0,
            };
            for round in 0..p.rounds {
                let (mut prate, mut brate) = (0.0, 0.0);
                for product_first in [round % 2 == 0, round % 2 != 0] {
                    if product_first {
                        let (lat, wall) = product_block(&mut product, p.block).await?;
                        prate = lat.len() as f64 / wall.as_secs_f64();
                        r.product.block_rates.push(prate);
                        r.product.latencies.extend(lat);
                    } else {
                        let (lat, wall) = bare_block(&mut bare, p.block).await?;
                        brate = lat.len() as f64 / wall.as_secs_f64();
                        r.bare.block_rates.push(brate);
                        r.bare.latencies.extend(lat);
                    }
                }
                r.round_ratios.push(prate / brate);
            }
            r.load_1m = system::load_1m();
            eprintln!(
                "  {} B x{}: product {} commits/s p50 {} ms p99 {} ms | bare {} commits/s p50 {} ms p99 {} ms | ratio {:.2} load {:.2}",
                r.payload_bytes,
                concurrency,
                stats::rate(r.product.rate()),
                stats::ms(r.product.quantile(0.5)),
                stats::ms(r.product.quantile(0.99)),
                stats::rate(r.bare.rate()),
                stats::ms(r.bare.quantile(0.5)),
                stats::ms(r.bare.quantile(0.99)),
                stats::median(&r.round_ratios).unwrap_or(f64::NAN),
                r.load_1m,
            );
            results.push(r);
        }
    }
    Ok(results)
}

/// A new monitor and a ring of distinct sealed snapshots of about `bytes`.
async fn sealed_ring(db: &BenchDb, bytes: usize) -> Result<(Vec<SealedSnapshot>, usize)> {
    let monitor = db.create_monitors(1, 2).await?.remove(0);
    let config = workload::monitor_config(
        "sized",
        &monitor.prefix,
        2,
        workload::SIZED_TRAINING_FRAMES,
        1000,
    )?;
    let sized = workload::state_of_size_for(config, bytes, 5, monitor.id)?;
    let state = sized.core.managed_state()?;
    let binding = workload::binding(&sized.core);
    let key = workload::bench_key();
    let base = Utc::now();
    let ring = (0..RING)
        .map(|i| {
            seal(
                &binding,
                &state,
                base + TimeDelta::microseconds(i as i64),
                &key,
            )
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok((ring, sized.payload_bytes))
}

async fn claim(store: &CheckpointStore, initial: &SealedSnapshot) -> Result<CheckpointWriter> {
    match store.claim(initial).await? {
        Claim::Won(writer) => Ok(writer),
        Claim::Lost(lost) => bail!("a fresh benchmark row was already claimed: {lost}"),
    }
}

/// Every lane commits `block` snapshots through the product's writer.
async fn product_block(
    lanes: &mut [ProductLane],
    block: usize,
) -> Result<(Vec<Duration>, Duration)> {
    let started = Instant::now();
    let mut tasks = Vec::new();
    for lane in lanes.iter_mut() {
        let mut writer = lane.writer.take().context("a writer was lost")?;
        let ring = lane.ring.clone();
        let first = lane.next;
        tasks.push(tokio::spawn(async move {
            let pending = PendingResults::default();
            let mut latencies = Vec::with_capacity(block);
            for i in 0..block {
                let next = &ring[(first + i) % RING];
                let t = Instant::now();
                writer = match writer.checkpoint(next, &pending).await {
                    WriteOutcome::Committed(w) => w,
                    WriteOutcome::Failed { error, .. } => bail!("a checkpoint failed: {error}"),
                    WriteOutcome::OwnershipLost(lost) => bail!("{lost}"),
                };
                latencies.push(t.elapsed());
            }
            anyhow::Ok((writer, latencies))
        }));
    }
    let mut all = Vec::new();
    for (lane, task) in lanes.iter_mut().zip(tasks) {
        let (writer, latencies) = task.await??;
        lane.writer = Some(writer);
        lane.next = (lane.next + block) % RING;
        all.extend(latencies);
    }
    Ok((all, started.elapsed()))
}

/// Every lane commits `block` snapshots with one bare conditional UPDATE each.
async fn bare_block(lanes: &mut Vec<BareLane>, block: usize) -> Result<(Vec<Duration>, Duration)> {
    let started = Instant::now();
    let mut tasks = Vec::new();
    for mut lane in lanes.drain(..) {
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::with_capacity(block);
            for _ in 0..block {
                let held = lane.ring[lane.current].bytes.signature.clone();
                let next_index = (lane.current + 1) % RING;
                let next = &lane.ring[next_index];
                let t = Instant::now();
                let updated = bare_update(&mut lane.conn, next, &held).await?;
                latencies.push(t.elapsed());
                if updated != 1 {
                    bail!("the bare update found another signature in the row");
                }
                lane.current = next_index;
            }
            anyhow::Ok((lane, latencies))
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        let (lane, latencies) = task.await??;
        lanes.push(lane);
        all.extend(latencies);
    }
    Ok((all, started.elapsed()))
}

/// The ceiling: the snapshot's bytes and readable columns replaced by one
/// statement, only if the row holds the expected signature.
async fn bare_update(
    conn: &mut AsyncPgConnection,
    next: &SealedSnapshot,
    held: &[u8],
) -> Result<usize> {
    let e = &next.envelope;
    Ok(diesel::sql_query(
        "UPDATE radar_runtime_checkpoints SET envelope = $1, signature = $2, payload = $3, \
         payload_sha256 = $4, processed_count = $5, saved_at = $6, committed_at = now() \
         WHERE service_id = $7 AND signature = $8",
    )
    .bind::<Bytea, _>(&next.bytes.envelope)
    .bind::<Bytea, _>(&next.bytes.signature)
    .bind::<Bytea, _>(&next.bytes.payload)
    .bind::<Bytea, _>(e.payload_sha256.as_slice())
    .bind::<BigInt, _>(i64::try_from(e.processed_count).unwrap_or(i64::MAX))
    .bind::<Timestamptz, _>(e.saved_at)
    .bind::<SqlUuid, _>(e.service_id)
    .bind::<Bytea, _>(held)
    .execute(conn)
    .await?)
}
