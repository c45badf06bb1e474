//! Publishing a definition: the dry-run plan against the latest revision,
//! and the publication of a new revision under the graph's row lock.

use diesel::prelude::*;
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use serde::Serialize;
use uuid::Uuid;

use super::{GraphStore, GraphStoreError, RevisionRow, require_authoring};
use crate::graph::{CompiledGraph, GraphDefinition, GraphError, SemanticDiff, diff};
use crate::store::{
    checkout,
    schema::{graph_revisions, graphs},
};

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

impl GraphStore {
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
