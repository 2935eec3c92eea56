//! Watch updates from the wire, flattened into one line per event for `leasehold watch`.
//!
//! Every [`WatchLine`] repeats its update's `seq`, `now_ms`, `agent_id` and `dropped_events`,
//! names its event in `kind`, and carries the event's body under a key of the same name:
//!
//! ```text
//! {"seq":0,"now_ms":…,"agent_id":"web-1#7","dropped_events":0,"kind":"snapshot","snapshot":{"leases":[…],"stats":{…}}}
//! {"seq":1,"now_ms":…,"agent_id":"web-1#7","dropped_events":0,"kind":"lease_acquired","lease_acquired":{"task_id":42,…}}
//! {"seq":9,"now_ms":…,"agent_id":"web-1#7","dropped_events":0,"kind":"closing","closing":true}
//! ```
//!
//! An update yields its snapshot (if any), then its deltas in order, then `closing` (if set).
//! A delta whose kind this build does not know (a newer agent) is skipped, as the contract
//! allows a client to ignore what it does not know.

use leasehold_proto::v1;
use leasehold_proto::v1::delta::Kind;
use serde::Serialize;

use super::{Timestamp, WireError, opt_ms, opt_string, opt_time};
use crate::output::text::short_duration;

/// One printed line of `watch`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WatchLine {
    pub seq: u64,
    pub now_ms: i64,
    pub agent_id: String,
    pub dropped_events: u64,
    pub kind: &'static str,
    #[serde(flatten)]
    pub event: WatchEvent,
}

/// What one line reports; serialised as `"<kind>": <body>`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WatchEvent {
    Snapshot(SnapshotView),
    LeaseAcquired(LeaseView),
    LeaseRenewed(RenewedView),
    RenewalFailed(RenewalFailedView),
    LeaseReleased(ReleasedView),
    LeaseFenced(FencedView),
    Progress(ProgressUpdateView),
    Slow(SlowView),
    Stats(StatsView),
    CancelRequested(TaskEpoch),
    /// The agent took or lost a resource lease (a lock or a shard).
    ResourceChange(ResourceChangeView),
    /// The agent is shutting down and closes the stream after this update.
    Closing(bool),
}

impl WatchEvent {
    /// The `kind` of the line.
    pub fn kind(&self) -> &'static str {
        match self {
            WatchEvent::Snapshot(_) => "snapshot",
            WatchEvent::LeaseAcquired(_) => "lease_acquired",
            WatchEvent::LeaseRenewed(_) => "lease_renewed",
            WatchEvent::RenewalFailed(_) => "renewal_failed",
            WatchEvent::LeaseReleased(_) => "lease_released",
            WatchEvent::LeaseFenced(_) => "lease_fenced",
            WatchEvent::Progress(_) => "progress",
            WatchEvent::Slow(_) => "slow",
            WatchEvent::Stats(_) => "stats",
            WatchEvent::CancelRequested(_) => "cancel_requested",
            WatchEvent::ResourceChange(_) => "resource_change",
            WatchEvent::Closing(_) => "closing",
        }
    }
}

/// Every lease the agent holds, its stats and the resource leases it holds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SnapshotView {
    pub leases: Vec<LeaseView>,
    /// `null` when the agent sent none.
    pub stats: Option<StatsView>,
    pub resources: Vec<HeldResourceView>,
}

/// A resource lease held by the agent serving the stream: a lock, or one shard of a group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HeldResourceView {
    /// A lock's name, or `<group>#<shard>`.
    pub name: String,
    /// The shard group; `null` for a lock.
    pub group: Option<String>,
    /// The shard number; `null` for a lock.
    pub shard: Option<u32>,
    /// Fencing token of the holding.
    pub token: i64,
}

impl HeldResourceView {
    fn from_wire(r: v1::HeldResource) -> Result<Self, WireError> {
        if r.token < 0 {
            return Err(WireError::OutOfRange {
                field: "resource token",
                value: r.token,
            });
        }
        let group = opt_string(r.group);
        Ok(Self {
            name: r.name,
            shard: group.as_ref().map(|_| r.shard),
            group,
            token: r.token,
        })
    }
}

/// A resource lease taken or lost.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ResourceChangeView {
    pub resource: HeldResourceView,
    /// True: acquired; false: lost or released.
    pub held: bool,
    /// acquired, released, revoked or unprovable.
    pub reason: String,
    /// The agent's wall clock (not the database's): when the holding began, or the last
    /// instant the agent could still prove it held the lease.
    pub at: Option<Timestamp>,
    pub at_ms: Option<i64>,
}

