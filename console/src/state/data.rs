//! What the console knows of the cluster — connections with their leases, the registry, the
//! per-type overview, the loaded dead letters, renewal history, throughput — and the rows each
//! view shows, filtered and sorted. Freezing the screen (`Z`) copies this whole; the live copy
//! keeps taking updates underneath.

use std::cmp::Reverse;
use std::collections::{BTreeMap, HashMap, VecDeque};

use leasehold_proto::v1 as pb;
use leasehold_shared::domain::AgentState;

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
    /// The last hour of the queue's history (every type summed), as the leader recorded it.
    pub history: Option<pb::GetHistoryResponse>,
    pub dead: DeadPage,
    /// The Tasks view's rows and counts, read while it is shown.
    pub tasks: super::tasks::TaskBrowse,
    /// The schedules, polled while the Schedules view is shown.
    pub schedules: super::schedules::Schedules,
    /// Locks and shard groups, polled while the Locks or Shards tab is shown.
    pub resources: super::resources::Resources,
    /// Leases whose renewal is overdue in the database (polled with the registry).
    pub overdue: Overdue,
    /// Newest last.
    pub renewals: VecDeque<RenewalEvent>,
    /// Tasks finished per second across the fleet, newest last.
    pub throughput: VecDeque<u64>,
    /// Database time (estimated between updates).
    pub now_ms: i64,
    /// Bumped by every change, so a cached row order knows it is stale.
    pub version: u64,
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

/// Leases whose renewal is overdue as the database last reported them (ListSuspectLeases,
/// every 2 s): the only sign of an agent whose own stream went silent (frozen, partitioned),
/// since such an agent streams no failure of its own.
#[derive(Debug, Clone, Default)]
pub struct Overdue {
    /// By task id.
    pub leases: HashMap<i64, pb::SuspectLease>,
    /// Overdue leases no followed stream reports, as lease rows of one pseudo-connection per
    /// owner (named after the owner), so the Renewals view lists them too.
    pub orphans: BTreeMap<String, Conn>,
    /// The threshold the agent applied (ms).
    pub threshold_ms: i64,
    /// The agent had more to list than it sent.
    pub truncated: bool,
}

impl Overdue {
    /// The database's list, joined with what the streams report: leases no stream holds (at
    /// this epoch or a newer one) become orphan rows.
    pub fn from_wire(answer: pb::ListSuspectLeasesResponse, conns: &Conns) -> Self {
        let mut orphans: BTreeMap<String, Conn> = BTreeMap::new();
        for s in &answer.leases {
            let streamed = conns.values().any(|c| {
                c.leases
                    .get(&s.task_id)
                    .is_some_and(|h| h.lease.epoch >= s.epoch)
            });
            if streamed {
                continue;
            }
            let conn = orphans.entry(s.owner.clone()).or_insert_with(|| {
                let mut c = Conn::new(format!("db:{}", s.owner));
                c.agent_id.clone_from(&s.owner);
                c.link = Link::Live;
                c
            });
            let lease = pb::Lease {
                task_id: s.task_id,
                task_type: s.task_type.clone(),
                epoch: s.epoch,
                owner: s.owner.clone(),
                lease_until_ms: s.lease_until_ms,
                heartbeat_at_ms: s.heartbeat_at_ms,
                ..pb::Lease::default()
            };
            conn.leases.insert(
                s.task_id,
                Held {
                    lease,
                    fenced: None,
                },
            );
        }
        Self {
            leases: answer.leases.into_iter().map(|s| (s.task_id, s)).collect(),
            orphans,
            threshold_ms: answer.threshold_ms,
            truncated: answer.truncated,
        }
    }

    /// The database's overdue record of this lease, unless a stream reported a renewal (or a
    /// newer holding) since.
    pub fn of(&self, l: &pb::Lease) -> Option<&pb::SuspectLease> {
        self.leases
            .get(&l.task_id)
            .filter(|s| s.epoch == l.epoch && l.heartbeat_at_ms <= s.heartbeat_at_ms)
    }
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
    /// The database says its last renewal is older than the revoke threshold (the agent may
    /// be frozen: its stream says nothing); `since_ms` since that renewal, database time.
    Overdue { since_ms: i64 },
}

