//! What operators see of runs: the list, and one run in detail with its
//! monitor's coverage and last snapshot envelope.

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use serde::Serialize;
use uuid::Uuid;

use super::{GraphStore, GraphStoreError, RunRow};
use crate::store::{
    checkout,
    schema::{
        graph_revisions, graph_runs, graphs, radar_operational_status as status,
        radar_runtime_checkpoints as checkpoints, services,
    },
    services::hex,
};

/// One run in the list.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunSummary {
    pub graph: String,
    pub service_name: String,
    #[serde(flatten)]
    pub run: RunRow,
}

/// The monitor's persisted operational status, as far as a run needs it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OperationalView {
    pub state: String,
    pub worker_id: String,
    pub processed_count: i64,
    pub coverage: Option<serde_json::Value>,
    pub last_error: Option<String>,
    pub heartbeat_at: DateTime<Utc>,
}

/// The envelope columns of the monitor's snapshot row (not the payload).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SnapshotView {
    pub format_version: i32,
    pub config_fingerprint: String,
    pub runtime_versions: String,
    pub processed_count: i64,
    pub saved_at: DateTime<Utc>,
    pub payload_sha256: String,
    pub key_id: String,
    /// The first bytes of the signature, as status rows show it.
    pub signature_prefix: String,
    pub writer_id: String,
    pub committed_at: DateTime<Utc>,
}

/// One run in detail.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunInspection {
    pub graph: String,
    pub service_name: String,
    pub semantics_hash: String,
    pub run: RunRow,
    pub operational: Option<OperationalView>,
    pub last_snapshot: Option<SnapshotView>,
}

impl GraphStore {
    /// Every run, newest first.
    pub async fn list_runs(&self) -> Result<Vec<RunSummary>, GraphStoreError> {
        let mut conn = checkout(&self.pool).await?;
        let rows: Vec<(RunRow, String, String)> = graph_runs::table
            .inner_join(graphs::table)
            .inner_join(services::table)
            .select((RunRow::as_select(), graphs::name, services::name))
            .order((graph_runs::created_at.desc(), graph_runs::generation.desc()))
            .load(&mut conn)
            .await?;
        Ok(rows
            .into_iter()
            .map(|(run, graph, service_name)| RunSummary {
                graph,
                service_name,
                run,
            })
            .collect())
    }

    /// A run with its diagnostics, coverage and last snapshot envelope.
    pub async fn inspect(&self, run_id: Uuid) -> Result<RunInspection, GraphStoreError> {
        let mut conn = checkout(&self.pool).await?;
        let (run, graph, service_name) = load_run(&mut conn, run_id).await?;
        let semantics_hash = load_semantics_hash(&mut conn, &run).await?;
        let operational = load_operational_view(&mut conn, run.service_id).await?;
        let last_snapshot = load_snapshot_view(&mut conn, run.service_id).await?;
        Ok(RunInspection {
            graph,
            service_name,
            semantics_hash,
            run,
            operational,
            last_snapshot,
        })
    }
}

/// The run with its graph's and monitor's names.
async fn load_run(
    conn: &mut AsyncPgConnection,
    run_id: Uuid,
) -> Result<(RunRow, String, String), GraphStoreError> {
    graph_runs::table
        .inner_join(graphs::table)
        .inner_join(services::table)
        .filter(graph_runs::id.eq(run_id))
        .select((RunRow::as_select(), graphs::name, services::name))
        .first(conn)
        .await
        .optional()?
        .ok_or(GraphStoreError::RunNotFound(run_id))
}

/// The semantics hash of the revision the run executes.
async fn load_semantics_hash(
    conn: &mut AsyncPgConnection,
    run: &RunRow,
) -> Result<String, GraphStoreError> {
    Ok(graph_revisions::table
        .find((run.graph_id, run.revision))
        .select(graph_revisions::semantics_hash)
        .first(conn)
        .await?)
}

/// The monitor's operational status row, if it has one.
async fn load_operational_view(
    conn: &mut AsyncPgConnection,
    service_id: Uuid,
) -> Result<Option<OperationalView>, GraphStoreError> {
    Ok(status::table
        .find(service_id)
        .select((
            status::state,
            status::worker_id,
            status::processed_count,
            status::coverage,
            status::last_error,
            status::heartbeat_at,
        ))
        .first::<(
            String,
            String,
            i64,
            Option<serde_json::Value>,
            Option<String>,
            DateTime<Utc>,
        )>(conn)
        .await
        .optional()?
        .map(
            |(state, worker_id, processed_count, coverage, last_error, heartbeat_at)| {
                OperationalView {
                    state,
                    worker_id,
                    processed_count,
                    coverage,
                    last_error,
                    heartbeat_at,
                }
            },
        ))
}

/// The envelope of the monitor's snapshot row, if it has one.
async fn load_snapshot_view(
    conn: &mut AsyncPgConnection,
    service_id: Uuid,
) -> Result<Option<SnapshotView>, GraphStoreError> {
    type Envelope = (
        i32,
        Vec<u8>,
        String,
        i64,
        DateTime<Utc>,
        Vec<u8>,
        String,
        Vec<u8>,
        String,
        DateTime<Utc>,
    );
    Ok(checkpoints::table
        .find(service_id)
        .select((
            checkpoints::format_version,
            checkpoints::config_fingerprint,
            checkpoints::runtime_versions,
            checkpoints::processed_count,
            checkpoints::saved_at,
            checkpoints::payload_sha256,
            checkpoints::key_id,
            checkpoints::signature,
            checkpoints::writer_id,
            checkpoints::committed_at,
        ))
        .first::<Envelope>(conn)
        .await
        .optional()?
        .map(|e| SnapshotView {
            format_version: e.0,
            config_fingerprint: hex(&e.1),
            runtime_versions: e.2,
            processed_count: e.3,
            saved_at: e.4,
            payload_sha256: hex(&e.5),
            key_id: e.6,
            signature_prefix: hex(&e.7[..e.7.len().min(8)]),
            writer_id: e.8,
            committed_at: e.9,
        }))
}