/// A lease held by the agent serving the stream.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LeaseView {
    pub task_id: i64,
    pub task_type: String,
    pub epoch: i64,
    pub owner: String,
    pub attempt: i32,
    pub priority: i32,
    pub started_at: Option<Timestamp>,
    pub lease_until: Option<Timestamp>,
    pub heartbeat_at: Option<Timestamp>,
    pub timeout_ms: Option<i64>,
    pub progress: Option<ProgressView>,
    pub slow: bool,
    /// Which rule flagged it slow (`null` while it is not, or from an agent that does not say).
    pub slow_rule: Option<SlowRuleView>,
    pub cancel_requested: bool,
    pub renewal_failures: u32,
    pub renewal_failure_reason: Option<String>,
}

/// Progress counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ProgressView {
    pub total: u64,
    pub processed: u64,
    pub succeeded: u64,
    pub failed: u64,
    pub skipped: u64,
}

impl From<v1::Progress> for ProgressView {
    fn from(p: v1::Progress) -> Self {
        Self {
            total: p.total,
            processed: p.processed,
            succeeded: p.succeeded,
            failed: p.failed,
            skipped: p.skipped,
        }
    }
}

/// The agent's counters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StatsView {
    pub state: String,
    pub leader: bool,
    pub active: u32,
    pub local_limit: u32,
    pub held: u32,
    pub claimed: u64,
    pub succeeded: u64,
    pub failed: u64,
    pub retried: u64,
    pub dead: u64,
    pub cancelled: u64,
    pub released: u64,
    pub lease_lost: u64,
    pub fenced_writes: u64,
    pub renewal_failures: u64,
}

impl From<v1::AgentStats> for StatsView {
    fn from(s: v1::AgentStats) -> Self {
        Self {
            state: s.read_state().word().into_owned(),
            leader: s.leader,
            active: s.active,
            local_limit: s.local_limit,
            held: s.held,
            claimed: s.claimed,
            succeeded: s.succeeded,
            failed: s.failed,
            retried: s.retried,
            dead: s.dead,
            cancelled: s.cancelled,
            released: s.released,
            lease_lost: s.lease_lost,
            fenced_writes: s.fenced_writes,
            renewal_failures: s.renewal_failures,
        }
    }
}

/// A renewal that landed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RenewedView {
    pub task_id: i64,
    pub epoch: i64,
    pub lease_until: Option<Timestamp>,
    pub heartbeat_at: Option<Timestamp>,
}

/// A renewal that failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RenewalFailedView {
    pub task_id: i64,
    pub epoch: i64,
    pub reason: String,
    pub consecutive: u32,
}

/// A lease that ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReleasedView {
    pub task_id: i64,
    pub epoch: i64,
    pub outcome: String,
}

/// A refused holder write.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FencedView {
    pub task_id: i64,
    pub epoch: i64,
    pub write: String,
}

/// New progress of a lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProgressUpdateView {
    pub task_id: i64,
    pub epoch: i64,
    pub progress: Option<ProgressView>,
}

/// A lease past its slow threshold or its type's p95.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SlowView {
    pub task_id: i64,
    pub epoch: i64,
    pub running_ms: i64,
    /// Which rule fired; `null` from an agent that does not say.
    pub rule: Option<SlowRuleView>,
}

/// Which rule flagged a lease slow, and past what running time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct SlowRuleView {
    /// `threshold` (the type's slow_after) or `history` (the p95 of its recent successful
    /// runs).
    pub name: &'static str,
    pub limit_ms: i64,
    /// With `history`: how many runs the p95 came from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub history_runs: Option<u32>,
}

impl SlowRuleView {
    /// The rule of a wire lease or slow delta; `None` when unspecified or unknown (an agent
    /// older or newer than this console).
    pub fn from_wire(rule: i32, limit_ms: i64, runs: u32) -> Option<Self> {
        let name = match v1::SlowRule::try_from(rule).ok()? {
            v1::SlowRule::Threshold => "threshold",
            v1::SlowRule::History => "history",
            v1::SlowRule::Unspecified => return None,
        };
        Some(Self {
            name,
            limit_ms: limit_ms.max(0),
            history_runs: (name == "history").then_some(runs),
        })
    }

