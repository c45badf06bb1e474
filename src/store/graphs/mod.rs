//! Graphs in PostgreSQL: published revisions (immutable), and runs, each
//! with its own monitor row so that every activation calibrates afresh.
//!
//! - this file: row types, errors, and reading graphs, revisions and runs.
//! - `publish`: the dry-run plan and publishing a revision.
//! - `activate`: starting a run of a revision with its own monitor.
//! - `runs`: admission and stopping.
//! - `failure`: failure records under the snapshot row lock.
//! - `inspect`: listing and inspecting runs for operators.

mod activate;
mod failure;
mod inspect;
mod publish;
mod runs;

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use serde::Serialize;
use uuid::Uuid;

use super::{
    Pool, StoreError, checkout,
    schema::{graph_revisions, graph_runs, graphs},
};
use crate::graph::{CompiledGraph, GraphBinding, GraphDefinition, GraphError};

pub use activate::Activated;
pub use failure::{FailureRecord, RetriedFailure};
pub use inspect::{OperationalView, RunInspection, RunSummary, SnapshotView};
pub use publish::{PlanChange, PublishPlan};
pub use runs::{Admission, AdmissionRefusal, StopOutcome};

/// A published revision as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Queryable, Selectable)]
#[diesel(table_name = graph_revisions)]
pub struct RevisionRow {
    pub graph_id: Uuid,
    pub revision: i32,
    pub definition: serde_json::Value,
    pub semantics_hash: String,
    pub published_at: DateTime<Utc>,
}

impl RevisionRow {
    /// The stored definition, checked again before anything runs it.
    pub fn compile(&self) -> Result<CompiledGraph, GraphStoreError> {
        let stored = |e: GraphError| GraphStoreError::StoredDefinition {
            graph_id: self.graph_id,
            revision: self.revision,
            reason: e.to_string(),
        };
        let compiled = GraphDefinition::from_json(self.definition.clone())
            .and_then(CompiledGraph::compile)
            .map_err(stored)?;
        if compiled.semantics_hash() != self.semantics_hash {
            return Err(GraphStoreError::StoredDefinition {
                graph_id: self.graph_id,
                revision: self.revision,
                reason: format!(
                    "its semantics hash is {} but {} was recorded at publication",
                    compiled.semantics_hash(),
                    self.semantics_hash
                ),
            });
        }
        Ok(compiled)
    }
}

/// A run as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Queryable, Selectable)]
#[diesel(table_name = graph_runs)]
pub struct RunRow {
    pub id: Uuid,
    pub service_id: Uuid,
    pub graph_id: Uuid,
    pub revision: i32,
    pub generation: i64,
    /// `running`, `stopping` or `stopped`: what operators asked for.
    pub lifecycle_intent: String,
    /// `starting`, `running`, `failed` or `stopped`: what the run did.
    pub status: String,
    pub failed_node: Option<String>,
    pub diagnostics: Option<serde_json::Value>,
    pub launch_contract: i32,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
}

impl RunRow {
    /// A failed or stopped run never runs again.
    pub fn is_terminal(&self) -> bool {
        matches!(self.status.as_str(), "failed" | "stopped")
    }
}

#[derive(Debug, thiserror::Error)]
pub enum GraphStoreError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Graph(#[from] GraphError),
    #[error("no graph named {0:?}; publish it first with radar graph publish --file FILE")]
    GraphNotFound(String),
    #[error("graph {graph:?} has no revision {revision}; see radar graph runs for what exists")]
    RevisionNotFound { graph: String, revision: i32 },
    #[error("no graph run with id {0}")]
    RunNotFound(Uuid),
    #[error(
        "graph {graph:?} revision {revision} is already exactly this definition; nothing to publish"
    )]
    IdenticalRevision { graph: String, revision: i32 },
    #[error("graph {graph_id} revision {revision} is stored but unusable: {reason}")]
    StoredDefinition {
        graph_id: Uuid,
        revision: i32,
        reason: String,
    },
    #[error("a monitor named {0:?} already exists; retire and delete it, then activate again")]
    ServiceNameTaken(String),
    #[error(
        "graph authoring is turned off for the fleet: publishing and activating graphs is \
         refused; existing runs keep executing and can still be listed, inspected and stopped. \
         Turn it on with `radar graph authoring enable` once every worker runs a radar that \
         supports graph runs"
    )]
    AuthoringDisabled,
}

