//! A run's lifecycle in the database: admission by a worker, the failure
//! record written under the snapshot row lock, stopping.

use std::{future::Future, time::Duration};

use chrono::Utc;
use diesel::prelude::*;
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use serde::Serialize;
use uuid::Uuid;

use super::{GraphStore, GraphStoreError, RunRow};
use crate::graph::{FailureDiagnostics, LAUNCH_CONTRACT_VERSION};
use crate::store::{
    StoreError, checkout,
    schema::{graph_runs, radar_runtime_checkpoints as checkpoints, services},
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

/// How a failure record ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum FailureRecord {
    /// The run is now `failed` with the node and diagnostics.
    Recorded,
    /// An earlier attempt already committed it (e.g. its COMMIT reply was lost).
    AlreadyRecorded,
    /// The snapshot row is gone or holds another writer's signature: this
    /// writer no longer owns the monitor and must not write anything.
    OwnershipLost { detail: String },
    /// The run does not belong to this monitor, or it already stopped.
    IdentityMismatch { detail: String },
}

/// The end of a failure record retried until it settles or a stop.
#[derive(Debug, Clone, PartialEq)]
pub enum RetriedFailure {
    Settled {
        record: FailureRecord,
        attempts: u32,
    },
    /// An explicit stop ended the retries before the database answered.
    Stopped { attempts: u32, last_error: String },
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

    /// Writes a run's terminal failure, holding the snapshot row lock
    /// (`SELECT ... FOR UPDATE`) so no checkpoint or evidence batch of any
    /// writer interleaves. It commits only while the row's signature is one
    /// of `tokens` (the writer's last confirmed one, plus any checkpoint
    /// whose commit reply was lost, which may have landed) and the run
    /// belongs to `service_id`. A run that is stopping can still fail; a
    /// stopped run, or any other run, cannot.
    pub async fn record_failure(
        &self,
        run_id: Uuid,
        service_id: Uuid,
        tokens: &[&[u8]],
        diagnostics: &FailureDiagnostics,
    ) -> Result<FailureRecord, StoreError> {
        let details =
            serde_json::to_value(diagnostics).map_err(|e| StoreError::InvalidStoredConfig {
                id: service_id,
                reason: format!("cannot encode failure diagnostics: {e}"),
            })?;
        let mut conn = checkout(&self.pool).await?;
        let record = conn
            .transaction::<_, diesel::result::Error, _>(async |conn| {
                if let Some(lost) = check_snapshot_owner(conn, service_id, tokens).await? {
                    return Ok(lost);
                }
                let run = match lock_run_of(conn, run_id, service_id).await? {
                    Ok(run) => run,
                    Err(mismatch) => return Ok(mismatch),
                };
                if let Some(settled) = settled_run_outcome(run_id, &run) {
                    return Ok(settled);
                }
                mark_run_failed(conn, run_id, diagnostics, &details).await?;
                Ok(FailureRecord::Recorded)
            })
            .await?;
        log_failure_record(&record, run_id, service_id, diagnostics);
        Ok(record)
    }

