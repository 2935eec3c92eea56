//! `leasehold agents ls` (ListAgents) and `leasehold drain` (Drain of the agent named by
//! `--agent`).

use serde::Serialize;

use crate::client::Agent;
use crate::convert::agent::{AgentList, LeaderView};
use crate::error::{Error, Result};
use crate::exit;
use crate::output::Out;
use crate::output::table::{Column, Table, WIDTH};
use crate::output::text::{age, short_duration, shown};

/// Runs `agents ls`.
pub async fn run_ls(agent: &Agent, out: &mut Out) -> Result<u8> {
    let reply = agent.list_agents().await?;
    let list = AgentList::from_wire(reply).map_err(|e| Error::bad_wire("list agents", e))?;
    if out.json_mode() {
        out.json(&list)?;
    } else {
        out.lines(ls_table(&list))?;
    }
    Ok(exit::OK)
}

/// The table of `agents ls`.
pub fn ls_table(list: &AgentList) -> Vec<String> {
    let mut lines = if list.agents.is_empty() {
        vec!["no agents".to_owned()]
    } else {
        let mut table = Table::new(vec![
            Column::new("L", 1, 1),
            Column::new("ID", 6, 32),
            Column::new("STATE", 5, 8),
            Column::new("ACTIVE", 6, 13),
            Column::new("HEARTBEAT", 9, 12),
            Column::new("VERSION", 7, 16),
            Column::new("ADDRESS", 7, 40),
        ]);
        for a in &list.agents {
            table.row(vec![
                if a.leader { "*".into() } else { String::new() },
                a.id.clone(),
                a.state.clone(),
                format!("{}/{}", a.active, a.local_concurrency),
                a.heartbeat_age_ms.map_or_else(
                    || "never".into(),
                    |ms| format!("{} ago", short_duration(ms)),
                ),
                a.version.clone(),
                a.grpc_address.clone().unwrap_or_else(|| "-".into()),
            ]);
        }
        table.render(WIDTH)
    };
    lines.push(shown(
        &leader_line(list.leader.as_ref(), list.now.millis()),
        WIDTH,
    ));
    lines.push(shown(
        &format!("answered by {} (* = leader)", list.answered_by),
        WIDTH,
    ));
    lines
}

/// `leader web-1#3 · term 7 · elected 2m00s ago`, or `no leader` (with the last term when an
/// agent led before).
pub fn leader_line(leader: Option<&LeaderView>, now_ms: i64) -> String {
    match leader {
        Some(l) if l.held => {
            let owner = l.owner.as_deref().unwrap_or("?");
            let elected = l
                .elected_at
                .map_or_else(|| "-".to_owned(), |t| age(now_ms, t.millis()));
            format!("leader {owner} · term {} · elected {elected}", l.term)
        }
        Some(l) if l.term > 0 => format!("no leader (last term {})", l.term),
        _ => "no leader".to_owned(),
    }
}

/// The JSON of `drain`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Draining {
    pub agent: String,
    pub held: u32,
}

/// Runs `drain`.
pub async fn run_drain(agent: &Agent, out: &mut Out) -> Result<u8> {
    let reply = agent.drain().await?;
    let d = Draining {
        agent: agent.addr().to_owned(),
        held: reply.held,
    };
    if out.json_mode() {
        out.json(&d)?;
    } else {
        out.line(&drain_line(&d))?;
    }
    Ok(exit::OK)
}

/// `agent at ADDR is draining (3 leases held)`.
pub fn drain_line(d: &Draining) -> String {
    let leases = super::plural(u64::from(d.held), "lease", "leases");
    format!(
        "agent at {} is draining ({leases} held)",
        shown(&d.agent, 48)
    )
}

#[cfg(test)]
mod tests {
    use chrono::Utc;
    use leasehold_proto::v1;

    use super::*;
    use crate::output::text::width;

