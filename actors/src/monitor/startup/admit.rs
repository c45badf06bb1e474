//! Admitting a graph run before its monitor starts.

use chrono::Utc;
use radar::{
    graph::{CompiledGraph, GraphBinding},
    runtime::{ExitReason, RefusedRun},
    store::{Admission, CheckpointStore, GraphStoreError, HealthRecord, MonitorRow},
    telemetry::MonitorState,
};
use uuid::Uuid;

use crate::worker::WorkerContext;

/// Compiles a graph run's bound revision and admits the run. Admission is
/// checked in the database with the claim itself: the run must belong to
/// this monitor, carry this binary's launch contract, be neither failed nor
/// stopped, and its lifecycle intent must be `running`. A refusal ends the
/// monitor without touching its snapshot; only its status says why.
pub(super) async fn admit(
    worker: &WorkerContext,
    row: &MonitorRow,
    binding: &GraphBinding,
) -> Result<CompiledGraph, ExitReason> {
    let id = row.id;
    let (Some(store), Some(graphs)) = (&worker.store, &worker.graphs) else {
        return Err(ExitReason::StartupFailed {
            reason: format!(
                "monitor {id} runs graph run {}, which needs database writes \
                 (RADAR_DB_WRITE_ENABLED=false): its failures must be recorded under the \
                 snapshot row lock; enable database writes for this worker",
                binding.run_id
            ),
        });
    };
    let compiled = match graphs.compiled_for(binding).await {
        Ok(compiled) => compiled,
        Err(GraphStoreError::Store(e)) => {
            return Err(ExitReason::Failed {
                error: format!(
                    "reading graph {:?} revision {} for monitor {id}: {e}",
                    binding.graph, binding.revision
                ),
            });
        }
        Err(e) => {
            return Err(ExitReason::StartupFailed {
                reason: format!("monitor {id} cannot run graph run {}: {e}", binding.run_id),
            });
        }
    };
    let refusal = match graphs.admit(binding.run_id, id).await {
        Ok(Admission::Admitted(run)) => {
            tracing::info!(
                monitor_id = %id,
                run_id = %run.id,
                graph = %binding.graph,
                revision = run.revision,
                generation = run.generation,
                "Admitted graph run."
            );
            return Ok(compiled);
        }
        Ok(Admission::Refused(refusal)) => refusal,
        Err(e) => {
            return Err(ExitReason::Failed {
                error: format!(
                    "admitting graph run {} of monitor {id}: {e}",
                    binding.run_id
                ),
            });
        }
    };
    let refused = RefusedRun::new(binding.run_id, &refusal);
    let is_error = refused.is_error();
    let RefusedRun { exit, reason } = refused;
    if is_error {
        tracing::error!(monitor_id = %id, run_id = %binding.run_id, %reason, "Graph run not admitted; the monitor ends here and its snapshot is left as it is.")
    } else {
        tracing::info!(monitor_id = %id, run_id = %binding.run_id, %reason, "Graph run not admitted; the monitor ends here and its snapshot is left as it is.")
    }
    // The status row says why; the snapshot row is only read, for the
    // signature that fences this status write.
    let seen = match store.load_snapshot(id).await {
        Ok(stored) => stored.map(|s| s.signature().to_vec()),
        Err(e) => {
            tracing::warn!(monitor_id = %id, error = %e, "Could not read the snapshot row to persist the refusal.");
            return Err(exit);
        }
    };
    let state = MonitorState::from(&exit).as_str();
    persist_unowned(store, id, seen.as_deref(), state, &reason).await;
    Err(exit)
}

/// Writes the status of a monitor that did not start, unless another worker
/// committed its snapshot since `seen` was read.
pub(super) async fn persist_unowned(
    store: &CheckpointStore,
    id: Uuid,
    seen: Option<&[u8]>,
    state: &str,
    reason: &str,
) {
    let record = HealthRecord {
        state: state.into(),
        phase: None,
        connected: false,
        processed_count: 0,
        last_checkpoint_at: None,
        recovery: None,
        coverage: None,
        last_error: Some(reason.to_string()),
        readings_seen: Vec::new(),
        heartbeat_at: Utc::now(),
    };
    if let Err(e) = store.report_unowned(id, seen, &record).await {
        tracing::warn!(monitor_id = %id, error = %e, "Could not persist why the monitor did not start.");
    }
}