impl Suspect {
    /// Short words for a table cell.
    pub fn word(&self) -> String {
        match self {
            Suspect::AgentLost => "agent lost".into(),
            Suspect::Closing => "agent closing".into(),
            Suspect::Expired => "expired".into(),
            Suspect::Failing { consecutive, .. } => format!("failing x{consecutive}"),
            Suspect::Overdue { .. } => "overdue (db)".into(),
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

/// A lease in a view's order: the connection (by position in `conns`) and the task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseRef {
    pub conn: usize,
    pub task_id: i64,
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
    NextFire,
    LastFire,
    Shard,
    Owner,
    Moves,
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
            SortKey::NextFire => "next fire",
            SortKey::LastFire => "last fire",
            SortKey::Shard => "shard",
            SortKey::Owner => "owner",
            SortKey::Moves => "moves",
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
        View::Schedules => &[Name, NextFire, LastFire],
        View::Locks => &[Name, TimeLeft, Owner, Moves],
        View::Shards => &[Shard, TimeLeft, Owner, Moves],
        // The database's order (newest first): the view pages through more rows than it holds.
        View::Tasks => &[Id],
    }
}

/// A hasher for task ids (Fibonacci hashing): the per-frame de-duplication of 10,000 leases
/// must not pay SipHash for keys no attacker chooses.
#[derive(Debug, Clone, Copy, Default)]
pub struct IdHash;

/// The state of [`IdHash`].
#[derive(Debug, Clone, Copy, Default)]
pub struct IdHasher(u64);

impl std::hash::BuildHasher for IdHash {
    type Hasher = IdHasher;
    fn build_hasher(&self) -> IdHasher {
        IdHasher(0)
    }
}

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(*b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_i64(&mut self, n: i64) {
        self.0 = (n as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// Case-insensitive substring match of `needle` (already lower case) in any of `fields`;
/// ASCII fields are compared without allocating.
fn matches(needle: &str, fields: &[&str]) -> bool {
    if needle.is_empty() {
        return true;
    }
    fields.iter().any(|f| {
        if f.is_ascii() && needle.is_ascii() {
            let (h, n) = (f.as_bytes(), needle.as_bytes());
            n.len() <= h.len() && h.windows(n.len()).any(|w| w.eq_ignore_ascii_case(n))
        } else {
            f.to_lowercase().contains(needle)
        }
    })
}

impl Data {
    /// Why a lease is suspect, if it is.
    fn suspect(&self, conn: &Conn, l: &pb::Lease) -> Option<Suspect> {
        match &conn.link {
            Link::Lost { .. } | Link::Gone => Some(Suspect::AgentLost),
            Link::Closing => Some(Suspect::Closing),
            _ if l.lease_until_ms < self.now_ms => Some(Suspect::Expired),
            _ => match self.overdue.of(l) {
                Some(s) => Some(Suspect::Overdue {
                    since_ms: self.now_ms.saturating_sub(s.heartbeat_at_ms).max(0),
                }),
                None if l.renewal_failures > 0 => Some(Suspect::Failing {
                    consecutive: l.renewal_failures,
                    reason: l.renewal_failure_reason.clone(),
                }),
                None => None,
            },
        }
    }

    /// True when [`Data::suspect`] would say something (without making its words).
    fn is_suspect(&self, conn: &Conn, l: &pb::Lease) -> bool {
        matches!(conn.link, Link::Lost { .. } | Link::Gone | Link::Closing)
            || l.lease_until_ms < self.now_ms
            || l.renewal_failures > 0
            || self.overdue.of(l).is_some()
    }

    /// Leases the database says are overdue, less those a stream reported renewed since.
    pub fn overdue_count(&self) -> usize {
        self.overdue
            .leases
            .values()
            .filter(|s| {
                !self.conns.values().any(|c| {
                    c.leases.get(&s.task_id).is_some_and(|h| {
                        h.lease.epoch > s.epoch || h.lease.heartbeat_at_ms > s.heartbeat_at_ms
                    })
                })
            })
            .count()
    }

    /// The followed connections, then (for the Renewals view) the overdue leases no stream
    /// reports; a [`LeaseRef`]'s `conn` indexes this sequence.
    fn lease_conns(&self) -> impl Iterator<Item = &Conn> {
        self.conns.values().chain(self.overdue.orphans.values())
    }

    /// The row of one lease.
    pub fn lease_row(&self, r: LeaseRef) -> Option<LeaseRow<'_>> {
        let conn = self.lease_conns().nth(r.conn)?;
        let held = conn.leases.get(&r.task_id)?;
        let l = &held.lease;
        Some(LeaseRow {
            conn,
            held,
            left_ms: l.lease_until_ms.saturating_sub(self.now_ms),
            // 0 when not known (a lease only the database reported).
            age_ms: if l.started_at_ms > 0 {
                self.now_ms.saturating_sub(l.started_at_ms).max(0)
            } else {
                0
            },
            since_renewal_ms: self.now_ms.saturating_sub(l.heartbeat_at_ms).max(0),
            suspect: self.suspect(conn, l),
        })
    }

    /// The Leases (all), Slow (flagged slow) or Renewals (suspect) view's rows in display
    /// order, one per task: when two agents report the same task (a stale holder and its
    /// successor) the higher epoch wins. Rows are references; [`Data::lease_row`] makes a
    /// row to draw, so a frame only builds the rows it shows.
    pub fn lease_order(
        &self,
        view: View,
        filter: &str,
        sort: SortKey,
        reverse: bool,
    ) -> Vec<LeaseRef> {
        /// One lease, read once: its sort key, id, epoch, connection and the lease itself.
        struct Entry<'a> {
            key: i64,
            id: i64,
            epoch: i64,
            conn: usize,
            held: &'a Held,
        }
        // Leases only the database reports (an agent not followed, or followed but not yet
        // snapshotted) are Renewals rows only.
        let conns: Vec<&Conn> = if view == View::Renewals {
            self.lease_conns().collect()
        } else {
            self.conns.values().collect()
        };
        let total: usize = conns.iter().map(|c| c.leases.len()).sum();
        let agent_rank: Vec<i64> = {
            let mut by_name: Vec<usize> = (0..conns.len()).collect();
            by_name.sort_by_key(|i| conns[*i].name());
            let mut rank = vec![0; conns.len()];
            for (r, i) in by_name.into_iter().enumerate() {
                rank[i] = i64::try_from(r).unwrap_or(i64::MAX);
            }
            rank
        };
        let mut rows: Vec<Entry<'_>> = Vec::with_capacity(total);
        for (conn, c) in conns.iter().enumerate() {
            for held in c.leases.values() {
                let l = &held.lease;
                let key = match sort {
                    // Longest running first: the earliest start.
                    SortKey::Age => l.started_at_ms,
                    SortKey::Id => l.task_id,
                    SortKey::Agent => agent_rank[conn],
                    // Ranked below, once the names are known.
                    SortKey::Type => 0,
                    // Least time left first: the earliest lease end.
                    _ => l.lease_until_ms,
                };
                rows.push(Entry {
                    key,
                    id: l.task_id,
                    epoch: l.epoch,
                    conn,
                    held,
                });
            }
        }
        if conns.len() > 1 {
            // One row per task: the highest epoch when two connections report it.
            let mut best: HashMap<i64, (i64, usize), IdHash> =
                HashMap::with_capacity_and_hasher(rows.len(), IdHash);
            let mut duplicated = false;
            for (n, e) in rows.iter().enumerate() {
                match best.get_mut(&e.id) {
                    Some(b) => {
                        duplicated = true;
                        if e.epoch > b.0 {
                            *b = (e.epoch, n);
                        }
                    }
                    None => {
                        best.insert(e.id, (e.epoch, n));
                    }
                }
            }
            if duplicated {
                let mut n = 0;
                rows.retain(|e| {
                    let keep = best.get(&e.id).is_some_and(|b| b.1 == n);
                    n += 1;
                    keep
                });
            }
        }
        match view {
            View::Slow => rows.retain(|e| e.held.lease.slow),
            View::Renewals => rows.retain(|e| self.is_suspect(conns[e.conn], &e.held.lease)),
            _ => {}
        }
        let needle = filter.trim().to_lowercase();
        if !needle.is_empty() {
            let mut id_text = String::new();
            rows.retain(|e| {
                let l = &e.held.lease;
                let conn = conns[e.conn];
                id_text.clear();
                let _ = std::fmt::Write::write_fmt(&mut id_text, format_args!("{}", l.task_id));
                matches(&needle, &[&id_text, &l.task_type, conn.name(), &l.owner])
                    || (self.is_suspect(conn, l)
                        && self
                            .suspect(conn, l)
                            .is_some_and(|s| matches(&needle, &[&s.word()])))
            });
        }
        if sort == SortKey::Type {
            // Rank the few distinct names, so no string is compared per row.
            let names: std::collections::BTreeSet<&str> = rows
                .iter()
                .map(|e| e.held.lease.task_type.as_str())
                .collect();
            let rank: HashMap<&str, i64> = names.into_iter().zip(0..).collect();
            for e in &mut rows {
                e.key = rank
                    .get(e.held.lease.task_type.as_str())
                    .copied()
                    .unwrap_or(0);
            }
        }
        rows.sort_unstable_by_key(|e| (e.key, e.id));
        let mut order: Vec<LeaseRef> = rows
            .into_iter()
            .map(|e| LeaseRef {
                conn: e.conn,
                task_id: e.id,
            })
            .collect();
        if reverse {
            order.reverse();
        }
        order
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

    /// The leader's id: the holder of the leader lease when the agent reports it, else the
    /// registry's leader flag.
    pub fn leader(&self) -> Option<&str> {
        if let Some(l) = &self.registry.leader {
            return (l.held && !l.owner.is_empty()).then_some(l.owner.as_str());
        }
        self.registry
            .agents
            .iter()
            .find(|a| a.leader && !a.read_state().is(AgentState::Stopped))
            .map(|a| a.id.as_str())
    }

    /// The term of the leader lease, when it is held and reported.
    pub fn leader_term(&self) -> Option<i64> {
        self.registry
            .leader
            .as_ref()
            .filter(|l| l.held)
            .map(|l| l.term)
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