impl From<diesel::result::Error> for GraphStoreError {
    fn from(e: diesel::result::Error) -> Self {
        Self::Store(StoreError::Query(e))
    }
}

/// Refuses unless fleet-wide authoring is on (inside the caller's
/// transaction, so switching it off waits for the publication).
async fn require_authoring(conn: &mut AsyncPgConnection) -> Result<(), GraphStoreError> {
    if super::fleet::authoring_enabled_for_update(conn).await? {
        Ok(())
    } else {
        Err(GraphStoreError::AuthoringDisabled)
    }
}

/// Graph revisions and runs.
#[derive(Clone)]
pub struct GraphStore {
    pool: Pool,
}

impl GraphStore {
    pub fn new(pool: Pool) -> Self {
        Self { pool }
    }

    /// The graph's id by name.
    pub async fn graph_id(&self, name: &str) -> Result<Uuid, GraphStoreError> {
        let mut conn = checkout(&self.pool).await?;
        graphs::table
            .filter(graphs::name.eq(name))
            .select(graphs::id)
            .first(&mut conn)
            .await
            .optional()?
            .ok_or_else(|| GraphStoreError::GraphNotFound(name.to_string()))
    }

    pub async fn revision(
        &self,
        graph_id: Uuid,
        revision: i32,
    ) -> Result<RevisionRow, GraphStoreError> {
        let mut conn = checkout(&self.pool).await?;
        load_revision(&mut conn, graph_id, revision)
            .await?
            .ok_or_else(|| GraphStoreError::RevisionNotFound {
                graph: graph_id.to_string(),
                revision,
            })
    }

    pub async fn run(&self, run_id: Uuid) -> Result<RunRow, GraphStoreError> {
        let mut conn = checkout(&self.pool).await?;
        graph_runs::table
            .find(run_id)
            .select(RunRow::as_select())
            .first(&mut conn)
            .await
            .optional()?
            .ok_or(GraphStoreError::RunNotFound(run_id))
    }

    /// The compiled revision a run's monitor is bound to, refusing one whose
    /// stored semantics no longer match the binding.
    pub async fn compiled_for(
        &self,
        binding: &GraphBinding,
    ) -> Result<CompiledGraph, GraphStoreError> {
        let compiled = self
            .revision(binding.graph_id, binding.revision)
            .await?
            .compile()?;
        if compiled.semantics_hash() != binding.semantics_hash {
            return Err(GraphStoreError::StoredDefinition {
                graph_id: binding.graph_id,
                revision: binding.revision,
                reason: format!(
                    "run {} is bound to semantics {} but the revision computes {}",
                    binding.run_id,
                    binding.semantics_hash,
                    compiled.semantics_hash()
                ),
            });
        }
        Ok(compiled)
    }

    /// The run a monitor executes, if it is a graph run.
    pub async fn run_for_service(&self, service_id: Uuid) -> Result<Option<RunRow>, StoreError> {
        let mut conn = checkout(&self.pool).await?;
        Ok(graph_runs::table
            .filter(graph_runs::service_id.eq(service_id))
            .select(RunRow::as_select())
            .first(&mut conn)
            .await
            .optional()?)
    }
}

async fn load_revision(
    conn: &mut AsyncPgConnection,
    graph_id: Uuid,
    revision: i32,
) -> Result<Option<RevisionRow>, diesel::result::Error> {
    graph_revisions::table
        .find((graph_id, revision))
        .select(RevisionRow::as_select())
        .first(conn)
        .await
        .optional()
}
