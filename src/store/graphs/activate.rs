//! Activating a published revision: a new monitor (service) bound to the
//! revision's semantics and a run of the graph's next generation, inserted
//! in one transaction.

use diesel::{prelude::*, result::DatabaseErrorKind};
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use serde::Serialize;
use uuid::Uuid;

use super::{GraphStore, GraphStoreError, load_revision, require_authoring};
use crate::config::MonitorConfig;
use crate::graph::{GraphBinding, GraphError, LAUNCH_CONTRACT_VERSION};
use crate::store::{
    checkout,
    schema::{graph_runs, graphs, services},
};

/// A new run and the monitor that executes it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Activated {
    pub run_id: Uuid,
    pub service_id: Uuid,
    pub service_name: String,
    pub generation: i64,
    pub semantics_hash: String,
}

impl GraphStore {
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
