//! Outages ending: the broker restarted, its port's blackhole removed, the
//! database restarted or resumed, each recorded as an outage; and the
//! iptables rules of the blackhole.

use anyhow::Result;
use chrono::Utc;

use super::{Chaos, Database};
use crate::check::{Outage, OutageKind, Ts};

impl Chaos {
    pub(super) async fn broker_up(&mut self, since: Ts) -> Result<()> {
        self.broker.restart().await?;
        self.broker_down = None;
        self.outages.push(Outage {
            kind: OutageKind::Broker,
            from: since,
            to: Utc::now(),
            what: format!("broker restart at {}", since.format("%H:%M:%S%.3f")),
        });
        Ok(())
    }

    pub(super) fn link_up(&mut self) -> Result<()> {
        if let Some((_, since, hole)) = self.link_down.take() {
            hole.remove()?;
            self.outages.push(Outage {
                kind: OutageKind::BrokerLink,
                from: since,
                to: Utc::now(),
                what: format!("broker blackhole at {}", since.format("%H:%M:%S%.3f")),
            });
        }
        Ok(())
    }

    pub(super) async fn database_up(&mut self) -> Result<()> {
        let what = match self.database {
            Database::Up => return Ok(()),
            Database::Stopped { .. } => {
                let cluster = &mut self.cluster;
                tokio::task::block_in_place(|| cluster.restart())?;
                "database restart"
            }
            Database::Paused { .. } => {
                self.cluster.resume()?;
                "database pause"
            }
        };
        self.database = Database::Up;
        if let Some(since) = self.database_down_since.take() {
            self.outages.push(Outage {
                kind: OutageKind::Database,
                from: since,
                to: Utc::now(),
                what: format!("{what} at {}", since.format("%H:%M:%S%.3f")),
            });
        }
        Ok(())
    }
}

/// iptables rules that drop every packet to and from one loopback port,
/// removed by [`Blackhole::remove`] or, at the latest, on drop.
pub struct Blackhole {
    port: u16,
    installed: bool,
}

impl Blackhole {
    /// Loopback only, a private port only: the shared services are never touched.
    fn rules(port: u16) -> [Vec<String>; 2] {
        let port = port.to_string();
        ["--dport", "--sport"].map(|dir| {
            ["INPUT", "-i", "lo", "-p", "tcp", dir, &port, "-j", "DROP"]
                .map(str::to_string)
                .to_vec()
        })
    }

    fn iptables(action: &str, rule: &[String]) -> Result<()> {
        let status = std::process::Command::new("iptables")
            .args(["-w", action])
            .args(rule)
            .status()?;
        anyhow::ensure!(
            status.success(),
            "iptables {action} {} failed",
            rule.join(" ")
        );
        Ok(())
    }

    pub fn drop_port(port: u16) -> Result<Self> {
        let hole = Self {
            port,
            installed: true,
        };
        for rule in Self::rules(port) {
            if let Err(e) = Self::iptables("-I", &rule) {
                hole.remove()?;
                return Err(e);
            }
        }
        Ok(hole)
    }

    pub fn remove(mut self) -> Result<()> {
        self.installed = false;
        let mut result = Ok(());
        for rule in Self::rules(self.port) {
            // Each rule is removed even if the other was never added.
            if let Err(e) = Self::iptables("-D", &rule)
                && result.is_ok()
            {
                result = Err(e);
            }
        }
        result
    }
}

impl Drop for Blackhole {
    fn drop(&mut self) {
        if self.installed {
            for rule in Self::rules(self.port) {
                let _ = Self::iptables("-D", &rule);
            }
        }
    }
}
