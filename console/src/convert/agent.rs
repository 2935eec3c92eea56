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

/// The maintenance leader's lease (`ListAgentsResponse.leader`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LeaderView {
    /// Agent id of the holder; `null` when the last leader resigned.
    pub owner: Option<String>,
    /// Fencing token: one more at every change of leader.
    pub term: i64,
    /// The lease is held now.
    pub held: bool,
    pub elected_at: Option<Timestamp>,
    pub lease_until: Option<Timestamp>,
    pub heartbeat_at: Option<Timestamp>,
}

impl LeaderView {
    /// Converts the wire's leader lease.
    pub fn from_wire(l: v1::LeaderInfo) -> Result<Self, WireError> {
        if l.term < 0 {
            return Err(WireError::OutOfRange {
                field: "leader term",
                value: l.term,
            });
        }
        Ok(Self {
            owner: opt_string(l.owner),
            term: l.term,
            held: l.held,
            elected_at: opt_time("leader elected_at_ms", l.elected_at_ms)?,
            lease_until: opt_time("leader lease_until_ms", l.lease_until_ms)?,
            heartbeat_at: opt_time("leader heartbeat_at_ms", l.heartbeat_at_ms)?,
        })
    }
}

/// `agents ls`: the registry as one agent sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AgentList {
    pub agents: Vec<AgentView>,
    /// The leader lease; `null` when no agent has ever led.
    pub leader: Option<LeaderView>,
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
                let state = a.read_state().word().into_owned();
                Ok(AgentView {
                    heartbeat_age_ms: heartbeat_at.map(|h| now.millis().saturating_sub(h.millis())),
                    heartbeat_at,
                    started_at: opt_time("started_at_ms", a.started_at_ms)?,
                    stopped_at: opt_time("stopped_at_ms", a.stopped_at_ms)?,
                    id: a.id,
                    name: a.name,
                    host: a.host,
                    pid: a.pid,
                    state,
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
            leader: r.leader.map(LeaderView::from_wire).transpose()?,
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
            stale_after_ms: 0,
            agents: vec![v1::AgentInfo {
                id: "web-1#3".into(),
                heartbeat_at_ms: 1_000_000,
                grpc_address: String::new(),
                ..Default::default()
            }],
            now_ms: 1_004_500,
            answered_by: "web-1#3".into(),
            leader: None,
            ..Default::default()
        };
        let list = AgentList::from_wire(r).ok();
        let agent = list.as_ref().and_then(|l| l.agents.first());
        assert_eq!(agent.and_then(|a| a.heartbeat_age_ms), Some(4_500));
        assert_eq!(agent.and_then(|a| a.grpc_address.clone()), None);
        assert_eq!(list.and_then(|l| l.leader), None);
    }

    #[test]
    fn the_leader_lease_converts_and_a_resigned_owner_is_null() {
        let r = v1::ListAgentsResponse {
            now_ms: 1_764_588_000_000,
            leader: Some(v1::LeaderInfo {
                owner: String::new(),
                term: 7,
                elected_at_ms: 1_764_587_880_000,
                lease_until_ms: 0,
                heartbeat_at_ms: 1_764_587_990_000,
                held: false,
            }),
            ..Default::default()
        };
        let json = AgentList::from_wire(r)
            .ok()
            .and_then(|l| serde_json::to_value(l.leader).ok());
        assert_eq!(
            json,
            Some(serde_json::json!({
                "owner": null,
                "term": 7,
                "held": false,
                "elected_at": "2025-12-01T11:18:00.000Z",
                "lease_until": null,
                "heartbeat_at": "2025-12-01T11:19:50.000Z",
            }))
        );
        let bad = v1::ListAgentsResponse {
            now_ms: 1,
            leader: Some(v1::LeaderInfo {
                term: -1,
                ..Default::default()
            }),
            ..Default::default()
        };
        assert!(AgentList::from_wire(bad).is_err());
    }

    #[test]
    fn a_bad_time_is_refused() {
        let r = v1::ListAgentsResponse {
            stale_after_ms: 0,
            agents: vec![v1::AgentInfo {
                started_at_ms: -3,
                ..Default::default()
            }],
            now_ms: 1,
            answered_by: String::new(),
            leader: None,
            ..Default::default()
        };
        assert!(AgentList::from_wire(r).is_err());
    }
}
