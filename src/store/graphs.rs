//! Graphs in PostgreSQL: published revisions (immutable), and runs, each
//! with its own monitor row so that every activation calibrates afresh.
//!
//! - this file: row types, errors, publishing and activation.
//! - `runs`: admission, failure records under the snapshot row lock, stopping.
//! - `inspect`: listing and inspecting runs for operators.

mod inspect;
mod runs;

use chrono::{DateTime, Utc};
use diesel::{prelude::*, result::DatabaseErrorKind};
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use serde::Serialize;
use uuid::Uuid;

use super::{
    Pool, StoreError, checkout,
    schema::{graph_revisions, graph_runs, graphs, services},
};
use crate::config::MonitorConfig;
use crate::graph::{
    CompiledGraph, GraphBinding, GraphDefinition, GraphError, LAUNCH_CONTRACT_VERSION,
    SemanticDiff, diff,
};

pub use inspect::{OperationalView, RunInspection, RunSummary, SnapshotView};
pub use runs::{Admission, AdmissionRefusal, FailureRecord, RetriedFailure, StopOutcome};

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

/// What publishing a definition would do, relative to the latest revision.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "change", rename_all = "snake_case")]
pub enum PlanChange {
    /// The graph does not exist yet.
    NewGraph,
    /// Layout, labels, colors or the description changed; a snapshot taken
    /// under the latest revision stays valid under this one.
    LayoutOnly { from_revision: i32 },
    /// The numbers change: activating it starts a fresh calibration.
    Semantic {
        from_revision: i32,
        diff: SemanticDiff,
    },
    /// Byte-for-byte the latest revision: publishing is refused.
    Identical { revision: i32 },
}

/// The answer of a dry run, and of a publication.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PublishPlan {
    pub graph: String,
    pub graph_id: Option<Uuid>,
    pub revision: i32,
    pub semantics_hash: String,
    #[serde(flatten)]
    pub change: PlanChange,
}

