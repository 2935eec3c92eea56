//! Sending cancels to the agent that holds each task, several at once.
//!
//! Any agent can cancel any task: it marks the row `cancel_requested`, and the holder stops
//! the execution when its next heartbeat finds the mark. The holder itself stops it at once
//! (and can then report it `cancelled`), so a cancel of a running task goes to its holder's
//! agent, found in the registry: [`Holders::agent_for`] reads the task's lease owner
//! (`GetTask`) and the owner's gRPC address (`ListAgents`, once), and connects there with the
//! seed's TLS, token and timeouts (one connection per holder, shared). [`cancel_many`] runs
//! the cancels [`CANCEL_CONCURRENCY`] at a time and yields the answers in the order asked.
//!
//! ```text
//!   ids ──▶ up to 16 at once: GetTask(id) on the seed ──▶ running, held by a live agent B?
//!                                  yes ─▶ Cancel(id) on B (B stops it now, waits, answers)
//!                                  no  ─▶ Cancel(id) on the seed
//!   answers, in the order of the ids
//! ```
//!
//! When things fail: routing is only a shortcut. When the registry cannot be read, the task
//! cannot be read, the holder is not a live registered agent or cannot be reached (or would
//! get the token in plaintext off this host), the cancel goes to the seed, which still
//! cancels the task correctly (the holder stops at its next heartbeat); the reason is logged.
//! A holder that changed between the read and the cancel is harmless the same way. With a
//! single agent in the registry no task is read at all.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures_util::stream::{self, Stream, StreamExt};
use leasehold_proto::v1;
use leasehold_shared::domain::AgentState;
use tokio::sync::OnceCell;

use super::fleet::settings_for;
use super::{Agent, Settings};
use crate::error::Result;

/// Most cancels in flight at once.
pub const CANCEL_CONCURRENCY: usize = 16;

/// Where running tasks' holders can be reached.
pub struct Holders {
    seed: Settings,
    fallback: Agent,
    /// Live agents other than the seed: agent id (lease owner) → gRPC address.
    others: HashMap<String, String>,
    /// One connection per address, made on first use (`None`: it could not be made).
    clients: Mutex<HashMap<String, Arc<OnceCell<Option<Agent>>>>>,
}

impl Holders {
    /// Reads the registry through `fallback` (the seed's connection). A registry that cannot
    /// be read leaves every call on the seed.
    pub async fn discover(seed: &Settings, fallback: Agent) -> Self {
        let others = match fallback.list_agents().await {
            Ok(r) => other_agents(&r),
            Err(error) => {
                tracing::debug!(%error, "cannot read the registry: every cancel goes to the seed");
                HashMap::new()
            }
        };
        Self {
            seed: seed.clone(),
            fallback,
            others,
            clients: Mutex::new(HashMap::new()),
        }
    }

    /// The agent to send an action on task `id` to: its holder when another live agent runs
    /// it and can be reached, else the seed.
    pub async fn agent_for(&self, id: i64) -> Agent {
        if self.others.is_empty() {
            return self.fallback.clone();
        }
        let owner = match self.fallback.get_task(id).await {
            Ok(r) => r.task.filter(held).map(|t| t.lease_owner),
            Err(error) => {
                tracing::debug!(task.id = id, %error, "cannot read the task: sent to the seed");
                None
            }
        };
        let Some(addr) = owner.and_then(|o| self.others.get(&o)) else {
            return self.fallback.clone();
        };
        self.connect(addr)
            .await
            .unwrap_or_else(|| self.fallback.clone())
    }

    async fn connect(&self, addr: &str) -> Option<Agent> {
        let cell = match self.clients.lock() {
            Ok(mut clients) => Arc::clone(clients.entry(addr.to_string()).or_default()),
            Err(_) => return None,
        };
        cell.get_or_init(|| async {
            let agent = match settings_for(&self.seed, addr) {
                Ok(settings) => Agent::connect(&settings).await,
                Err(e) => Err(e),
            };
            agent
                .map_err(|error| {
                    tracing::debug!(addr, %error, "cannot reach a holder: its tasks go to the seed");
                })
                .ok()
        })
        .await
        .clone()
    }
}