    /// `past p95 4m10s of 200 runs` or `past threshold 1m00s`, for a line of text.
    pub fn text(&self) -> String {
        match self.history_runs {
            Some(runs) => format!("past p95 {} of {runs} runs", self.limit()),
            None => format!("past threshold {}", self.limit()),
        }
    }

    /// `p95 4m10s` or `>1m00s`: the rule in a table cell.
    pub fn short(&self) -> String {
        match self.history_runs {
            Some(_) => format!("p95 {}", self.limit()),
            None => format!(">{}", self.limit()),
        }
    }

    /// The limit, with a tenth of a second under 10 s (a p95 of 1.26 s is not "1s").
    fn limit(&self) -> String {
        if (1_000..10_000).contains(&self.limit_ms) {
            format!("{:.1}s", self.limit_ms as f64 / 1000.0)
        } else {
            short_duration(self.limit_ms)
        }
    }
}

/// A task and the epoch of its holding.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TaskEpoch {
    pub task_id: i64,
    pub epoch: i64,
}

impl LeaseView {
    fn from_wire(l: v1::Lease) -> Result<Self, WireError> {
        Ok(Self {
            started_at: opt_time("lease started_at_ms", l.started_at_ms)?,
            lease_until: opt_time("lease lease_until_ms", l.lease_until_ms)?,
            heartbeat_at: opt_time("lease heartbeat_at_ms", l.heartbeat_at_ms)?,
            timeout_ms: opt_ms("lease timeout_ms", l.timeout_ms)?,
            task_id: l.task_id,
            task_type: l.task_type,
            epoch: l.epoch,
            owner: l.owner,
            attempt: l.attempt,
            priority: l.priority,
            progress: l.progress.map(ProgressView::from),
            slow: l.slow,
            slow_rule: SlowRuleView::from_wire(l.slow_rule, l.slow_limit_ms, l.slow_history_runs),
            cancel_requested: l.cancel_requested,
            renewal_failures: l.renewal_failures,
            renewal_failure_reason: opt_string(l.renewal_failure_reason),
        })
    }
}

fn event(kind: Kind) -> Result<WatchEvent, WireError> {
    Ok(match kind {
        Kind::LeaseAcquired(l) => WatchEvent::LeaseAcquired(LeaseView::from_wire(l)?),
        Kind::LeaseRenewed(r) => WatchEvent::LeaseRenewed(RenewedView {
            task_id: r.task_id,
            epoch: r.epoch,
            lease_until: opt_time("lease_until_ms", r.lease_until_ms)?,
            heartbeat_at: opt_time("heartbeat_at_ms", r.heartbeat_at_ms)?,
        }),
        Kind::RenewalFailed(f) => WatchEvent::RenewalFailed(RenewalFailedView {
            task_id: f.task_id,
            epoch: f.epoch,
            reason: f.reason,
            consecutive: f.consecutive,
        }),
        Kind::LeaseReleased(r) => WatchEvent::LeaseReleased(ReleasedView {
            task_id: r.task_id,
            epoch: r.epoch,
            outcome: r.read_outcome().word().into_owned(),
        }),
        Kind::LeaseFenced(f) => WatchEvent::LeaseFenced(FencedView {
            task_id: f.task_id,
            epoch: f.epoch,
            write: f.write,
        }),
        Kind::Progress(p) => WatchEvent::Progress(ProgressUpdateView {
            task_id: p.task_id,
            epoch: p.epoch,
            progress: p.progress.map(ProgressView::from),
        }),
        Kind::Slow(s) => WatchEvent::Slow(SlowView {
            task_id: s.task_id,
            epoch: s.epoch,
            running_ms: opt_ms("running_ms", s.running_ms)?.unwrap_or(0),
            rule: SlowRuleView::from_wire(s.rule, s.limit_ms, s.history_runs),
        }),
        Kind::Stats(s) => WatchEvent::Stats(StatsView::from(s)),
        Kind::CancelRequested(c) => WatchEvent::CancelRequested(TaskEpoch {
            task_id: c.task_id,
            epoch: c.epoch,
        }),
        Kind::ResourceChange(c) => {
            let at = opt_time("resource_change at_ms", c.at_ms)?;
            WatchEvent::ResourceChange(ResourceChangeView {
                resource: HeldResourceView::from_wire(
                    c.resource
                        .ok_or(WireError::MissingField("resource_change.resource"))?,
                )?,
                held: c.held,
                reason: c.reason,
                at,
                at_ms: at.map(Timestamp::millis),
            })
        }
    })
}