/// A new run and the monitor that executes it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Activated {
    pub run_id: Uuid,
    pub service_id: Uuid,
    pub service_name: String,
    pub generation: i64,
    pub semantics_hash: String,
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

    /// What publishing `definition` would do; changes nothing.
    pub async fn plan(&self, definition: &GraphDefinition) -> Result<PublishPlan, GraphStoreError> {
        let compiled = CompiledGraph::compile(definition.clone())?;
        let mut conn = checkout(&self.pool).await?;
        let graph_id: Option<Uuid> = graphs::table
            .filter(graphs::name.eq(&definition.name))
            .select(graphs::id)
            .first(&mut conn)
            .await
            .optional()?;
        plan_against(&mut conn, graph_id, &compiled).await
    }

    /// Publishes a new revision (creating the graph on first use). Refuses
    /// a definition identical to the latest revision.
    pub async fn publish(
        &self,
        definition: GraphDefinition,
    ) -> Result<PublishPlan, GraphStoreError> {
        let compiled = CompiledGraph::compile(definition.clone())?;
        let mut conn = checkout(&self.pool).await?;
        let plan = conn
            .transaction::<_, GraphStoreError, _>(async |conn| {
                require_authoring(conn).await?;
                diesel::insert_into(graphs::table)
                    .values((
                        graphs::id.eq(Uuid::new_v4()),
                        graphs::name.eq(&definition.name),
                    ))
                    .on_conflict(graphs::name)
                    .do_nothing()
                    .execute(conn)
                    .await?;
                // Serializes publications and activations of one graph.
                let graph_id: Uuid = graphs::table
                    .filter(graphs::name.eq(&definition.name))
                    .select(graphs::id)
                    .for_update()
                    .first(conn)
                    .await?;
                let mut plan = plan_against(conn, Some(graph_id), &compiled).await?;
                if let PlanChange::Identical { revision } = plan.change {
                    return Err(GraphStoreError::IdenticalRevision {
                        graph: definition.name.clone(),
                        revision,
                    });
                }
                let json = serde_json::to_value(&definition)
                    .map_err(|e| GraphError::Parse(e.to_string()))?;
                diesel::insert_into(graph_revisions::table)
                    .values((
                        graph_revisions::graph_id.eq(graph_id),
                        graph_revisions::revision.eq(plan.revision),
                        graph_revisions::definition.eq(json),
                        graph_revisions::semantics_hash.eq(compiled.semantics_hash()),
                    ))
                    .execute(conn)
                    .await?;
                plan.graph_id = Some(graph_id);
                Ok(plan)
            })
            .await?;
        tracing::info!(graph = %plan.graph, revision = plan.revision, semantics_hash = %plan.semantics_hash, "Published graph revision");
        Ok(plan)
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

    /// Starts a new run of a published revision: a new monitor (service)
    /// bound to the revision's semantics, and a run of the graph's next
    /// generation. Never reuses a monitor, so calibration always starts
    /// afresh, also for a revision that ran before.
    pub async fn activate(&self, graph: &str, revision: i32) -> Result<Activated, GraphStoreError> {
        let mut conn = checkout(&self.pool).await?;
        let activated = conn
            .transaction::<_, GraphStoreError, _>(async |conn| {
                start_run(conn, graph, revision).await
            })
            .await?;
        tracing::info!(graph, revision, run_id = %activated.run_id, monitor_id = %activated.service_id, generation = activated.generation, "Activated graph run");
        Ok(activated)
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

/// The body of `activate`, inside its transaction: locks the graph, compiles
/// the revision, and inserts the monitor and the run of the next generation.
async fn start_run(
    conn: &mut AsyncPgConnection,
    graph: &str,
    revision: i32,
) -> Result<Activated, GraphStoreError> {
    require_authoring(conn).await?;
    let graph_id = lock_graph_id(conn, graph).await?;
    let row = load_revision(conn, graph_id, revision)
        .await?
        .ok_or_else(|| GraphStoreError::RevisionNotFound {
            graph: graph.to_string(),
            revision,
        })?;
    let compiled = row.compile()?;
    let generation = next_generation(conn, graph_id).await?;
    let run_id = Uuid::new_v4();
    let service_id = Uuid::new_v4();
    let service_name = format!("{graph}.r{revision}.g{generation}");
    let config = compiled.monitor_config(
        service_name.clone(),
        GraphBinding {
            graph_id,
            graph: graph.to_string(),
            revision,
            run_id,
            semantics_hash: row.semantics_hash.clone(),
        },
    );
    insert_run_service(conn, service_id, &service_name, &config).await?;
    diesel::insert_into(graph_runs::table)
        .values((
            graph_runs::id.eq(run_id),
            graph_runs::service_id.eq(service_id),
            graph_runs::graph_id.eq(graph_id),
            graph_runs::revision.eq(revision),
            graph_runs::generation.eq(generation),
            graph_runs::launch_contract.eq(LAUNCH_CONTRACT_VERSION),
        ))
        .execute(conn)
        .await?;
    Ok(Activated {
        run_id,
        service_id,
        service_name,
        generation,
        semantics_hash: row.semantics_hash,
    })
}

/// The graph's id, its row locked so generations are numbered one at a time.
async fn lock_graph_id(conn: &mut AsyncPgConnection, graph: &str) -> Result<Uuid, GraphStoreError> {
    graphs::table
        .filter(graphs::name.eq(graph))
        .select(graphs::id)
        .for_update()
        .first(conn)
        .await
        .optional()?
        .ok_or_else(|| GraphStoreError::GraphNotFound(graph.to_string()))
}

/// One past the graph's last run generation (1 for its first run).
async fn next_generation(
    conn: &mut AsyncPgConnection,
    graph_id: Uuid,
) -> Result<i64, GraphStoreError> {
    let last: Option<i64> = graph_runs::table
        .filter(graph_runs::graph_id.eq(graph_id))
        .select(diesel::dsl::max(graph_runs::generation))
        .first(conn)
        .await?;
    Ok(last.unwrap_or(0) + 1)
}

/// Inserts the monitor (service) that executes a run; `ServiceNameTaken`
/// when a monitor already has its name.
async fn insert_run_service(
    conn: &mut AsyncPgConnection,
    service_id: Uuid,
    service_name: &str,
    config: &MonitorConfig,
) -> Result<(), GraphStoreError> {
    let json = serde_json::to_value(config).map_err(|e| GraphError::Parse(e.to_string()))?;
    let inserted = diesel::insert_into(services::table)
        .values((
            services::id.eq(service_id),
            services::name.eq(service_name),
            services::description.eq(&config.description),
            services::config.eq(json),
            services::config_fingerprint.eq(config.fingerprint().to_vec()),
        ))
        .execute(conn)
        .await;
    if let Err(diesel::result::Error::DatabaseError(DatabaseErrorKind::UniqueViolation, _)) =
        inserted
    {
        return Err(GraphStoreError::ServiceNameTaken(service_name.to_string()));
    }
    inserted?;
    Ok(())
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

async fn plan_against(
    conn: &mut AsyncPgConnection,
    graph_id: Option<Uuid>,
    compiled: &CompiledGraph,
) -> Result<PublishPlan, GraphStoreError> {
    let latest = match graph_id {
        Some(id) => graph_revisions::table
            .filter(graph_revisions::graph_id.eq(id))
            .order(graph_revisions::revision.desc())
            .select(RevisionRow::as_select())
            .first(conn)
            .await
            .optional()?,
        None => None,
    };
    let change = match &latest {
        None => PlanChange::NewGraph,
        Some(row) => {
            let previous = row.compile()?;
            if previous.definition() == compiled.definition() {
                PlanChange::Identical {
                    revision: row.revision,
                }
            } else {
                let diff = diff(&previous, compiled);
                if diff.is_layout_only() {
                    PlanChange::LayoutOnly {
                        from_revision: row.revision,
                    }
                } else {
                    PlanChange::Semantic {
                        from_revision: row.revision,
                        diff,
                    }
                }
            }
        }
    };
    Ok(PublishPlan {
        graph: compiled.definition().name.clone(),
        graph_id,
        revision: latest.map_or(1, |r| r.revision + 1),
        semantics_hash: compiled.semantics_hash().to_string(),
        change,
    })
}
