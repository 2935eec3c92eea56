//! Every agent the console follows: its connection, the leases its Watch stream reports and its
//! counters; and the registry as the agents report it.
//!
//! Invariants: a connection's lease book is exactly what its stream said — the snapshot
//! replaces the book, each delta edits one lease of the same epoch (a delta for another epoch
//! or an unknown lease changes nothing). A lost connection keeps its book, marked suspect:
//! the console cannot prove those leases any more, which is what an operator must see.
//!
//! When things fail: a stream that breaks mid-way leaves the book as it was; the reconnect's
//! snapshot replaces it whole, so no delta is needed twice and none is missed.

use std::collections::{BTreeMap, HashMap};

use leasehold_proto::v1 as pb;
use leasehold_proto::v1::delta::Kind;
use leasehold_shared::domain::AgentState;
use leasehold_shared::domain::LeaseOutcome;

use crate::event::ConnEvent;

/// How long a lost agent's leases stay listed after they expired (local milliseconds).
pub const LOST_LEASES_KEPT_MS: i64 = 5 * 60 * 1000;

/// The state of one connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Link {
    Connecting,
    Live,
    /// Lost at `since_ms` (local clock), next attempt at `retry_at_ms`.
    Lost {
        reason: String,
        since_ms: i64,
        retry_at_ms: i64,
    },
    /// The agent said it is shutting down.
    Closing,
    /// The agent left the registry.
    Gone,
}

impl Link {
    /// A word for the header and the Agents view (never colour alone).
    pub fn word(&self) -> &'static str {
        match self {
            Link::Connecting => "connecting",
            Link::Live => "live",
            Link::Lost { .. } => "lost",
            Link::Closing => "closing",
            Link::Gone => "gone",
        }
    }

    /// True when the stream is open.
    pub fn is_live(&self) -> bool {
        matches!(self, Link::Live)
    }
}

/// One lease as the stream reports it, with its progress.
#[derive(Debug, Clone, PartialEq)]
pub struct Held {
    pub lease: pb::Lease,
    /// The last fenced write refused for this holding.
    pub fenced: Option<String>,
}

/// One agent connection.
#[derive(Debug, Clone)]
pub struct Conn {
    pub addr: String,
    /// The agent id its stream gives (empty until the first update).
    pub agent_id: String,
    /// How the last connection reached the agent (`tcp`, `unix:PATH`); `None` until known.
    pub route: Option<String>,
    pub link: Link,
    /// Leases by task id.
    pub leases: HashMap<i64, Held>,
    pub stats: Option<pb::AgentStats>,
    /// Local time of the last update (any update, deltas or not).
    pub updated_ms: Option<i64>,
    pub seq: u64,
    /// The agent's count of events it could not stream.
    pub dropped_events: u64,
    /// How many snapshots this connection received (1 + reconnects).
    pub snapshots: u64,
}

/// A renewal problem as it happened, for the Renewals view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenewalEvent {
    /// Database time of the update that carried it.
    pub at_ms: i64,
    pub agent_id: String,
    pub task_id: i64,
    pub task_type: String,
    pub epoch: i64,
    pub kind: RenewalKind,
}

/// What went wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RenewalKind {
    Failed {
        reason: String,
        consecutive: u32,
    },
    Fenced {
        write: String,
    },
    /// The lease ended because the holder could not prove it.
    Lost {
        outcome: String,
    },
    /// The console lost the agent that holds it.
    AgentLost {
        reason: String,
    },
}

/// What applying an update found worth recording.
#[derive(Debug, Default)]
pub struct Applied {
    pub renewals: Vec<RenewalEvent>,
    /// Ids of leases that ended (released, any outcome).
    pub released: Vec<i64>,
}

impl Conn {
    pub fn new(addr: String) -> Self {
        Self {
            addr,
            agent_id: String::new(),
            route: None,
            link: Link::Connecting,
            leases: HashMap::new(),
            stats: None,
            updated_ms: None,
            seq: 0,
            dropped_events: 0,
            snapshots: 0,
        }
    }

