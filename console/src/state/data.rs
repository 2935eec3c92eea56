//! What the console knows of the cluster — connections with their leases, the registry, the
//! per-type overview, the loaded dead letters, renewal history, throughput — and the rows each
//! view shows, filtered and sorted. Freezing the screen (`Z`) copies this whole; the live copy
//! keeps taking updates underneath.

use std::cmp::Reverse;
use std::collections::{HashMap, VecDeque};

use leasehold_proto::v1 as pb;

use super::View;
use super::fleet::{Conn, Conns, Health, Held, Link, Registry, RenewalEvent};

/// Renewal events kept for the Renewals view.
pub const RENEWAL_HISTORY: usize = 500;
/// Throughput samples kept (one a second).
pub const THROUGHPUT_SAMPLES: usize = 120;

/// The cluster as last reported.
#[derive(Debug, Clone, Default)]
pub struct Data {
    pub conns: Conns,
    pub registry: Registry,
    pub overview: Option<pb::GetOverviewResponse>,
    pub dead: DeadPage,
    /// Newest last.
    pub renewals: VecDeque<RenewalEvent>,
    /// Tasks finished per second across the fleet, newest last.
    pub throughput: VecDeque<u64>,
    /// Database time (estimated between updates).
    pub now_ms: i64,
}

/// The dead letters loaded so far (keyset pages, newest first).
#[derive(Debug, Clone, Default)]
pub struct DeadPage {
    pub tasks: Vec<pb::Task>,
    /// Cursor of the next page; 0 when the last page is loaded.
    pub next_before_id: i64,
    /// A request is on its way.
    pub loading: bool,
    /// The filter the loaded rows answer (the typed text).
    pub filter: String,
    /// The last error loading them.
    pub error: Option<String>,
    /// At least one page has arrived.
    pub loaded: bool,
}

/// Why a lease is suspect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Suspect {
    /// The console lost its agent: nothing proves the lease any more.
    AgentLost,
    /// The agent is shutting down.
    Closing,
    /// Past its lease time.
    Expired,
    /// Renewals are failing.
    Failing { consecutive: u32, reason: String },
}

impl Suspect {
    /// Short words for a table cell.
    pub fn word(&self) -> String {
        match self {
            Suspect::AgentLost => "agent lost".into(),
            Suspect::Closing => "agent closing".into(),
            Suspect::Expired => "expired".into(),
            Suspect::Failing { consecutive, .. } => format!("failing x{consecutive}"),
        }
    }
}

/// One lease row of the Leases, Slow and Renewals views.
#[derive(Debug, Clone)]
pub struct LeaseRow<'a> {
    pub conn: &'a Conn,
    pub held: &'a Held,
    /// Lease time left (negative: expired).
    pub left_ms: i64,
    /// Running time.
    pub age_ms: i64,
    /// Since the last renewal.
    pub since_renewal_ms: i64,
    pub suspect: Option<Suspect>,
}

impl LeaseRow<'_> {
    pub fn lease(&self) -> &pb::Lease {
        &self.held.lease
    }
}

/// One row of the Agents view: a registry entry, a connection, or both.
#[derive(Debug, Clone)]
pub struct AgentRow<'a> {
    pub key: String,
    pub info: Option<&'a pb::AgentInfo>,
    pub conn: Option<&'a Conn>,
    pub health: Health,
}

/// A sort key of a view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SortKey {
    TimeLeft,
    Age,
    Type,
    Agent,
    Id,
    DiedAt,
    Attempts,
    Code,
    Name,
    Queued,
    Running,
    Dead,
    Health,
    Active,
}

impl SortKey {
    pub fn word(self) -> &'static str {
        match self {
            SortKey::TimeLeft => "time left",
            SortKey::Age => "age",
            SortKey::Type => "type",
            SortKey::Agent => "agent",
            SortKey::Id => "id",
            SortKey::DiedAt => "died",
            SortKey::Attempts => "attempts",
            SortKey::Code => "code",
            SortKey::Name => "name",
            SortKey::Queued => "queued",
            SortKey::Running => "running",
            SortKey::Dead => "dead",
            SortKey::Health => "state",
            SortKey::Active => "active",
        }
    }
}

/// The sort keys of each view, the default first.
pub fn sort_keys(view: View) -> &'static [SortKey] {
    use SortKey::*;
    match view {
        View::Leases => &[TimeLeft, Age, Type, Agent, Id],
        View::Slow => &[Age, TimeLeft, Type, Agent, Id],
        View::Renewals => &[TimeLeft, Age, Type, Agent, Id],
        View::Dead => &[DiedAt, Type, Code, Attempts, Id],
        View::Types => &[Name, Queued, Running, Dead],
        View::Agents => &[Name, Health, Active],
    }
}

