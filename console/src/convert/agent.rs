//! The agent registry from the wire (`agents ls`; see the parent module for conventions).

use leasehold_proto::v1;
use serde::Serialize;

use super::{Timestamp, WireError, opt_string, opt_time, time};

/// One agent of the registry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AgentView {
    pub id: String,
    pub name: String,
    pub host: String,
    pub pid: u32,
    pub state: String,
    pub leader: bool,
    pub active: u32,
    pub local_concurrency: u32,
    pub version: String,
    /// `null` when it serves no gRPC.
    pub grpc_address: Option<String>,
    pub task_types: Vec<String>,
    pub started_at: Option<Timestamp>,
    pub heartbeat_at: Option<Timestamp>,
    /// Age of the last registry heartbeat at the time of the read (database clock); `null`
    /// when it never beat.
    pub heartbeat_age_ms: Option<i64>,
    pub stopped_at: Option<Timestamp>,
}

/// `agents ls`: the registry as one agent sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AgentList {
    pub agents: Vec<AgentView>,
    /// Id of the agent that answered.
    pub answered_by: String,
    /// Database time of the read.
    pub now: Timestamp,
}

impl AgentList {
    /// Converts a `ListAgents` reply.
    pub fn from_wire(r: v1::ListAgentsResponse) -> Result<Self, WireError> {
        let now = time("now_ms", r.now_ms)?;
        let agents = r
            .agents
            .into_iter()
            .map(|a| {
                let heartbeat_at = opt_time("heartbeat_at_ms", a.heartbeat_at_ms)?;
                Ok(AgentView {
                    heartbeat_age_ms: heartbeat_at.map(|h| now.millis().saturating_sub(h.millis())),
                    heartbeat_at,
                    started_at: opt_time("started_at_ms", a.started_at_ms)?,
                    stopped_at: opt_time("stopped_at_ms", a.stopped_at_ms)?,
                    id: a.id,
                    name: a.name,
                    host: a.host,
                    pid: a.pid,
                    state: a.state,
                    leader: a.leader,
                    active: a.active,
                    local_concurrency: a.local_concurrency,
                    version: a.version,
                    grpc_address: opt_string(a.grpc_address),
                    task_types: a.task_types,
                })
            })
            .collect::<Result<_, WireError>>()?;
        Ok(Self {
            agents,
            answered_by: r.answered_by,
            now,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heartbeat_age_comes_from_the_database_clock() {
        let r = v1::ListAgentsResponse {
            caller_role: String::new(),
            stale_after_ms: 0,
            agents: vec![v1::AgentInfo {
                id: "web-1#3".into(),
                heartbeat_at_ms: 1_000_000,
                grpc_address: String::new(),
                ..Default::default()
            }],
            now_ms: 1_004_500,
            answered_by: "web-1#3".into(),
        };
        let list = AgentList::from_wire(r).ok();
        let agent = list.as_ref().and_then(|l| l.agents.first());
        assert_eq!(agent.and_then(|a| a.heartbeat_age_ms), Some(4_500));
        assert_eq!(agent.and_then(|a| a.grpc_address.clone()), None);
    }

    #[test]
    fn a_bad_time_is_refused() {
        let r = v1::ListAgentsResponse {
            caller_role: String::new(),
            stale_after_ms: 0,
            agents: vec![v1::AgentInfo {
                started_at_ms: -3,
                ..Default::default()
            }],
            now_ms: 1,
            answered_by: String::new(),
        };
        assert!(AgentList::from_wire(r).is_err());
    }
}
