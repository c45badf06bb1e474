//! `radar graph ...`: publishing graph revisions, activating, stopping and
//! inspecting runs, and the fleet-wide authoring switch. Publishing and
//! activating are authoring: refused while the switch (in PostgreSQL) is
//! off; listing, inspecting and stopping always work.

use std::{path::PathBuf, process::ExitCode};

use anyhow::Context;
use clap::Subcommand;
use radar::{
    config::Settings,
    graph::{CompiledGraph, GraphDefinition},
    store::{
        self, GraphStore, PlanChange, PublishPlan, RunInspection, RunSummary, StopOutcome,
        fleet::{self, AuthoringStatus},
    },
};
use uuid::Uuid;

#[derive(Debug, Subcommand)]
pub enum GraphCommand {
    /// Validate a graph file and publish it as the graph's next revision;
    /// prints the revision number and its semantics hash.
    Publish {
        /// The graph's JSON file (see config/graphs/).
        #[arg(long, value_name = "FILE")]
        file: PathBuf,
        /// Only say what the revision would change for runs: layout only
        /// (snapshots stay valid) or semantics (a fresh calibration), and
        /// which nodes changed. Publishes nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Start a new run of a published revision, on a new monitor with a
    /// fresh calibration; prints the run id and the monitor id.
    Activate {
        /// The graph's name.
        graph: String,
        #[arg(long)]
        revision: i32,
    },
    /// Ask a run to stop; its monitor is retired and never started again.
    Stop { run: Uuid },
    /// List graph runs, newest first.
    Runs {
        /// Print a JSON array instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Show a run: status, failed node and diagnostics, coverage, last snapshot envelope.
    Inspect {
        run: Uuid,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// The fleet-wide switch for publishing and activating graphs (off on a
    /// new database). `enable` refuses while a live worker runs a binary
    /// without graph support, naming it.
    Authoring {
        #[command(subcommand)]
        action: AuthoringAction,
    },
}

#[derive(Debug, Clone, Copy, Subcommand)]
pub enum AuthoringAction {
    /// Turn publishing and activating on, if every live worker supports graph runs.
    Enable,
    /// Turn publishing and activating off; running graph runs are not affected.
    Disable,
    /// Show the switch and every live worker with its graph support.
    Status {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
}

pub async fn run(command: GraphCommand, settings: &Settings) -> anyhow::Result<ExitCode> {
    if let GraphCommand::Authoring { action } = command {
        return authoring(action, settings).await;
    }
    let definition = match &command {
        // Validate before touching the database, so a bad file fails fast.
        GraphCommand::Publish { file, .. } => Some(read_graph_file(file)?),
        _ => None,
    };
    store::check_schema(&settings.database_url).await?;
    let graphs = GraphStore::new(
        store::connect(&settings.database_url, 2, settings.checkpoint_timeout()).await?,
    );
    match (command, definition) {
        (GraphCommand::Publish { dry_run: true, .. }, Some(definition)) => {
            print_plan(&graphs.plan(&definition).await?);
        }
        (GraphCommand::Publish { .. }, Some(definition)) => {
            print_published(&graphs.publish(definition).await?);
        }
        (GraphCommand::Activate { graph, revision }, _) => {
            let run = graphs.activate(&graph, revision).await?;
            println!(
                "Activated graph {graph} revision {revision}, generation {}, on monitor {}.",
                run.generation, run.service_name
            );
            println!("run: {}", run.run_id);
            println!("service: {}", run.service_id);
        }
        (GraphCommand::Stop { run }, _) => print_stopped(run, graphs.stop(run).await?),
        (GraphCommand::Runs { json }, _) => {
            let runs = graphs.list_runs().await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&runs)?);
            } else {
                print_runs(&runs);
            }
        }
        (GraphCommand::Inspect { run, json }, _) => {
            let inspection = graphs.inspect(run).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&inspection)?);
            } else {
                print_inspection(&inspection);
            }
        }
        (GraphCommand::Publish { .. }, None) => unreachable!("read above"),
        (GraphCommand::Authoring { .. }, _) => unreachable!("handled above"),
    }
    Ok(ExitCode::SUCCESS)
}