/// Case-insensitive substring match of `needle` (already lower case) in any of `fields`.
fn matches(needle: &str, fields: &[&str]) -> bool {
    needle.is_empty() || fields.iter().any(|f| f.to_lowercase().contains(needle))
}

impl Data {
    /// Every held lease, one per task: when two agents report the same task (a stale holder
    /// and its successor) the higher epoch wins.
    fn leases(&self) -> Vec<LeaseRow<'_>> {
        let mut best: HashMap<i64, LeaseRow<'_>> = HashMap::new();
        for conn in self.conns.values() {
            for held in conn.leases.values() {
                let row = self.lease_row(conn, held);
                match best.get(&held.lease.task_id) {
                    Some(b) if b.held.lease.epoch >= held.lease.epoch => {}
                    _ => {
                        best.insert(held.lease.task_id, row);
                    }
                }
            }
        }
        best.into_values().collect()
    }

    fn lease_row<'a>(&self, conn: &'a Conn, held: &'a Held) -> LeaseRow<'a> {
        let l = &held.lease;
        let left_ms = l.lease_until_ms.saturating_sub(self.now_ms);
        let suspect = match &conn.link {
            Link::Lost { .. } | Link::Gone => Some(Suspect::AgentLost),
            Link::Closing => Some(Suspect::Closing),
            Link::Connecting | Link::Live if left_ms < 0 => Some(Suspect::Expired),
            _ if l.renewal_failures > 0 => Some(Suspect::Failing {
                consecutive: l.renewal_failures,
                reason: l.renewal_failure_reason.clone(),
            }),
            _ => None,
        };
        LeaseRow {
            conn,
            held,
            left_ms,
            age_ms: self.now_ms.saturating_sub(l.started_at_ms).max(0),
            since_renewal_ms: self.now_ms.saturating_sub(l.heartbeat_at_ms).max(0),
            suspect,
        }
    }

    /// The rows of the Leases (all), Slow (flagged slow) or Renewals (suspect) view.
    pub fn lease_rows(
        &self,
        view: View,
        filter: &str,
        sort: SortKey,
        reverse: bool,
    ) -> Vec<LeaseRow<'_>> {
        let needle = filter.trim().to_lowercase();
        let mut rows: Vec<LeaseRow<'_>> = self
            .leases()
            .into_iter()
            .filter(|r| match view {
                View::Slow => r.held.lease.slow,
                View::Renewals => r.suspect.is_some(),
                _ => true,
            })
            .filter(|r| {
                let l = &r.held.lease;
                let reason = r.suspect.as_ref().map(Suspect::word).unwrap_or_default();
                matches(
                    &needle,
                    &[
                        &l.task_id.to_string(),
                        &l.task_type,
                        r.conn.name(),
                        &l.owner,
                        &reason,
                    ],
                )
            })
            .collect();
        let id = |r: &LeaseRow<'_>| r.held.lease.task_id;
        match sort {
            SortKey::Age => rows.sort_by_key(|r| (Reverse(r.age_ms), id(r))),
            SortKey::Type => rows.sort_by(|a, b| {
                (&a.held.lease.task_type, id(a)).cmp(&(&b.held.lease.task_type, id(b)))
            }),
            SortKey::Agent => {
                rows.sort_by(|a, b| (a.conn.name(), id(a)).cmp(&(b.conn.name(), id(b))))
            }
            SortKey::Id => rows.sort_by_key(id),
            _ => rows.sort_by_key(|r| (r.left_ms, id(r))),
        }
        if reverse {
            rows.reverse();
        }
        rows
    }

    /// The loaded dead letters, filtered by the server, sorted here.
    pub fn dead_rows(&self, sort: SortKey, reverse: bool) -> Vec<&pb::Task> {
        let mut rows: Vec<&pb::Task> = self.dead.tasks.iter().collect();
        let code = |t: &pb::Task| {
            t.last_error
                .as_ref()
                .map(|e| e.code.clone())
                .unwrap_or_default()
        };
        match sort {
            SortKey::Type => rows
                .sort_by(|a, b| (&a.task_type, Reverse(a.id)).cmp(&(&b.task_type, Reverse(b.id)))),
            SortKey::Code => rows.sort_by_key(|t| (code(t), Reverse(t.id))),
            SortKey::Attempts => rows.sort_by_key(|t| (Reverse(t.attempt), Reverse(t.id))),
            SortKey::Id => rows.sort_by_key(|t| t.id),
            _ => rows.sort_by_key(|t| (Reverse(t.finished_at_ms), Reverse(t.id))),
        }
        if reverse {
            rows.reverse();
        }
        rows
    }

    /// Per-type rows of the overview (the global row excluded), filtered and sorted.
    pub fn type_rows(&self, filter: &str, sort: SortKey, reverse: bool) -> Vec<&pb::TypeSummary> {
        let needle = filter.trim().to_lowercase();
        let mut rows: Vec<&pb::TypeSummary> = self
            .overview
            .iter()
            .flat_map(|o| o.types.iter())
            .filter(|t| matches(&needle, &[&t.task_type]))
            .collect();
        match sort {
            SortKey::Queued => rows.sort_by(|a, b| {
                (Reverse(a.queued), &a.task_type).cmp(&(Reverse(b.queued), &b.task_type))
            }),
            SortKey::Running => rows.sort_by(|a, b| {
                (Reverse(a.running), &a.task_type).cmp(&(Reverse(b.running), &b.task_type))
            }),
            SortKey::Dead => rows.sort_by(|a, b| {
                (Reverse(a.dead), &a.task_type).cmp(&(Reverse(b.dead), &b.task_type))
            }),
            _ => rows.sort_by(|a, b| a.task_type.cmp(&b.task_type)),
        }
        if reverse {
            rows.reverse();
        }
        rows
    }

    /// The registry's agents joined with the console's connections (a connection the registry
    /// does not list yet is shown too), filtered and sorted.
    pub fn agent_rows(&self, filter: &str, sort: SortKey, reverse: bool) -> Vec<AgentRow<'_>> {
        let needle = filter.trim().to_lowercase();
        let mut rows = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for info in &self.registry.agents {
            let conn = self.conn_of(info);
            if let Some(c) = conn {
                seen.insert(c.addr.as_str());
            }
            rows.push(AgentRow {
                key: info.id.clone(),
                info: Some(info),
                conn,
                health: self.registry.health(info, conn.map(|c| &c.link)),
            });
        }
        for conn in self.conns.values() {
            if !seen.contains(conn.addr.as_str()) {
                rows.push(AgentRow {
                    key: conn.name().to_string(),
                    info: None,
                    conn: Some(conn),
                    health: if conn.link.is_live() {
                        Health::Up
                    } else {
                        Health::Suspect
                    },
                });
            }
        }
        rows.retain(|r| {
            let name = r.info.map(|i| i.id.as_str()).unwrap_or(&r.key);
            let host = r.info.map(|i| i.host.as_str()).unwrap_or_default();
            matches(&needle, &[name, host])
        });
        let active = |r: &AgentRow<'_>| r.info.map_or(0, |i| i.active);
        match sort {
            SortKey::Health => {
                rows.sort_by(|a, b| (Reverse(a.health), &a.key).cmp(&(Reverse(b.health), &b.key)))
            }
            SortKey::Active => {
                rows.sort_by(|a, b| (Reverse(active(a)), &a.key).cmp(&(Reverse(active(b)), &b.key)))
            }
            _ => rows.sort_by(|a, b| a.key.cmp(&b.key)),
        }
        if reverse {
            rows.reverse();
        }
        rows
    }

    /// The connection serving a registry entry.
    pub fn conn_of(&self, info: &pb::AgentInfo) -> Option<&Conn> {
        self.conns.get(&info.grpc_address).or_else(|| {
            self.conns
                .values()
                .find(|c| !c.agent_id.is_empty() && c.agent_id == info.id)
        })
    }

    /// Agents up, suspect and down per the registry.
    pub fn health_counts(&self) -> (usize, usize, usize) {
        let mut counts = (0, 0, 0);
        for info in &self.registry.agents {
            match self
                .registry
                .health(info, self.conn_of(info).map(|c| &c.link))
            {
                Health::Up => counts.0 += 1,
                Health::Suspect => counts.1 += 1,
                Health::Down => counts.2 += 1,
            }
        }
        counts
    }

    /// The leader's id, per the registry.
    pub fn leader(&self) -> Option<&str> {
        self.registry
            .agents
            .iter()
            .find(|a| a.leader && a.state != "stopped")
            .map(|a| a.id.as_str())
    }

    /// The global row of the overview.
    pub fn totals(&self) -> Totals {
        let mut t = Totals::default();
        if let Some(o) = &self.overview {
            t.global_limit = o.global_limit;
            t.global_paused = o.global_paused;
            t.known = true;
            for ty in &o.types {
                t.queued += ty.queued;
                t.scheduled += ty.scheduled;
                t.retrying += ty.retrying;
                t.running += ty.running;
                t.dead += ty.dead;
            }
        }
        t
    }

    /// Leases held, as the streams report them.
    pub fn lease_count(&self) -> usize {
        self.conns.values().map(|c| c.leases.len()).sum()
    }
}

/// Executions an agent's counters say ended (succeeded, failed, dead, cancelled).
pub fn finished(s: &pb::AgentStats) -> u64 {
    s.succeeded + s.failed + s.dead + s.cancelled
}

/// Sums of the overview.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    /// An overview has arrived.
    pub known: bool,
    pub queued: u64,
    pub scheduled: u64,
    pub retrying: u64,
    pub running: u64,
    pub dead: u64,
    pub global_limit: Option<u32>,
    pub global_paused: bool,
}
