//! The registry service: the agent's row in `agents` (state, active executions, local
//! concurrency) refreshed every heartbeat, and the policy cache (per-type timeouts and slow
//! thresholds) refreshed with it. It runs on the shared pool, so it does not prove the agent
//! alive: the liveness deadline (`alive_until`) is pushed by the heartbeat service on its own
//! connection, and only that deadline decides whether the agent's types are served.
//!
//! When things fail: errors are logged and retried next interval; the row going stale only
//! makes the console show the agent as silent.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use leasehold_shared::TaskType;
use leasehold_shared::domain::AgentState;
use leasehold_shared::store::{AgentHeartbeatParams, RecentRunsParams};
use tokio_util::sync::CancellationToken;

use super::core::Core;
use super::history::{HISTORY_RUNS, HISTORY_SEED_SCAN};

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
        Self::seed_history(core, limit).await;
    }

    /// Reads the fleet's recent successful runs of the served types that have too few runs
    /// here for the slow-compared-with-history rule (see [`super::history`]); at most once a
    /// minute, and not at all once every type has enough.
    async fn seed_history(core: &Core, limit: Duration) {
        if !core.history.seed_due(super::renewal::now()) {
            return;
        }
        let wanting = core.history.wanting(&core.types);
        if wanting.is_empty() {
            return;
        }
        let params = RecentRunsParams {
            task_types: wanting,
            per_type: HISTORY_RUNS as u32,
            scan: HISTORY_SEED_SCAN,
        };
        let runs = match tokio::time::timeout(limit, core.store.task_recent_runs(params)).await {
            Ok(Ok(runs)) => runs,
            Ok(Err(error)) => {
                tracing::debug!(%error, "reading recent runs failed");
                return;
            }
            Err(_) => {
                tracing::debug!("reading recent runs timed out");
                return;
            }
        };
        // Newest first; each type's in the order read.
        let mut by_type: HashMap<&TaskType, Vec<Duration>> = HashMap::new();
        for run in &runs {
            by_type
                .entry(&run.task_type)
                .or_default()
                .push(run.run_time);
        }
        for (task_type, times) in by_type {
            core.history.seed(task_type, &times);
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