/// A graph file that parses and compiles.
fn read_graph_file(file: &std::path::Path) -> anyhow::Result<GraphDefinition> {
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("reading graph file {}", file.display()))?;
    let definition = GraphDefinition::from_json_str(&text)
        .with_context(|| format!("invalid graph file {}", file.display()))?;
    CompiledGraph::compile(definition.clone())
        .with_context(|| format!("invalid graph file {}", file.display()))?;
    Ok(definition)
}

fn print_published(published: &PublishPlan) {
    println!(
        "Published graph {} revision {}",
        published.graph, published.revision
    );
    println!("semantics hash: {}", published.semantics_hash);
    match &published.change {
        PlanChange::LayoutOnly { from_revision } => {
            println!("Layout-only change of revision {from_revision}: snapshots stay valid.")
        }
        PlanChange::Semantic { from_revision, .. } => println!(
            "Semantic change of revision {from_revision}: activating it starts a fresh calibration."
        ),
        PlanChange::NewGraph | PlanChange::Identical { .. } => {}
    }
}

fn print_stopped(run: Uuid, outcome: StopOutcome) {
    match outcome {
        StopOutcome::Stopping => {
            println!("Run {run} is stopping: its worker stops it and its monitor is retired.")
        }
        StopOutcome::Stopped => println!("Run {run} had not started; it is stopped."),
        StopOutcome::FailedRunClosed => println!(
            "Run {run} had failed; its failure stays inspectable and it will not run again."
        ),
        StopOutcome::AlreadyStopped => println!("Run {run} was already stopped."),
    }
}

async fn authoring(action: AuthoringAction, settings: &Settings) -> anyhow::Result<ExitCode> {
    store::check_schema(&settings.database_url).await?;
    let pool = store::connect(&settings.database_url, 1, settings.checkpoint_timeout()).await?;
    let status = match action {
        AuthoringAction::Status { json: true } => {
            println!(
                "{}",
                serde_json::to_string_pretty(&fleet::authoring_status(&pool).await?)?
            );
            return Ok(ExitCode::SUCCESS);
        }
        AuthoringAction::Status { json: false } => fleet::authoring_status(&pool).await?,
        AuthoringAction::Enable | AuthoringAction::Disable => {
            let enable = matches!(action, AuthoringAction::Enable);
            let status = fleet::set_authoring(&pool, enable, &operator()).await?;
            println!(
                "Graph authoring is {} for the fleet.",
                if status.enabled {
                    "enabled"
                } else {
                    "disabled"
                }
            );
            status
        }
    };
    print_authoring(&status);
    Ok(ExitCode::SUCCESS)
}

