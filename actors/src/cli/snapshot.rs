//! `radar snapshot ...`: looking at a monitor's signed snapshot.

use std::process::ExitCode;

use anyhow::Context;
use clap::Subcommand;
use radar::{
    config::Settings,
    snapshot::{CheckpointKey, Inspection, SnapshotBinding},
    store::{self, CheckpointStore, Services},
};
use uuid::Uuid;

#[derive(Debug, Subcommand)]
pub enum SnapshotCommand {
    /// Verify a monitor's snapshot with this worker's key and config, and
    /// print its envelope, counters, coverage history and watermarks. Exits
    /// 0 when a worker would restore it, 2 when not (missing, corrupted or
    /// incompatible), 1 on other errors.
    Inspect {
        id: Uuid,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
}

pub async fn run(command: SnapshotCommand, settings: &Settings) -> anyhow::Result<ExitCode> {
    match command {
        SnapshotCommand::Inspect { id, json } => {
            let inspection = inspect(id, settings).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&inspection)?);
            } else {
                print!("{}", render(&inspection));
            }
            Ok(ExitCode::from(inspection.exit_code()))
        }
    }
}

/// Loads and checks the snapshot of monitor `id` exactly as a worker would.
pub async fn inspect(id: Uuid, settings: &Settings) -> anyhow::Result<Inspection> {
    let (secret, _) = settings
        .checkpoint_key()
        .context("loading the checkpoint key")?;
    let key = CheckpointKey::new(secret.expose().to_vec());
    store::check_schema(&settings.database_url).await?;
    let pool = store::connect(&settings.database_url, 2, settings.checkpoint_timeout()).await?;
    let monitor = Services::new(pool.clone()).get(id).await?;
    let binding = SnapshotBinding::for_monitor(id, &monitor.monitor_config()?);
    let store = CheckpointStore::new(pool, "radar-snapshot-inspect");
    Ok(match store.load_snapshot(id).await? {
        Some(row) => row.inspect(&binding, &key),
        None => Inspection::missing(id),
    })
}

/// The text form: one fact per line, the verdict first.
fn render(i: &Inspection) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let verdict = match (&i.reason, i.verified && i.compatible) {
        (_, true) => "restorable".to_string(),
        (Some(reason), false) => format!("NOT restorable: {reason}"),
        (None, false) => "NOT restorable".to_string(),
    };
    let _ = writeln!(out, "monitor:          {}", i.service_id);
    let _ = writeln!(out, "snapshot:         {verdict}");
    let _ = writeln!(out, "verified:         {}", i.verified);
    let _ = writeln!(out, "compatible:       {}", i.compatible);
    if !i.present {
        return out;
    }
    let unverified = if i.envelope.is_none() {
        " (unverified column)"
    } else {
        ""
    };
    if let Some(n) = i.processed_count {
        let _ = writeln!(out, "processed frames: {n}{unverified}");
    }
    if let Some(t) = i.saved_at {
        let _ = writeln!(out, "saved at:         {}{unverified}", t.to_rfc3339());
    }
    let _ = writeln!(
        out,
        "phase:            {}",
        i.phase.as_deref().unwrap_or("(not recorded)")
    );
    if let Some(token) = &i.fencing_token {
        let _ = writeln!(out, "fencing token:    {token}");
    }
    render_envelope(&mut out, i);
    render_counters(&mut out, i);
    render_coverage(&mut out, i);
    out
}

/// The signed envelope's fields, when the snapshot has one.
fn render_envelope(out: &mut String, i: &Inspection) {
    use std::fmt::Write;
    if let Some(e) = &i.envelope {
        let _ = writeln!(out, "envelope:");
        let _ = writeln!(out, "  format version:   {}", e.format_version);
        let _ = writeln!(out, "  config:           {}", &e.config_fingerprint[..16]);
        let _ = writeln!(out, "  runtime versions: {}", e.runtime_versions);
        let _ = writeln!(out, "  key id:           {}", e.key_id);
        let _ = writeln!(out, "  watermarks kept:  {}", e.observation_history_len);
        let _ = writeln!(
            out,
            "  payload:          {} bytes, sha256 {}",
            e.payload_len,
            &e.payload_sha256[..16]
        );
    }
}

/// What the monitor counted, and whether every observation is accounted for.
fn render_counters(out: &mut String, i: &Inspection) {
    use std::fmt::Write;
    if let Some(c) = &i.counters {
        let _ = writeln!(out, "counters:");
        let _ = writeln!(out, "  observations received: {}", c.observations_received);
        let _ = writeln!(out, "  observations accepted: {}", c.observations_accepted);
        for (reason, n) in &c.observations_rejected {
            let _ = writeln!(out, "  rejected ({reason}): {n}");
        }
        let _ = writeln!(
            out,
            "  frames: {}, flagged: {}, alarms opened: {}",
            c.frames, c.frames_flagged, c.alarms_opened
        );
    }
    if let Some(f) = &i.fates {
        let _ = writeln!(
            out,
            "  fates: {} received = {} accepted + {} rejected + {} held{}",
            f.received,
            f.accepted,
            f.rejected,
            f.held,
            if f.unaccounted == 0 {
                String::new()
            } else {
                format!(" ({} unaccounted)", f.unaccounted)
            }
        );
    }
}