    /// A name to show: the agent id once known, else the address.
    pub fn name(&self) -> &str {
        if self.agent_id.is_empty() {
            &self.addr
        } else {
            &self.agent_id
        }
    }

    /// Applies a connection change at local time `local_ms`.
    pub fn set_link(&mut self, conn: ConnEvent, local_ms: i64) -> Vec<RenewalEvent> {
        let was_live = self.link.is_live();
        self.link = match conn {
            ConnEvent::Connecting => match &self.link {
                // Keep "lost" (with its reason) while a reconnect is under way.
                lost @ Link::Lost { .. } => lost.clone(),
                _ => Link::Connecting,
            },
            ConnEvent::Live => Link::Live,
            ConnEvent::Lost {
                reason,
                retry_in_ms,
            } => {
                let since_ms = match &self.link {
                    Link::Lost { since_ms, .. } => *since_ms,
                    _ => local_ms,
                };
                Link::Lost {
                    reason,
                    since_ms,
                    retry_at_ms: local_ms.saturating_add(i64::try_from(retry_in_ms).unwrap_or(0)),
                }
            }
            ConnEvent::Gone => Link::Gone,
            ConnEvent::Route(route) => {
                self.route = Some(route);
                self.link.clone()
            }
        };
        match (&self.link, was_live) {
            (Link::Lost { reason, .. }, true) => {
                let mut held: Vec<&Held> = self.leases.values().collect();
                held.sort_by_key(|h| h.lease.task_id);
                held.into_iter()
                    .map(|h| RenewalEvent {
                        at_ms: 0,
                        agent_id: self.name().to_string(),
                        task_id: h.lease.task_id,
                        task_type: h.lease.task_type.clone(),
                        epoch: h.lease.epoch,
                        kind: RenewalKind::AgentLost {
                            reason: reason.clone(),
                        },
                    })
                    .collect()
            }
            (Link::Gone, _) => {
                self.leases.clear();
                Vec::new()
            }
            _ => Vec::new(),
        }
    }

    /// Applies one Watch update received at local time `local_ms`.
    pub fn apply(&mut self, update: pb::WatchUpdate, local_ms: i64) -> Applied {
        let mut applied = Applied::default();
        if !update.agent_id.is_empty() {
            self.agent_id = update.agent_id;
        }
        self.updated_ms = Some(local_ms);
        self.seq = update.seq;
        self.dropped_events = update.dropped_events;
        if let Some(snapshot) = update.snapshot {
            self.snapshots += 1;
            self.leases = snapshot
                .leases
                .into_iter()
                .map(|lease| (lease.task_id, Held::new(lease)))
                .collect();
            if snapshot.stats.is_some() {
                self.stats = snapshot.stats;
            }
            self.link = Link::Live;
        }
        let at_ms = update.now_ms;
        for delta in update.deltas {
            let Some(kind) = delta.kind else { continue };
            self.delta(kind, at_ms, &mut applied);
        }
        if update.closing {
            self.link = Link::Closing;
        }
        applied
    }