/// Who switched authoring, for the record: the login and host of this CLI.
fn operator() -> String {
    let user = std::env::var("USER").unwrap_or_else(|_| "unknown user".into());
    let host = std::fs::read_to_string("/etc/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default();
    if host.is_empty() {
        user
    } else {
        format!("{user}@{host}")
    }
}

fn print_authoring(status: &AuthoringStatus) {
    println!(
        "authoring:       {} (since {}{})",
        if status.enabled {
            "enabled"
        } else {
            "disabled"
        },
        status.changed_at.format("%Y-%m-%d %H:%M:%S UTC"),
        status
            .changed_by
            .as_deref()
            .map(|by| format!(", by {by}"))
            .unwrap_or_default()
    );
    if status.live_workers.is_empty() {
        println!("live workers:    none");
    }
    for w in &status.live_workers {
        if w.supports_graphs() {
            println!(
                "live worker:     {} (supports graph runs, heartbeat {:.0} s ago)",
                w.worker_id,
                w.heartbeat_age_seconds.max(0.0)
            );
        } else {
            println!("blocking worker: {}", w.blocking_reason());
        }
    }
}

fn print_plan(plan: &PublishPlan) {
    let graph = &plan.graph;
    let next = plan.revision;
    let hash = &plan.semantics_hash;
    match &plan.change {
        PlanChange::NewGraph => println!(
            "Dry run: graph {graph} does not exist yet; publishing creates revision 1 \
             (semantics hash {hash})."
        ),
        PlanChange::Identical { revision } => println!(
            "Dry run: identical to revision {revision} of {graph}; publishing would be refused."
        ),
        PlanChange::LayoutOnly { from_revision } => println!(
            "Dry run: revision {next} would be a layout-only change of revision {from_revision} \
             (semantics hash {hash} unchanged): checkpoints stay valid."
        ),
        PlanChange::Semantic {
            from_revision,
            diff,
        } => {
            println!(
                "Dry run: revision {next} would be a semantic change of revision {from_revision} \
                 (semantics hash {} -> {hash}): activating it starts a fresh calibration.",
                diff.old_hash
            );
            if diff.readings_changed {
                println!("  readings changed");
            }
            if diff.alignment_changed {
                println!("  alignment changed");
            }
            for node in &diff.nodes {
                let change = serde_json::to_value(node.change).unwrap_or_default();
                println!("  node {} {}", node.node, change.as_str().unwrap_or(""));
            }
        }
    }
}

fn print_runs(runs: &[RunSummary]) {
    if runs.is_empty() {
        println!("No graph runs. Start one with: radar graph activate GRAPH --revision N");
        return;
    }
    println!(
        "{:<36}  {:<24}  {:>4}  {:>4}  {:<8}  {:<8}  {:<16}  CREATED",
        "RUN", "GRAPH", "REV", "GEN", "STATUS", "INTENT", "FAILED NODE"
    );
    for r in runs {
        println!(
            "{:<36}  {:<24}  {:>4}  {:>4}  {:<8}  {:<8}  {:<16}  {}",
            r.run.id,
            r.graph,
            r.run.revision,
            r.run.generation,
            r.run.status,
            r.run.lifecycle_intent,
            r.run.failed_node.as_deref().unwrap_or("-"),
            r.run.created_at.format("%Y-%m-%d %H:%M:%S")
        );
    }
}

fn print_inspection(i: &RunInspection) {
    let run = &i.run;
    println!("run:             {}", run.id);
    println!("graph:           {} revision {}", i.graph, run.revision);
    println!("semantics hash:  {}", i.semantics_hash);
    println!("monitor:         {} ({})", run.service_id, i.service_name);
    println!("generation:      {}", run.generation);
    println!("status:          {}", run.status);
    println!("intent:          {}", run.lifecycle_intent);
    println!("launch contract: {}", run.launch_contract);
    if let Some(node) = &run.failed_node {
        println!("failed node:     {node}");
    }
    if let Some(d) = &run.diagnostics {
        println!("diagnostics:     {d}");
    }
    match &i.operational {
        Some(o) => {
            println!(
                "worker:          {} ({}, heartbeat {})",
                o.worker_id,
                o.state,
                o.heartbeat_at.to_rfc3339()
            );
            match &o.coverage {
                Some(c) => println!("coverage:        {c}"),
                None => println!("coverage:        not reported"),
            }
        }
        None => println!("coverage:        no worker has reported this run"),
    }
    match &i.last_snapshot {
        Some(s) => println!(
            "last snapshot:   saved {} (committed {} by {}), {} observations, format {}, key {}, \
             signature {}…, versions {}",
            s.saved_at.to_rfc3339(),
            s.committed_at.to_rfc3339(),
            s.writer_id,
            s.processed_count,
            s.format_version,
            s.key_id,
            s.signature_prefix,
            s.runtime_versions
        ),
        None => println!("last snapshot:   none"),
    }
}
