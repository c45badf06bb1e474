//! Restoring the model from the stored snapshot, or starting it fresh.

use chrono::Utc;
use radar::telemetry::{MonitorState, MonitorTelemetry, events};
use radar::{
    config::MonitorConfig,
    graph::CompiledGraph,
    runtime::{ExitReason, MonitorCore, StartPlan},
    snapshot::{FencingToken, SnapshotBinding},
    store::{CheckpointStore, MonitorRow},
};
use uuid::Uuid;

use super::admit::persist_unowned;
use super::core_error;
use crate::worker::WorkerContext;

/// A new model: the built-in detector, or the graph run's nodes.
pub(super) fn fresh(
    id: Uuid,
    config: MonitorConfig,
    graph: Option<CompiledGraph>,
) -> Result<MonitorCore, ExitReason> {
    let now = Utc::now();
    match graph {
        Some(graph) => MonitorCore::fresh_graph(id, config, graph, now),
        None => MonitorCore::fresh(id, config, now),
    }
    .map_err(core_error)
}

/// Reads and opens the snapshot. Corrupted or incompatible snapshots fail
/// the start with the reason persisted in the operational status.
pub(super) async fn load(
    store: &CheckpointStore,
    worker: &WorkerContext,
    row: &MonitorRow,
    binding: &SnapshotBinding,
    config: MonitorConfig,
    graph: Option<CompiledGraph>,
    metrics: &MonitorTelemetry,
) -> Result<(MonitorCore, Option<FencingToken>), ExitReason> {
    let id = row.id;
    let now = Utc::now();
    let read = match &worker.snapshots {
        Some(snapshots) => snapshots.read(id).await,
        None => store.load_snapshot(id).await,
    };
    let stored = read.map_err(|e| ExitReason::Failed {
        error: format!("reading the snapshot of monitor {id}: {e}"),
    })?;
    let opened = stored.as_ref().map(|s| s.open(binding, &worker.key));
    let reason = match StartPlan::from_load(opened) {
        StartPlan::Fresh => {
            tracing::info!(monitor_id = %id, "No snapshot: starting a new detector.");
            return Ok((fresh(id, config, graph)?, None));
        }
        StartPlan::Restore(restored) => {
            let saved_at = restored.envelope.saved_at;
            let processed = restored.envelope.processed_count;
            let core = match graph {
                Some(graph) => {
                    MonitorCore::restore_graph(id, config, graph, restored.state, saved_at, now)
                }
                None => MonitorCore::restore(
                    id,
                    config,
                    restored.state,
                    restored.detector,
                    saved_at,
                    now,
                ),
            }
            .map_err(core_error)?;
            metrics.emit(events::SnapshotRestored {
                restored_processed: processed,
                saved_at,
                partial_frames_cleared: core.recovery().cleared_partial_observations,
            });
            return Ok((core, Some(restored.token)));
        }
        StartPlan::Refuse { reason } => reason,
    };
    tracing::error!(monitor_id = %id, %reason, "Refusing to start the monitor.");
    let exit = StartPlan::refusal_exit(reason.clone());
    let seen = stored.as_ref().map(|s| s.signature());
    persist_unowned(store, id, seen, MonitorState::from(&exit).as_str(), &reason).await;
    Err(exit)
}
