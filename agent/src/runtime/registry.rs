//! The registry service: the agent's row in `agents` (state, active executions, local
//! concurrency) refreshed every heartbeat, and the policy cache (per-type timeouts and slow
//! thresholds) refreshed with it. It runs on the shared pool, so it does not prove the agent
//! alive: the liveness deadline (`alive_until`) is pushed by the heartbeat service on its own
//! connection, and only that deadline decides whether the agent's types are served.
//!
//! When things fail: errors are logged and retried next interval; the row going stale only
//! makes the console show the agent as silent.

use std::sync::Arc;
use std::time::Duration;

use leasehold_shared::domain::AgentState;
use leasehold_shared::store::AgentHeartbeatParams;
use tokio_util::sync::CancellationToken;

use super::core::Core;

pub(crate) struct Registry {
    pub(crate) core: Arc<Core>,
}

impl Registry {
    pub(crate) async fn beat(core: &Core) {
        let state = if core.is_draining() {
            AgentState::Draining
        } else {
            AgentState::Running
        };
        let params = AgentHeartbeatParams {
            id: core.id.clone(),
            state,
            active: u32::try_from(core.book.executing()).unwrap_or(u32::MAX),
            local_concurrency: u32::try_from(core.book.limit()).unwrap_or(u32::MAX),
        };
        // Bounded: a silent connection must not stall the registry or a shutdown.
        let limit = core.settings.heartbeat.max(Duration::from_secs(1));
        match tokio::time::timeout(limit, core.store.agent_heartbeat(params)).await {
            Ok(Ok(true)) => {}
            Ok(Ok(false)) => tracing::warn!("registry row missing or marked stopped"),
            Ok(Err(error)) => tracing::warn!(%error, "registry heartbeat failed"),
            Err(_) => tracing::warn!(?limit, "registry heartbeat timed out"),
        }
        match tokio::time::timeout(limit, core.store.policy_list()).await {
            Ok(Ok(policies)) => core.policies.replace(policies),
            Ok(Err(error)) => tracing::debug!(%error, "policy refresh failed"),
            Err(_) => tracing::debug!("policy refresh timed out"),
        }
    }

    pub(crate) async fn run(self, stop: CancellationToken) {
        let mut tick = tokio::time::interval(self.core.settings.heartbeat);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tick.tick() => Self::beat(&self.core).await,
            }
        }
    }
}
