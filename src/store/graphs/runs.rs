//! A run's lifecycle in the database: admission by a worker, stopping (by
//! an operator, and the worker's last word). Failure records are in
//! `failure`.

use chrono::Utc;
use diesel::prelude::*;
use diesel_async::{AsyncConnection, RunQueryDsl};
use serde::Serialize;
use uuid::Uuid;

use super::{GraphStore, GraphStoreError, RunRow};
use crate::graph::LAUNCH_CONTRACT_VERSION;
use crate::store::{
    StoreError, checkout,
    schema::{graph_runs, services},
};

/// Whether a worker may execute a run.
#[derive(Debug, Clone, PartialEq)]
pub enum Admission {
    /// The run is now `running`.
    Admitted(RunRow),
    Refused(AdmissionRefusal),
}

/// Why a run was not admitted. Every refusal is final for this run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum AdmissionRefusal {
    #[error("no graph run with id {run_id}")]
    UnknownRun { run_id: Uuid },
    #[error("run {run_id} belongs to monitor {expected}, not {got}")]
    ServiceMismatch {
        run_id: Uuid,
        expected: Uuid,
        got: Uuid,
    },
    #[error(
        "run {run_id} was activated under graph launch contract {run} but this radar supports \
         only contract {supported}; upgrade radar to a release that supports it, or follow the \
         reviewed database restore procedure (README, Graph runs)"
    )]
    LaunchContract {
        run_id: Uuid,
        run: i32,
        supported: i32,
    },
    #[error(
        "run {run_id} (generation {generation}) is {status}; a finished generation never runs \
         again; activate the revision again for a fresh run"
    )]
    TerminalGeneration {
        run_id: Uuid,
        generation: i64,
        status: String,
    },
    #[error("run {run_id} is {intent} by operator request")]
    LifecycleIntent { run_id: Uuid, intent: String },
}

/// What `stop` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StopOutcome {
    /// A worker may be running it: it is asked to stop (and its monitor retired).
    Stopping,
    /// No worker had admitted it: it is stopped now.
    Stopped,
    /// It had failed; the failure stays and it will not be restarted.
    FailedRunClosed,
    AlreadyStopped,
}

impl GraphStore {
    /// Claims a run for execution. Checked in one statement with the claim
    /// itself, so a task admitted late (after a failure committed, or after
    /// a stop) is refused: the run must belong to `service_id`, carry this
    /// binary's launch contract, not be failed or stopped, and its
    /// lifecycle intent must be `running`.
    pub async fn admit(&self, run_id: Uuid, service_id: Uuid) -> Result<Admission, StoreError> {
        let mut conn = checkout(&self.pool).await?;
        let claimed = diesel::update(
            graph_runs::table
                .find(run_id)
                .filter(graph_runs::service_id.eq(service_id))
                .filter(graph_runs::launch_contract.eq(LAUNCH_CONTRACT_VERSION))
                .filter(graph_runs::status.eq_any(["starting", "running"]))
                .filter(graph_runs::lifecycle_intent.eq("running")),
        )
        .set((
            graph_runs::status.eq("running"),
            graph_runs::updated_at.eq(Utc::now()),
        ))
        .returning(RunRow::as_returning())
        .get_result(&mut conn)
        .await
        .optional()?;
        if let Some(run) = claimed {
            return Ok(Admission::Admitted(run));
        }
        let row: Option<RunRow> = graph_runs::table
            .find(run_id)
            .select(RunRow::as_select())
            .first(&mut conn)
            .await
            .optional()?;
        let refusal = match row {
            None => AdmissionRefusal::UnknownRun { run_id },
            Some(run) if run.service_id != service_id => AdmissionRefusal::ServiceMismatch {
                run_id,
                expected: run.service_id,
                got: service_id,
            },
            Some(run) if run.launch_contract != LAUNCH_CONTRACT_VERSION => {
                AdmissionRefusal::LaunchContract {
                    run_id,
                    run: run.launch_contract,
                    supported: LAUNCH_CONTRACT_VERSION,
                }
            }
            Some(run) if run.is_terminal() => AdmissionRefusal::TerminalGeneration {
                run_id,
                generation: run.generation,
                status: run.status,
            },
            Some(run) => AdmissionRefusal::LifecycleIntent {
                run_id,
                intent: run.lifecycle_intent,
            },
        };
        Ok(Admission::Refused(refusal))
    }

    /// Asks a run to stop and retires its monitor, so no worker starts it
    /// again. A run no worker admitted yet is stopped at once.
    pub async fn stop(&self, run_id: Uuid) -> Result<StopOutcome, GraphStoreError> {
        let mut conn = checkout(&self.pool).await?;
        conn.transaction::<_, GraphStoreError, _>(async |conn| {
            let run: RunRow = graph_runs::table
                .find(run_id)
                .select(RunRow::as_select())
                .for_update()
                .first(conn)
                .await
                .optional()?
                .ok_or(GraphStoreError::RunNotFound(run_id))?;
            let now = Utc::now();
            let outcome = match (run.status.as_str(), run.lifecycle_intent.as_str()) {
                ("stopped", _) => return Ok(StopOutcome::AlreadyStopped),
                ("starting", _) => {
                    diesel::update(graph_runs::table.find(run_id))
                        .set((
                            graph_runs::status.eq("stopped"),
                            graph_runs::lifecycle_intent.eq("stopped"),
                            graph_runs::updated_at.eq(now),
                            graph_runs::finished_at.eq(now),
                        ))
                        .execute(conn)
                        .await?;
                    StopOutcome::Stopped
                }
                ("failed", _) => {
                    diesel::update(graph_runs::table.find(run_id))
                        .set((
                            graph_runs::lifecycle_intent.eq("stopped"),
                            graph_runs::updated_at.eq(now),
                        ))
                        .execute(conn)
                        .await?;
                    StopOutcome::FailedRunClosed
                }
                _ => {
                    diesel::update(
                        graph_runs::table
                            .find(run_id)
                            .filter(graph_runs::lifecycle_intent.eq("running")),
                    )
                    .set((
                        graph_runs::lifecycle_intent.eq("stopping"),
                        graph_runs::updated_at.eq(now),
                    ))
                    .execute(conn)
                    .await?;
                    StopOutcome::Stopping
                }
            };
            diesel::update(
                services::table
                    .find(run.service_id)
                    .filter(services::retired_at.is_null()),
            )
            .set(services::retired_at.eq(now))
            .execute(conn)
            .await?;
            Ok(outcome)
        })
        .await
    }

    /// The worker's last word on a run it stopped gracefully. A failed run
    /// stays failed.
    pub async fn mark_stopped(&self, run_id: Uuid, service_id: Uuid) -> Result<bool, StoreError> {
        let mut conn = checkout(&self.pool).await?;
        let now = Utc::now();
        let updated = diesel::update(
            graph_runs::table
                .find(run_id)
                .filter(graph_runs::service_id.eq(service_id))
                .filter(graph_runs::status.eq_any(["starting", "running"])),
        )
        .set((
            graph_runs::status.eq("stopped"),
            graph_runs::lifecycle_intent.eq("stopped"),
            graph_runs::updated_at.eq(now),
            graph_runs::finished_at.eq(now),
        ))
        .execute(&mut conn)
        .await?;
        Ok(updated == 1)
    }
}