    #[test]
    fn ls_fits_80_columns_and_marks_the_leader() {
        let agent = |id: &str, leader| v1::AgentInfo {
            id: id.into(),
            agent_state: v1::AgentState::Running as i32,
            local_concurrency: 100,
            active: 3,
            heartbeat_at_ms: 1_764_588_000_000,
            version: "0.1.0".into(),
            grpc_address: "10.0.0.1:7070".into(),
            leader,
            ..Default::default()
        };
        let mut wide = agent(&"w\u{1b}".repeat(100), false);
        wide.grpc_address = "a".repeat(300);
        wide.version = "v".repeat(100);
        wide.heartbeat_at_ms = 0;
        let list = AgentList::from_wire(v1::ListAgentsResponse {
            stale_after_ms: 0,
            agents: vec![agent("web-1#3", true), wide],
            now_ms: 1_764_588_004_000,
            answered_by: "web-1#3".into(),
            leader: Some(v1::LeaderInfo {
                owner: "web-1#3".into(),
                term: 7,
                elected_at_ms: 1_764_587_884_000,
                lease_until_ms: 1_764_588_019_000,
                heartbeat_at_ms: 1_764_588_003_000,
                held: true,
            }),
            ..Default::default()
        });
        let lines = list.map(|l| ls_table(&l)).unwrap_or_default();
        assert_eq!(lines.len(), 5);
        assert!(lines[1].starts_with("*  web-1#3 "), "{}", lines[1]);
        assert!(
            lines[1].contains("  running  3/100   4s ago"),
            "{}",
            lines[1]
        );
        assert!(lines[2].contains("never"), "{}", lines[2]);
        assert_eq!(lines[3], "leader web-1#3 · term 7 · elected 2m00s ago");
        assert_eq!(lines[4], "answered by web-1#3 (* = leader)");
        for line in &lines {
            assert!(width(line) <= WIDTH, "{line}");
            assert!(!line.contains('\u{1b}'));
        }
    }

    #[test]
    fn the_leader_line_says_when_there_is_none() {
        let now = 1_764_588_000_000;
        let leader = |held, term, owner: Option<&str>| LeaderView {
            owner: owner.map(str::to_owned),
            term,
            held,
            elected_at: crate::convert::opt_time("t", now - 5_000).ok().flatten(),
            lease_until: None,
            heartbeat_at: None,
        };
        assert_eq!(leader_line(None, now), "no leader");
        assert_eq!(
            leader_line(Some(&leader(true, 3, Some("web-2#1"))), now),
            "leader web-2#1 · term 3 · elected 5s ago"
        );
        assert_eq!(
            leader_line(Some(&leader(false, 3, None)), now),
            "no leader (last term 3)"
        );
        assert_eq!(leader_line(Some(&leader(false, 0, None)), now), "no leader");
        // Untrusted owner text is made inert by the table's line.
        let list = AgentList {
            agents: vec![],
            leader: Some(leader(true, 1, Some("evil\u{1b}[2J"))),
            answered_by: "a".into(),
            now: crate::convert::time("now", now).unwrap_or_else(|_| Utc::now().into()),
        };
        let lines = ls_table(&list);
        assert_eq!(lines[0], "no agents");
        assert!(!lines[1].contains('\u{1b}'), "{}", lines[1]);
        let json = serde_json::to_value(&list).ok().unwrap_or_default();
        assert_eq!(json["leader"]["term"], 1);
        assert_eq!(json["leader"]["held"], true);
    }

    #[test]
    fn drain_line_and_json() {
        let d = Draining {
            agent: "127.0.0.1:7070".into(),
            held: 3,
        };
        assert_eq!(
            drain_line(&d),
            "agent at 127.0.0.1:7070 is draining (3 leases held)"
        );
        assert_eq!(
            serde_json::to_string(&d).ok().as_deref(),
            Some(r#"{"agent":"127.0.0.1:7070","held":3}"#)
        );
    }
}
