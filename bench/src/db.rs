//! A database of its own for each benchmark, on the local PostgreSQL, and
//! the monitors in it.

use anyhow::{Context, Result};
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use radar::store::{self, Pool, Services};
use uuid::Uuid;

use crate::workload;

/// A migrated database named `radar_bench_*`, dropped by [`BenchDb::drop_db`].
pub struct BenchDb {
    pub name: String,
    pub url: String,
    server: String,
}

/// One benchmark monitor: its id and the topic prefix of its readings.
#[derive(Debug, Clone)]
pub struct Monitor {
    pub id: Uuid,
    pub prefix: String,
}

impl BenchDb {
    /// Creates and migrates `radar_bench_<tag>_<random>` on `server`
    /// (a URL without a database name).
    pub async fn create(server: &str, tag: &str) -> Result<Self> {
        let server = server.trim_end_matches('/').to_string();
        let name = format!(
            "radar_bench_{tag}_{}",
            &Uuid::new_v4().simple().to_string()[..12]
        );
        let mut admin = AsyncPgConnection::establish(&format!("{server}/postgres"))
            .await
            .with_context(|| format!("connecting to PostgreSQL at {server}"))?;
        diesel::sql_query(format!("CREATE DATABASE \"{name}\""))
            .execute(&mut admin)
            .await
            .with_context(|| format!("creating database {name}"))?;
        let url = format!("{server}/{name}");
        store::migrate(&url)
            .await
            .with_context(|| format!("migrating {name}"))?;
        Ok(Self { name, url, server })
    }

    /// A database an earlier run kept (`radar_bench_*` on `server`), which
    /// must hold exactly `snapshots` snapshots. It is never dropped here.
    pub async fn existing(server: &str, name: &str, snapshots: usize) -> Result<Self> {
        let server = server.trim_end_matches('/').to_string();
        anyhow::ensure!(
            name.starts_with("radar_bench_")
                && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'),
            "--reuse-db takes the name of a database radar-bench kept (radar_bench_...), not {name:?}"
        );
        let db = Self {
            name: name.to_string(),
            url: format!("{server}/{name}"),
            server,
        };
        let found = db.snapshot_count().await?;
        anyhow::ensure!(
            found == snapshots,
            "database {name} holds {found} snapshots, not {snapshots}: pass --recovery-monitors {found}"
        );
        Ok(db)
    }

    /// How many snapshot rows the database holds.
    pub async fn snapshot_count(&self) -> Result<usize> {
        #[derive(diesel::QueryableByName)]
        struct Count {
            #[diesel(sql_type = diesel::sql_types::BigInt)]
            n: i64,
        }
        let mut conn = self.connect().await?;
        let count: Count = diesel::sql_query("SELECT count(*) AS n FROM radar_runtime_checkpoints")
            .get_result(&mut conn)
            .await
            .with_context(|| format!("counting the snapshots in {}", self.name))?;
        Ok(usize::try_from(count.n).unwrap_or(0))
    }

    /// Reclaims the row versions earlier starts left (a kept database is
    /// started many times; with autovacuum off, as on this machine's
    /// cluster, each start would otherwise read more dead rows than the
    /// last).
    pub async fn vacuum(&self) -> Result<()> {
        let mut conn = self.connect().await?;
        diesel::sql_query("VACUUM (ANALYZE)")
            .execute(&mut conn)
            .await
            .with_context(|| format!("vacuuming {}", self.name))?;
        Ok(())
    }

    pub async fn pool(&self, size: usize) -> Result<Pool> {
        // The worker's default statement timeout.
        Ok(store::connect(&self.url, size, std::time::Duration::from_secs(30)).await?)
    }

    pub async fn connect(&self) -> Result<AsyncPgConnection> {
        AsyncPgConnection::establish(&self.url)
            .await
            .with_context(|| format!("connecting to {}", self.name))
    }

    /// Creates `count` monitors of `readings` readings each, under unique
    /// topic prefixes.
    pub async fn create_monitors(&self, count: usize, readings: usize) -> Result<Vec<Monitor>> {
        let services = Services::new(self.pool(4).await?);
        let run = Uuid::new_v4().simple().to_string();
        let mut monitors = Vec::with_capacity(count);
        for i in 0..count {
            let prefix = format!("radar-bench/{}/{i}", &run[..12]);
            let config = workload::monitor_config(
                &format!("bench-{}-{i:05}", &run[..8]),
                &prefix,
                readings,
                workload::TRAINING_FRAMES,
                workload::CALIBRATION_FRAMES,
            )?;
            let id = services.create(&config).await?;
            monitors.push(Monitor { id, prefix });
        }
        Ok(monitors)
    }

    /// Drops the database, disconnecting whoever is still on it.
    pub async fn drop_db(self) -> Result<()> {
        let mut admin = AsyncPgConnection::establish(&format!("{}/postgres", self.server)).await?;
        diesel::sql_query(format!(
            "DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)",
            self.name
        ))
        .execute(&mut admin)
        .await
        .with_context(|| format!("dropping database {}", self.name))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn only_a_kept_bench_database_can_be_reused() {
        for name in [
            "postgres",
            "radar_bench_x; DROP TABLE y",
            "radar_bench_a\"b",
            "",
        ] {
            let error = BenchDb::existing("postgres://nobody@127.0.0.1:1", name, 1)
                .await
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(
                error.contains("--reuse-db takes the name"),
                "{name:?}: {error}"
            );
        }
    }
}
