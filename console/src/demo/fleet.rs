//! The demo's agents: full agent runtimes in this process, each with its own connections to
//! the database and a gRPC server on a free loopback port and on its default Unix socket
//! (`leasehold_shared::local::socket_path` of the port), where the console acts without a token.
//!
//! Start: one after the other (`demo-1`, `demo-2`, …); if one cannot start, those already
//! running are stopped before the error is returned. Stop: every agent's graceful shutdown at
//! once (stop claiming, drain for [`SHUTDOWN_TIMEOUT`], release the rest), or forced when
//! [`Fleet::force`] is cancelled meanwhile (a second signal).

use std::time::Duration;

use leasehold_agent::grpc::{Auth, GrpcOptions, SocketSetting, TransportLimits, UnixSocket};
use leasehold_agent::runtime::{AgentBuilder, RunSummary, RuntimeSettings, Shutdown};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::handlers;
use crate::error::{Error, Result};

/// Tasks each demo agent runs at once.
pub const CONCURRENCY: u32 = 8;
/// Lease timings: short, so the console's lease gauges move.
pub const LEASE_TTL: Duration = Duration::from_secs(10);
pub const HEARTBEAT: Duration = Duration::from_secs(2);
pub const GRACE: Duration = Duration::from_secs(3);
/// The fallback claim poll (on SQLite the file watcher wakes claimers within ~20 ms) and the
/// maintenance tick, short so recovery and retries show quickly.
pub const POLL_INTERVAL: Duration = Duration::from_millis(250);
/// Quitting should be quick: long tasks are released, not waited for.
pub const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(2);
pub const STOP_GRACE: Duration = Duration::from_secs(2);
/// Connections of each agent's pool (it has a heartbeat connection on top).
pub const MAX_CONNECTIONS: u32 = 4;

/// One running agent.
#[derive(Debug)]
pub struct Member {
    /// Its lease owner id (`demo-1#N`).
    pub id: String,
    /// Where its gRPC server listens.
    pub address: String,
    run: JoinHandle<std::result::Result<RunSummary, String>>,
}

/// How one agent ended.
#[derive(Debug, Clone)]
pub struct Ended {
    pub id: String,
    pub address: String,
    /// What it did, or why it failed.
    pub outcome: std::result::Result<RunSummary, String>,
}

/// The running agents.
#[derive(Debug)]
pub struct Fleet {
    pub members: Vec<Member>,
    shutdown: Shutdown,
}

/// The settings of agent `n` (from 1).
pub fn settings(n: u32) -> RuntimeSettings {
    RuntimeSettings {
        name: format!("demo-{n}"),
        concurrency: CONCURRENCY,
        lease_ttl: LEASE_TTL,
        heartbeat: HEARTBEAT,
        grace: GRACE,
        poll_interval: POLL_INTERVAL,
        shutdown_timeout: SHUTDOWN_TIMEOUT,
        stop_grace: STOP_GRACE,
        max_connections: MAX_CONNECTIONS,
        // Every demo type is served; a reopened database keeps its waiting tasks.
        unserved_after: None,
        ..RuntimeSettings::default()
    }
}

impl Fleet {
    /// Starts `count` agents on the database at `url`.
    pub async fn start(url: &str, count: u32) -> Result<Fleet> {
        let mut fleet = Fleet {
            members: Vec::new(),
            shutdown: Shutdown::default(),
        };
        for n in 1..=count {
            match start_one(url, n, &fleet.shutdown).await {
                Ok(member) => fleet.members.push(member),
                Err(e) => {
                    fleet.stop().await;
                    return Err(e);
                }
            }
        }
        Ok(fleet)
    }

    /// The gRPC address of the first agent (the console's seed).
    pub fn seed(&self) -> Option<&str> {
        self.members.first().map(|m| m.address.as_str())
    }

    /// Cancelling this forces a stop in progress (drop executions, release at once).
    pub fn force(&self) -> CancellationToken {
        self.shutdown.force.clone()
    }

    /// True while every agent still runs.
    pub fn all_running(&self) -> bool {
        self.members.iter().all(|m| !m.run.is_finished())
    }

    /// Drains every agent and waits for them.
    pub async fn stop(self) -> Vec<Ended> {
        self.shutdown.graceful.cancel();
        let mut ended = Vec::with_capacity(self.members.len());
        for m in self.members {
            let outcome = match m.run.await {
                Ok(outcome) => outcome,
                Err(e) => Err(format!("the agent's task failed: {e}")),
            };
            if let Err(why) = &outcome {
                tracing::warn!(agent.id = %m.id, error = %why, "demo agent ended with an error");
            }
            ended.push(Ended {
                id: m.id,
                address: m.address,
                outcome,
            });
        }
        ended
    }
}

async fn start_one(url: &str, n: u32, shutdown: &Shutdown) -> Result<Member> {
    let what = format!("starting demo agent {n}");
    let listener = TcpListener::bind(("127.0.0.1", 0))
        .await
        .map_err(|source| Error::Local {
            what: format!("{what}: listening on 127.0.0.1"),
            source,
        })?;
    let bound = listener.local_addr().map_err(|source| Error::Local {
        what: format!("{what}: reading the listener's address"),
        source,
    })?;
    let address = bound.to_string();
    // The agent's default socket, where the demo's console finds it (no token needed there).
    let socket = UnixSocket::open(&SocketSetting::Default, bound.port())
        .map_err(|e| Error::usage(format!("{what}: {}", e.report())))?;
    let auth = Auth::new(Vec::new()).map_err(|e| Error::usage(format!("{what}: {e}")))?;
    let agent = AgentBuilder::new(settings(n), handlers::registry()?)
        .grpc(GrpcOptions {
            listener,
            tls: None,
            auth,
            socket,
            limits: TransportLimits::default(),
        })
        .connect(url)
        .await
        .map_err(|e| {
            let cause = e.report();
            match leasehold_agent::exit::ExitCode::for_agent_error(&e) {
                leasehold_agent::exit::ExitCode::Usage => Error::usage(format!("{what}: {cause}")),
                _ => Error::Database { what, cause },
            }
        })?;
    let id = agent.id().as_str().to_owned();
    tracing::info!(agent.id = %id, %address, "demo agent started");
    let shutdown = shutdown.clone();
    let run = tokio::spawn(async move { agent.run(shutdown).await.map_err(|e| e.report()) });
    Ok(Member { id, address, run })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_agent_settings_are_valid() {
        for n in 1..=crate::cli::MAX_DEMO_AGENTS {
            let s = settings(n);
            assert_eq!(s.validate(), Ok(()), "agent {n}");
            assert_eq!(s.name, format!("demo-{n}"));
        }
    }
}