    fn delta(&mut self, kind: Kind, at_ms: i64, applied: &mut Applied) {
        let agent_id = self.name().to_string();
        let event = |held: &Held, kind: RenewalKind| RenewalEvent {
            at_ms,
            agent_id: agent_id.clone(),
            task_id: held.lease.task_id,
            task_type: held.lease.task_type.clone(),
            epoch: held.lease.epoch,
            kind,
        };
        match kind {
            Kind::LeaseAcquired(lease) => {
                self.leases.insert(lease.task_id, Held::new(lease));
            }
            Kind::LeaseRenewed(r) => {
                if let Some(h) = self.holding(r.task_id, r.epoch) {
                    h.lease.lease_until_ms = r.lease_until_ms;
                    h.lease.heartbeat_at_ms = r.heartbeat_at_ms;
                    h.lease.renewal_failures = 0;
                    h.lease.renewal_failure_reason.clear();
                }
            }
            Kind::RenewalFailed(f) => {
                if let Some(h) = self.holding(f.task_id, f.epoch) {
                    h.lease.renewal_failures = f.consecutive;
                    h.lease.renewal_failure_reason = f.reason.clone();
                    let e = event(
                        h,
                        RenewalKind::Failed {
                            reason: f.reason,
                            consecutive: f.consecutive,
                        },
                    );
                    applied.renewals.push(e);
                }
            }
            Kind::LeaseReleased(r) => {
                let same = self
                    .leases
                    .get(&r.task_id)
                    .is_some_and(|h| h.lease.epoch == r.epoch);
                if same && let Some(h) = self.leases.remove(&r.task_id) {
                    let outcome = r.read_outcome();
                    if outcome.is(LeaseOutcome::Lost) || outcome.is(LeaseOutcome::Fenced) {
                        let outcome = outcome.word().into_owned();
                        applied
                            .renewals
                            .push(event(&h, RenewalKind::Lost { outcome }));
                    }
                    applied.released.push(r.task_id);
                }
            }
            Kind::LeaseFenced(f) => {
                if let Some(h) = self.holding(f.task_id, f.epoch) {
                    h.fenced = Some(f.write.clone());
                    let e = event(h, RenewalKind::Fenced { write: f.write });
                    applied.renewals.push(e);
                }
            }
            Kind::Progress(p) => {
                if let Some(h) = self.holding(p.task_id, p.epoch) {
                    h.lease.progress = p.progress;
                }
            }
            Kind::Slow(s) => {
                if let Some(h) = self.holding(s.task_id, s.epoch) {
                    h.lease.slow = true;
                    h.lease.slow_rule = s.rule;
                    h.lease.slow_limit_ms = s.limit_ms;
                    h.lease.slow_history_runs = s.history_runs;
                }
            }
            Kind::Stats(s) => self.stats = Some(s),
            Kind::CancelRequested(c) => {
                if let Some(h) = self.holding(c.task_id, c.epoch) {
                    h.lease.cancel_requested = true;
                }
            }
            // The Locks and Shards tabs read every holder from the database (ListLocks,
            // ListShards), which also knows the holders no console follows.
            Kind::ResourceChange(_) => {}
        }
    }

    fn holding(&mut self, task_id: i64, epoch: i64) -> Option<&mut Held> {
        self.leases
            .get_mut(&task_id)
            .filter(|h| h.lease.epoch == epoch)
    }

    /// Drops leases of a lost connection that expired more than [`LOST_LEASES_KEPT_MS`] ago
    /// (database time `now_ms`).
    pub fn forget_expired(&mut self, now_ms: i64) {
        if matches!(self.link, Link::Lost { .. } | Link::Closing) {
            self.leases
                .retain(|_, h| h.lease.lease_until_ms.saturating_add(LOST_LEASES_KEPT_MS) > now_ms);
        }
    }
}

impl Held {
    fn new(lease: pb::Lease) -> Self {
        Self {
            lease,
            fenced: None,
        }
    }
}

/// How the console classes an agent of the registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Health {
    Up,
    Suspect,
    Down,
}

impl Health {
    pub fn word(self) -> &'static str {
        match self {
            Health::Up => "up",
            Health::Suspect => "suspect",
            Health::Down => "down",
        }
    }
}

/// The registry, as last reported.
#[derive(Debug, Clone, Default)]
pub struct Registry {
    pub agents: Vec<pb::AgentInfo>,
    /// Database time of the read.
    pub now_ms: i64,
    /// The agents' own staleness rule (lease TTL + grace), in ms; 0 when not reported.
    pub stale_after_ms: i64,
    /// The role the agent gave this console's token ("viewer", "operator").
    pub caller_role: String,
    /// The leader lease; `None` when the agent reports none (no agent ever led, or an agent
    /// built before it was reported).
    pub leader: Option<pb::LeaderInfo>,
    /// Local time it arrived.
    pub received_ms: Option<i64>,
}