    /// `record_failure` until the database gives an answer, each attempt
    /// bounded by `attempt_timeout`, backing off from 1 s to 30 s, or until
    /// `stop` completes (an explicit stop of the quarantined monitor).
    pub async fn record_failure_retrying(
        &self,
        run_id: Uuid,
        service_id: Uuid,
        tokens: &[&[u8]],
        diagnostics: &FailureDiagnostics,
        attempt_timeout: Duration,
        stop: impl Future<Output = ()>,
    ) -> RetriedFailure {
        let mut stop = std::pin::pin!(stop);
        let mut backoff = Duration::from_secs(1);
        let mut attempts = 0;
        loop {
            attempts += 1;
            let attempt = tokio::time::timeout(
                attempt_timeout,
                self.record_failure(run_id, service_id, tokens, diagnostics),
            );
            let error = tokio::select! {
                result = attempt => match result {
                    Ok(Ok(record)) => return RetriedFailure::Settled { record, attempts },
                    Ok(Err(e)) => e.to_string(),
                    Err(_) => StoreError::Timeout { seconds: attempt_timeout.as_secs() }.to_string(),
                },
                () = &mut stop => return RetriedFailure::Stopped { attempts, last_error: "stopped during an attempt".into() },
            };
            tracing::warn!(run_id = %run_id, monitor_id = %service_id, attempts, error = %error, "Failure record did not reach the database; retrying while quarantined");
            tokio::select! {
                () = tokio::time::sleep(backoff) => {}
                () = &mut stop => return RetriedFailure::Stopped { attempts, last_error: error },
            }
            backoff = (backoff * 2).min(Duration::from_secs(30));
        }
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

/// Locks the monitor's snapshot row; `OwnershipLost` when it is gone or
/// holds a signature none of `tokens` is.
async fn check_snapshot_owner(
    conn: &mut AsyncPgConnection,
    service_id: Uuid,
    tokens: &[&[u8]],
) -> Result<Option<FailureRecord>, diesel::result::Error> {
    let signature: Option<Vec<u8>> = checkpoints::table
        .find(service_id)
        .select(checkpoints::signature)
        .for_update()
        .first(conn)
        .await
        .optional()?;
    Ok(match signature {
        None => Some(FailureRecord::OwnershipLost {
            detail: format!("monitor {service_id} has no snapshot row"),
        }),
        Some(signature) if !tokens.contains(&signature.as_slice()) => {
            Some(FailureRecord::OwnershipLost {
                detail: format!(
                    "the snapshot of monitor {service_id} was committed by another writer"
                ),
            })
        }
        Some(_) => None,
    })
}

/// Locks the run; `IdentityMismatch` (as the inner error) when it does not
/// exist or belongs to another monitor.
async fn lock_run_of(
    conn: &mut AsyncPgConnection,
    run_id: Uuid,
    service_id: Uuid,
) -> Result<Result<RunRow, FailureRecord>, diesel::result::Error> {
    let run: Option<RunRow> = graph_runs::table
        .find(run_id)
        .select(RunRow::as_select())
        .for_update()
        .first(conn)
        .await
        .optional()?;
    Ok(match run {
        None => Err(FailureRecord::IdentityMismatch {
            detail: format!("no graph run with id {run_id}"),
        }),
        Some(run) if run.service_id != service_id => Err(FailureRecord::IdentityMismatch {
            detail: format!(
                "run {run_id} belongs to monitor {}, not {service_id}",
                run.service_id
            ),
        }),
        Some(run) => Ok(run),
    })
}

/// The outcome for a run that already failed or stopped; `None` when the
/// failure is still to be written.
fn settled_run_outcome(run_id: Uuid, run: &RunRow) -> Option<FailureRecord> {
    match run.status.as_str() {
        "failed" => Some(FailureRecord::AlreadyRecorded),
        "stopped" => Some(FailureRecord::IdentityMismatch {
            detail: format!("run {run_id} already stopped"),
        }),
        _ => None,
    }
}

/// Writes the failure: status, failed node and diagnostics.
async fn mark_run_failed(
    conn: &mut AsyncPgConnection,
    run_id: Uuid,
    diagnostics: &FailureDiagnostics,
    details: &serde_json::Value,
) -> Result<(), diesel::result::Error> {
    let now = Utc::now();
    diesel::update(graph_runs::table.find(run_id))
        .set((
            graph_runs::status.eq("failed"),
            graph_runs::failed_node.eq(&diagnostics.failed_node),
            graph_runs::diagnostics.eq(details),
            graph_runs::updated_at.eq(now),
            graph_runs::finished_at.eq(now),
        ))
        .execute(conn)
        .await?;
    Ok(())
}

/// Logs how a failure record ended: an error when written, a warning when not.
fn log_failure_record(
    record: &FailureRecord,
    run_id: Uuid,
    service_id: Uuid,
    diagnostics: &FailureDiagnostics,
) {
    match record {
        FailureRecord::Recorded => {
            tracing::error!(run_id = %run_id, monitor_id = %service_id, failed_node = %diagnostics.failed_node, "Recorded graph run failure")
        }
        other => {
            tracing::warn!(run_id = %run_id, monitor_id = %service_id, outcome = ?other, "Graph run failure was not recorded")
        }
    }
}