/// A task some agent is running (and so can stop at once).
fn held(task: &v1::Task) -> bool {
    let running = [
        v1::TaskStatus::Running as i32,
        v1::TaskStatus::CancelRequested as i32,
    ];
    running.contains(&task.status) && !task.lease_owner.is_empty()
}

/// Live agents with an address, other than the one that answered.
fn other_agents(r: &v1::ListAgentsResponse) -> HashMap<String, String> {
    r.agents
        .iter()
        .filter(|a| {
            a.id != r.answered_by
                && !a.grpc_address.is_empty()
                && !a.read_state().is(AgentState::Stopped)
        })
        .map(|a| (a.id.clone(), a.grpc_address.clone()))
        .collect()
}

/// Sends every cancel to the agent holding its task, [`CANCEL_CONCURRENCY`] at a time; the
/// answers come in the order of `requests`.
pub fn cancel_many(
    holders: &Holders,
    requests: Vec<v1::CancelRequest>,
) -> impl Stream<Item = (i64, Result<v1::CancelResponse>)> + '_ {
    stream::iter(requests)
        .map(move |request| async move {
            let id = request.id;
            let agent = holders.agent_for(id).await;
            (id, agent.cancel(request).await)
        })
        .buffered(CANCEL_CONCURRENCY)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agent(id: &str, addr: &str, state: &str) -> v1::AgentInfo {
        let state = leasehold_proto::wire::read::<AgentState>(0, state).known();
        v1::AgentInfo {
            id: id.into(),
            grpc_address: addr.into(),
            agent_state: state.map_or(0, leasehold_proto::wire::WireEnum::number),
            ..Default::default()
        }
    }

    #[test]
    fn holders_are_live_agents_with_an_address_other_than_the_seed() {
        let r = v1::ListAgentsResponse {
            agents: vec![
                agent("seed#1", "127.0.0.1:7070", "running"),
                agent("a#1", "127.0.0.1:7071", "running"),
                agent("b#1", "127.0.0.1:7072", "draining"),
                agent("c#1", "127.0.0.1:7073", "stopped"),
                agent("d#1", "", "running"),
            ],
            answered_by: "seed#1".into(),
            ..Default::default()
        };
        let mut others: Vec<_> = other_agents(&r).into_iter().collect();
        others.sort();
        assert_eq!(
            others,
            [
                ("a#1".to_string(), "127.0.0.1:7071".to_string()),
                ("b#1".to_string(), "127.0.0.1:7072".to_string()),
            ]
        );
    }

    #[test]
    #[allow(deprecated)] // an older agent fills only the word
    fn a_stopped_agent_is_skipped_when_an_older_agent_says_so_in_words() {
        let mut old = agent("c#1", "127.0.0.1:7073", "");
        old.state = "stopped".into();
        let mut newer = agent("e#1", "127.0.0.1:7074", "");
        newer.agent_state = 9;
        let r = v1::ListAgentsResponse {
            agents: vec![old, newer],
            answered_by: "seed#1".into(),
            ..Default::default()
        };
        // A state this build does not know is not "stopped": the agent is still asked.
        let others: Vec<_> = other_agents(&r).into_keys().collect();
        assert_eq!(others, ["e#1"]);
    }

    #[test]
    fn only_running_tasks_with_an_owner_are_routed() {
        let task = |status: v1::TaskStatus, owner: &str| v1::Task {
            status: status as i32,
            lease_owner: owner.into(),
            ..Default::default()
        };
        assert!(held(&task(v1::TaskStatus::Running, "a#1")));
        assert!(held(&task(v1::TaskStatus::CancelRequested, "a#1")));
        assert!(!held(&task(v1::TaskStatus::Running, "")));
        // A finished task keeps the owner of its last attempt: nobody to route to.
        assert!(!held(&task(v1::TaskStatus::Succeeded, "a#1")));
        assert!(!held(&task(v1::TaskStatus::Queued, "")));
    }
}