impl Registry {
    /// An agent's health: down when stopped or its heartbeat is older than the agents'
    /// staleness rule; suspect when older than half of it, or when the console's own
    /// connection to it is lost; up otherwise.
    pub fn health(&self, agent: &pb::AgentInfo, link: Option<&Link>) -> Health {
        if agent.read_state().is(AgentState::Stopped) {
            return Health::Down;
        }
        let stale = if self.stale_after_ms > 0 {
            self.stale_after_ms
        } else {
            30_000
        };
        let age = self.now_ms.saturating_sub(agent.heartbeat_at_ms);
        if age > stale {
            Health::Down
        } else if age > stale / 2 || matches!(link, Some(Link::Lost { .. })) {
            Health::Suspect
        } else {
            Health::Up
        }
    }
}

/// All connections by address.
pub type Conns = BTreeMap<String, Conn>;

/// Why the console reaches no agent at all: what every view must say instead of an empty or
/// loading table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreachable {
    /// The connection lost most recently (its name: the agent id once known, else the
    /// address).
    pub name: String,
    pub addr: String,
    pub reason: String,
    /// Local time of its next attempt.
    pub retry_at_ms: i64,
    /// How many connections are lost in all.
    pub lost: usize,
}

/// `Some` when no stream is live and at least one connection is lost (with its reason);
/// `None` while any agent answers, and before the first attempt to reach one ended.
pub fn unreachable(conns: &Conns) -> Option<Unreachable> {
    if conns.values().any(|c| c.link.is_live()) {
        return None;
    }
    let lost: Vec<(&Conn, &str, i64, i64)> = conns
        .values()
        .filter_map(|c| match &c.link {
            Link::Lost {
                reason,
                since_ms,
                retry_at_ms,
            } => Some((c, reason.as_str(), *since_ms, *retry_at_ms)),
            _ => None,
        })
        .collect();
    let count = lost.len();
    let (conn, reason, _, retry_at_ms) = lost.into_iter().max_by_key(|(c, _, since, _)| {
        // The latest loss, ties to the first address.
        (*since, std::cmp::Reverse(c.addr.clone()))
    })?;
    Some(Unreachable {
        name: conn.name().to_string(),
        addr: conn.addr.clone(),
        reason: reason.to_string(),
        retry_at_ms,
        lost: count,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lost(conn: &mut Conn, reason: &str, at_ms: i64) {
        conn.set_link(
            ConnEvent::Lost {
                reason: reason.into(),
                retry_in_ms: 2000,
            },
            at_ms,
        );
    }

    #[test]
    fn no_agent_is_reachable_only_when_every_stream_is_down_and_one_said_why() {
        let mut conns = Conns::new();
        assert_eq!(unreachable(&conns), None);
        let mut a = Conn::new("10.0.0.1:7070".into());
        let mut b = Conn::new("10.0.0.2:7070".into());
        // Still trying its first connection: nothing to say yet.
        conns.insert(a.addr.clone(), a.clone());
        assert_eq!(unreachable(&conns), None);
        lost(
            &mut a,
            "cannot reach agent at 10.0.0.1:7070: connection refused",
            1000,
        );
        b.set_link(ConnEvent::Live, 0);
        conns.insert(a.addr.clone(), a.clone());
        conns.insert(b.addr.clone(), b.clone());
        // One agent still answers: the header's LOST says the rest.
        assert_eq!(unreachable(&conns), None);
        lost(&mut b, "watch: connection reset by peer", 3000);
        conns.insert(b.addr.clone(), b.clone());
        assert_eq!(
            unreachable(&conns),
            Some(Unreachable {
                name: "10.0.0.2:7070".into(),
                addr: "10.0.0.2:7070".into(),
                reason: "watch: connection reset by peer".into(),
                retry_at_ms: 5000,
                lost: 2,
            })
        );
        // A reconnect under way keeps the reason.
        b.set_link(ConnEvent::Connecting, 5000);
        conns.insert(b.addr.clone(), b);
        assert_eq!(unreachable(&conns).map(|u| u.lost), Some(2));
    }
}