/// The coverage history, the watermarks and the last restore.
fn render_coverage(out: &mut String, i: &Inspection) {
    use std::fmt::Write;
    if let Some(cov) = &i.coverage {
        let show = |t: Option<chrono::DateTime<chrono::Utc>>| {
            t.map_or("-".to_string(), |t| t.to_rfc3339())
        };
        let _ = writeln!(
            out,
            "coverage (version {}): {} .. {}",
            cov.version,
            show(cov.covered_from),
            show(cov.covered_to)
        );
        for gap in &cov.gaps {
            let cause = serde_json::to_value(gap.cause)
                .ok()
                .and_then(|v| v.as_str().map(String::from))
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "  gap {cause}: {} .. {}",
                gap.from.to_rfc3339(),
                show(gap.to)
            );
        }
    }
    if let Some(w) = &i.watermarks {
        let _ = writeln!(out, "watermarks:");
        for (reading, ts) in &w.0 {
            let _ = writeln!(out, "  {reading}: {}", ts.to_rfc3339());
        }
    }
    if let Some(last) = i.coverage.as_ref().and_then(|c| c.last_restore()) {
        let _ = writeln!(
            out,
            "restores:         {} (last at {} from the snapshot saved {})",
            last.restores,
            last.restored_at.to_rfc3339(),
            last.saved_at.to_rfc3339()
        );
    }
    if let Some(r) = &i.recovery
        && let Some(n) = r.restored_processed_count
    {
        let _ = writeln!(
            out,
            "  restored at {n} frames, cleared {} partial observations",
            r.cleared_partial_observations
        );
    }
}

#[cfg(test)]
mod tests {
    use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
    use figment::providers::Serialized;
    use radar::{
        config::MonitorConfig,
        snapshot::{ManagedState, seal},
        store::Claim,
    };

    use super::*;

    /// A fresh, migrated database on the local test server.
    async fn database() -> String {
        let server = std::env::var("RADAR_TEST_DATABASE_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432".into());
        let server = server.trim_end_matches('/');
        let name = format!("radar_test_cli_snapshot_{}", Uuid::new_v4().simple());
        let mut admin = AsyncPgConnection::establish(&format!("{server}/postgres"))
            .await
            .unwrap();
        diesel::sql_query(format!("CREATE DATABASE \"{name}\""))
            .execute(&mut admin)
            .await
            .unwrap();
        let url = format!("{server}/{name}");
        store::migrate(&url).await.unwrap();
        url
    }

    fn settings(url: &str) -> Settings {
        let vars = vec![("DATABASE_URL".to_string(), url.to_string())];
        Settings::load(&vars, Serialized::defaults(serde_json::json!({})))
            .unwrap()
            .settings
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn inspect_exits_0_for_a_good_snapshot_and_2_naming_the_reason_for_a_tampered_row() {
        let url = database().await;
        let settings = settings(&url);
        let (secret, _) = settings.checkpoint_key().unwrap();
        let key = CheckpointKey::new(secret.expose().to_vec());
        let pool = store::connect(&url, 2, std::time::Duration::from_secs(10))
            .await
            .unwrap();
        let config =
            MonitorConfig::from_toml(include_str!("../../../config/monitors/pump.toml")).unwrap();
        let id = Services::new(pool.clone()).create(&config).await.unwrap();
        let binding = SnapshotBinding::for_monitor(id, &config);
        let sealed = seal(&binding, &ManagedState::default(), chrono::Utc::now(), &key).unwrap();
        let store = CheckpointStore::new(pool, "worker-a");
        let Claim::Won(_) = store.claim(&sealed).await.unwrap() else {
            panic!("claim lost");
        };

        let inspect_cmd = |json| SnapshotCommand::Inspect { id, json };
        assert_eq!(
            run(inspect_cmd(true), &settings).await.unwrap(),
            ExitCode::SUCCESS
        );

        diesel::sql_query(
            "UPDATE radar_runtime_checkpoints \
             SET envelope = set_byte(envelope, 40, get_byte(envelope, 40) # 2) WHERE service_id = $1",
        )
        .bind::<diesel::sql_types::Uuid, _>(id)
        .execute(&mut AsyncPgConnection::establish(&url).await.unwrap())
        .await
        .unwrap();
        assert_eq!(
            run(inspect_cmd(false), &settings).await.unwrap(),
            ExitCode::from(2)
        );
        assert_eq!(
            run(inspect_cmd(true), &settings).await.unwrap(),
            ExitCode::from(2)
        );
        let inspection = inspect(id, &settings).await.unwrap();
        assert_eq!(inspection.reason_code, Some("damaged_envelope"));
        let text = render(&inspection);
        assert!(
            text.contains("NOT restorable: corrupted: damaged envelope"),
            "{text}"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn inspecting_an_unknown_monitor_is_an_error_not_a_verdict() {
        let url = database().await;
        let err = inspect(Uuid::new_v4(), &settings(&url)).await.unwrap_err();
        assert!(err.to_string().contains("no monitor"), "{err}");
    }
}
