//! A run's terminal failure in the database: the record written under the
//! snapshot row lock, only while this writer still owns the monitor, and
//! retried until it settles or the monitor is stopped.

use std::{future::Future, time::Duration};

use chrono::Utc;
use diesel::prelude::*;
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use serde::Serialize;
use uuid::Uuid;

use super::{GraphStore, RunRow};
use crate::graph::FailureDiagnostics;
use crate::store::{
    StoreError, checkout,
    schema::{graph_runs, radar_runtime_checkpoints as checkpoints},
};

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

impl GraphStore {
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