/// The lines of one update, in order.
pub fn lines(update: v1::WatchUpdate) -> Result<Vec<WatchLine>, WireError> {
    if update.now_ms <= 0 {
        return Err(WireError::Time {
            field: "now_ms",
            value: update.now_ms,
        });
    }
    let mut events = Vec::with_capacity(update.deltas.len() + 2);
    if let Some(s) = update.snapshot {
        events.push(WatchEvent::Snapshot(SnapshotView {
            leases: s
                .leases
                .into_iter()
                .map(LeaseView::from_wire)
                .collect::<Result<_, _>>()?,
            stats: s.stats.map(StatsView::from),
            resources: s
                .resources
                .into_iter()
                .map(HeldResourceView::from_wire)
                .collect::<Result<_, _>>()?,
        }));
    }
    for delta in update.deltas {
        if let Some(kind) = delta.kind {
            events.push(event(kind)?);
        }
    }
    if update.closing {
        events.push(WatchEvent::Closing(true));
    }
    Ok(events
        .into_iter()
        .map(|event| WatchLine {
            seq: update.seq,
            now_ms: update.now_ms,
            agent_id: update.agent_id.clone(),
            dropped_events: update.dropped_events,
            kind: event.kind(),
            event,
        })
        .collect())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn lease() -> v1::Lease {
        v1::Lease {
            task_id: 42,
            task_type: "noop".into(),
            epoch: 3,
            owner: "web-1#7".into(),
            attempt: 1,
            started_at_ms: 1_764_588_000_000,
            lease_until_ms: 1_764_588_020_000,
            heartbeat_at_ms: 1_764_588_000_000,
            ..Default::default()
        }
    }

    #[test]
    fn one_line_per_event_with_the_update_header_repeated() {
        let update = v1::WatchUpdate {
            now_ms: 1_764_588_001_000,
            seq: 4,
            dropped_events: 2,
            agent_id: "web-1#7".into(),
            snapshot: None,
            deltas: vec![
                v1::Delta {
                    kind: Some(Kind::LeaseAcquired(lease())),
                },
                v1::Delta { kind: None },
                v1::Delta {
                    kind: Some(Kind::LeaseReleased(v1::LeaseReleased {
                        task_id: 42,
                        epoch: 3,
                        lease_outcome: v1::LeaseOutcome::Succeeded as i32,
                        ..Default::default()
                    })),
                },
            ],
            closing: true,
        };
        let lines = lines(update).unwrap_or_default();
        let kinds: Vec<_> = lines.iter().map(|l| l.kind).collect();
        assert_eq!(kinds, ["lease_acquired", "lease_released", "closing"]);
        let json: Vec<serde_json::Value> = lines
            .iter()
            .filter_map(|l| serde_json::to_value(l).ok())
            .collect();
        assert_eq!(json[1]["seq"], 4);
        assert_eq!(json[1]["dropped_events"], 2);
        assert_eq!(json[1]["agent_id"], "web-1#7");
        assert_eq!(json[1]["lease_released"]["outcome"], "succeeded");
        assert_eq!(
            json[0]["lease_acquired"]["lease_until"],
            "2025-12-01T11:20:20.000Z"
        );
        assert_eq!(
            json[0]["lease_acquired"]["renewal_failure_reason"],
            serde_json::Value::Null
        );
        assert_eq!(json[2]["closing"], true);
    }

    #[test]
    fn a_snapshot_is_one_line() {
        let update = v1::WatchUpdate {
            now_ms: 1_764_588_001_000,
            seq: 0,
            agent_id: "a".into(),
            snapshot: Some(v1::Snapshot {
                leases: vec![lease(), lease()],
                stats: Some(v1::AgentStats {
                    active: 2,
                    local_limit: 10,
                    agent_state: v1::AgentState::Running as i32,
                    ..Default::default()
                }),
                resources: vec![lock_held(), shard_held()],
            }),
            ..Default::default()
        };
        let lines = lines(update).unwrap_or_default();
        assert_eq!(lines.len(), 1);
        let json = serde_json::to_value(&lines[0]).unwrap_or_default();
        assert_eq!(json["kind"], "snapshot");
        assert_eq!(json["snapshot"]["leases"].as_array().map(Vec::len), Some(2));
        assert_eq!(json["snapshot"]["stats"]["local_limit"], 10);
        assert_eq!(json["snapshot"]["stats"]["state"], "running");
        assert_eq!(
            json["snapshot"]["resources"],
            serde_json::json!([
                {"name": "deploy/prod", "group": null, "shard": null, "token": 7},
                {"name": "orders#3", "group": "orders", "shard": 3, "token": 12},
            ])
        );
    }

    pub(crate) fn lock_held() -> v1::HeldResource {
        v1::HeldResource {
            name: "deploy/prod".into(),
            group: String::new(),
            shard: 0,
            token: 7,
        }
    }

    pub(crate) fn shard_held() -> v1::HeldResource {
        v1::HeldResource {
            name: "orders#3".into(),
            group: "orders".into(),
            shard: 3,
            token: 12,
        }
    }

    #[test]
    fn resource_changes_are_lines_of_their_own() {
        let change = |resource, held: bool, reason: &str| v1::Delta {
            kind: Some(Kind::ResourceChange(v1::ResourceChange {
                resource,
                held,
                reason: reason.into(),
                at_ms: 1_764_588_000_500,
            })),
        };
        let update = v1::WatchUpdate {
            now_ms: 1_764_588_001_000,
            seq: 5,
            agent_id: "web-1#7".into(),
            deltas: vec![
                change(Some(shard_held()), true, "acquired"),
                change(Some(lock_held()), false, "revoked"),
            ],
            ..Default::default()
        };
        let json: Vec<serde_json::Value> = lines(update)
            .unwrap_or_default()
            .iter()
            .filter_map(|l| serde_json::to_value(l).ok())
            .collect();
        assert_eq!(json[0]["kind"], "resource_change");
        assert_eq!(
            json[0]["resource_change"],
            serde_json::json!({
                "resource": {"name": "orders#3", "group": "orders", "shard": 3, "token": 12},
                "held": true,
                "reason": "acquired",
                "at": "2025-12-01T11:20:00.500Z",
                "at_ms": 1_764_588_000_500_i64,
            })
        );
        assert_eq!(json[1]["resource_change"]["held"], false);
        assert_eq!(
            json[1]["resource_change"]["resource"]["group"],
            serde_json::Value::Null
        );

        let missing = v1::WatchUpdate {
            now_ms: 1,
            deltas: vec![change(None, true, "acquired")],
            ..Default::default()
        };
        assert_eq!(
            lines(missing).err(),
            Some(WireError::MissingField("resource_change.resource"))
        );
        let mut bad = lock_held();
        bad.token = -1;
        let negative = v1::WatchUpdate {
            now_ms: 1,
            deltas: vec![change(Some(bad), true, "acquired")],
            ..Default::default()
        };
        assert!(lines(negative).is_err());
    }

    #[test]
    fn bad_times_are_refused() {
        let mut bad = lease();
        bad.lease_until_ms = -1;
        let update = v1::WatchUpdate {
            now_ms: 1,
            deltas: vec![v1::Delta {
                kind: Some(Kind::LeaseAcquired(bad)),
            }],
            ..Default::default()
        };
        assert!(lines(update).is_err());
        assert!(lines(v1::WatchUpdate::default()).is_err());
    }

    #[test]
    #[allow(deprecated)] // an older agent fills only the words
    fn an_older_agent_words_and_unknown_enum_numbers_are_shown_as_sent() {
        let released = |lease_outcome: i32, outcome: &str| {
            let kind = Kind::LeaseReleased(v1::LeaseReleased {
                task_id: 1,
                epoch: 2,
                outcome: outcome.into(),
                lease_outcome,
            });
            match event(kind) {
                Ok(WatchEvent::LeaseReleased(r)) => r.outcome,
                other => format!("{other:?}"),
            }
        };
        // Older agent: the enum unset, the word set.
        assert_eq!(released(0, "lost"), "lost");
        assert_eq!(released(0, "fenced"), "fenced");
        // This version: the enum wins.
        assert_eq!(
            released(v1::LeaseOutcome::Fenced as i32, "fenced"),
            "fenced"
        );
        // Newer agent: a number this build does not know, with or without its word.
        assert_eq!(released(99, ""), "unknown(99)");
        assert_eq!(released(99, "evicted"), "evicted");
        let stats = |agent_state: i32, state: &str| {
            StatsView::from(v1::AgentStats {
                agent_state,
                state: state.into(),
                ..Default::default()
            })
            .state
        };
        assert_eq!(stats(0, "draining"), "draining");
        assert_eq!(stats(v1::AgentState::Draining as i32, ""), "draining");
        assert_eq!(stats(-4, ""), "unknown(-4)");
    }
}
