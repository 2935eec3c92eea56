//! Typed results of store operations. A fenced holder write is [`HolderWrite::Fenced`] or
//! [`CompleteOutcome::Fenced`]: counted, logged and streamed by the caller, never an error.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::domain::{
    AgentId, AgentState, Attempt, LeaseEpoch, Policy, Task, TaskId, TaskStatus, TaskType,
};

/// What an enqueue did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Enqueued {
    pub id: TaskId,
    /// False when the idempotency key matched an existing task, which is returned instead.
    pub created: bool,
    /// What happened: created, or what was done to the key's existing task.
    #[serde(default)]
    pub outcome: EnqueueOutcome,
    /// The status the key's existing task had when this enqueue found it (`None` when
    /// created, and when the bulk statement found it: it reads no status).
    #[serde(default)]
    pub existing_status: Option<TaskStatus>,
    /// With `unique_for`: the finished task that gave the key up to this one.
    #[serde(default)]
    pub released_from: Option<TaskId>,
}

impl Enqueued {
    /// A new task.
    pub fn created(id: TaskId) -> Self {
        Enqueued {
            id,
            created: true,
            outcome: EnqueueOutcome::Created,
            existing_status: None,
            released_from: None,
        }
    }

    /// The key's existing task `id` (found in `status`) is returned after `outcome`
    /// ([`EnqueueOutcome::Existing`] when it was left unchanged).
    pub fn existing(id: TaskId, outcome: EnqueueOutcome, status: Option<TaskStatus>) -> Self {
        Enqueued {
            id,
            created: false,
            outcome,
            existing_status: status,
            released_from: None,
        }
    }
}

/// What an enqueue did (see [`crate::domain::OnConflict`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EnqueueOutcome {
    /// A new task (its key was free, or a holder finished `unique_for` ago gave it up).
    #[default]
    Created,
    /// The key's task was returned unchanged (skip, or it was no longer waiting).
    Existing,
    /// The key's waiting task took the new enqueue's settings (`replace`).
    Replaced,
    /// The key's waiting task's start was pushed back and its payload replaced (`debounce`).
    Debounced,
}

impl EnqueueOutcome {
    /// The outcome's word (`created`, `existing`, `replaced`, `debounced`).
    pub const fn as_str(self) -> &'static str {
        match self {
            EnqueueOutcome::Created => "created",
            EnqueueOutcome::Existing => "existing",
            EnqueueOutcome::Replaced => "replaced",
            EnqueueOutcome::Debounced => "debounced",
        }
    }
}

/// Tasks claimed by one claim statement, with the database time of the claim.
#[derive(Debug, Clone)]
pub struct ClaimBatch {
    pub now: DateTime<Utc>,
    pub tasks: Vec<Task>,
    /// A limited scope was being claimed by another claimer and was skipped: claim again soon.
    pub contended: bool,
    /// A short claim held back by a rate limit: how long until the earliest of its full
    /// windows lets a start in again (claiming sooner finds nothing more of that scope).
    pub rate_wait: Option<std::time::Duration>,
}

/// A holder write that can be fenced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HolderWrite {
    /// The key matched: the write landed.
    Held,
    /// The lease moved on (other owner, newer epoch, or no longer leased): nothing changed.
    Fenced,
}

/// A lease that was renewed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenewedLease {
    pub id: TaskId,
    pub epoch: LeaseEpoch,
    pub lease_until: DateTime<Utc>,
    /// An operator asked to cancel: the holder should stop and report `Cancelled`.
    pub cancel_requested: bool,
}

/// Result of one batch renewal.
#[derive(Debug, Clone)]
pub struct RenewOutcome {
    pub now: DateTime<Utc>,
    pub renewed: Vec<RenewedLease>,
    /// Leases no longer held: the holder must stop these executions at once.
    pub lost: Vec<(TaskId, LeaseEpoch)>,
}

impl RenewOutcome {
    /// The outcome of renewing the leases `asked` at `now`: `renewed` as the store wrote them,
    /// and every asked lease not among them `lost`.
    pub(crate) fn settled(
        now: DateTime<Utc>,
        renewed: Vec<RenewedLease>,
        asked: &[(TaskId, LeaseEpoch)],
    ) -> Self {
        let held: std::collections::HashSet<(TaskId, LeaseEpoch)> =
            renewed.iter().map(|r| (r.id, r.epoch)).collect();
        let lost = asked
            .iter()
            .copied()
            .filter(|key| !held.contains(key))
            .collect();
        Self { now, renewed, lost }
    }
}

/// Result of a completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompleteOutcome {
    /// Recorded now; the task is in `status` (`retry_at` set when a retry was scheduled).
    Applied {
        status: TaskStatus,
        retry_at: Option<DateTime<Utc>>,
    },
    /// The same (task, epoch, owner) already recorded this outcome: a repeat whose first reply
    /// was lost. Success, and nothing changed.
    Repeated { status: TaskStatus },
    /// The lease moved on before this completion: nothing changed.
    Fenced,
}

/// Result of a batch release.
#[derive(Debug, Clone, Default)]
pub struct ReleaseOutcome {
    pub released: Vec<TaskId>,
    /// Given back already by the same (owner, epoch): a retry of a release whose first reply
    /// was lost. Nothing changed; it landed.
    pub repeated: Vec<TaskId>,
    /// No longer this owner's lease of that epoch: nothing changed.
    pub fenced: Vec<TaskId>,
}

/// What an operator cancel did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CancelOutcome {
    /// It was waiting: cancelled at once.
    Cancelled,
    /// It is running: its holder was asked to stop (it reports `Cancelled` when it has).
    Requested { owner: AgentId, epoch: LeaseEpoch },
    /// Cancellation had already been requested.
    AlreadyRequested { owner: AgentId, epoch: LeaseEpoch },
}

/// What an operator requeue did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequeueOutcome {
    pub id: TaskId,
    pub previous: TaskStatus,
}

/// What an operator's run-now did: the task's status (unchanged: it waits to be claimed) and
/// whether it was moved (`false`: it was already due).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunNowOutcome {
    pub id: TaskId,
    pub status: TaskStatus,
    pub moved: bool,
}

/// What an operator's delete did: the status the deleted task had.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeleteOutcome {
    pub id: TaskId,
    pub previous: TaskStatus,
}

/// Tasks per state for the console's Tasks view ([`crate::Store::task_count_states`]). The
/// waiting and running states are counted exactly (the live partition: every unfinished task
/// and nothing else). A finished state's count stops past [`TASK_COUNT_FINISHED_CAP`] (a count
/// above it means "more than the cap"), and is `None` when it could not be had within
/// [`TASK_COUNT_FINISHED_TIMEOUT`] (a filter that matches few of a long history).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskCounts {
    /// Queued and due.
    pub queued: u64,
    /// Queued, not yet due.
    pub scheduled: u64,
    /// Waiting to retry.
    pub retrying: u64,
    /// Running or asked to cancel.
    pub running: u64,
    /// Succeeded or partially succeeded.
    pub succeeded: Option<u64>,
    pub cancelled: Option<u64>,
    pub dead: Option<u64>,
    /// The database's now when counted.
    pub now: DateTime<Utc>,
}

/// The count of a finished state stops here (one more means "more").
pub const TASK_COUNT_FINISHED_CAP: u64 = 100_000;
/// Each finished count gives up after this long.
pub const TASK_COUNT_FINISHED_TIMEOUT: Duration = Duration::from_secs(1);

/// One lease taken by recovery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovered {
    pub id: TaskId,
    pub task_type: TaskType,
    pub owner: AgentId,
    /// The epoch that was revoked.
    pub revoked_epoch: LeaseEpoch,
    /// The status it was moved to (retry_wait, dead or cancelled).
    pub status: TaskStatus,
}

/// One successful run of a type, from [`RecentRunsParams`](super::RecentRunsParams).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecentRun {
    pub task_type: TaskType,
    /// From the claim that started the attempt to the completion that recorded its success
    /// (database clock).
    pub run_time: Duration,
}

/// A lease whose renewal is overdue but which recovery may not take yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SuspectLease {
    pub id: TaskId,
    pub task_type: TaskType,
    pub owner: AgentId,
    pub epoch: LeaseEpoch,
    pub heartbeat_at: DateTime<Utc>,
    pub lease_until: DateTime<Utc>,
    pub now: DateTime<Utc>,
}

/// A registered agent process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentRecord {
    pub id: AgentId,
    pub name: String,
    pub host: String,
    pub pid: u32,
    pub grpc_address: Option<String>,
    pub version: String,
    pub task_types: Vec<String>,
    pub local_concurrency: u32,
    pub active: u32,
    pub state: AgentState,
    pub started_at: DateTime<Utc>,
    pub heartbeat_at: DateTime<Utc>,
    pub stopped_at: Option<DateTime<Utc>>,
    /// The agent's own liveness deadline (database time): it is live while not stopped and
    /// this has not passed. `None` for a row written by an agent from before the deadline
    /// existed (judge it by `heartbeat_at`).
    #[serde(default)]
    pub alive_until: Option<DateTime<Utc>>,
    /// Database time when the row was read (to age the heartbeat without a host clock).
    pub now: DateTime<Utc>,
    /// This agent holds the `leader` row's lease and it has not expired (at `now`).
    pub leader: bool,
}

/// Result of a leader election attempt. `now` is the database time of the attempt (the
/// maintenance loop watches it for clock jumps).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaderOutcome {
    /// This agent leads under `term` until `lease_until` (renewed if it already led).
    Leader {
        term: i64,
        lease_until: DateTime<Utc>,
        now: DateTime<Utc>,
    },
    /// Someone else leads (or held it too recently to take over).
    Follower {
        leader: Option<AgentId>,
        term: i64,
        lease_until: Option<DateTime<Utc>>,
        now: DateTime<Utc>,
    },
}

/// Result of a leader renewal (fenced by term).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaderRenewal {
    /// Still the leader; `now` is the database time of the renewal.
    Held { now: DateTime<Utc> },
    /// Another term began (or the leadership was resigned): nothing changed.
    Fenced,
}

/// A task with every attempt.
#[derive(Debug, Clone)]
pub struct TaskDetail {
    pub task: Task,
    pub attempts: Vec<Attempt>,
    pub now: DateTime<Utc>,
}

/// What a bulk action over dead letters (requeue, purge) did or, on a dry run, would do.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeadBulkOutcome {
    /// Tasks requeued or deleted; on a dry run, every task the filter matches.
    pub count: u64,
    /// Dry runs only: a page of the matching ids, newest first (read in the same snapshot as
    /// `count`); empty for a real run.
    pub ids: Vec<TaskId>,
    /// Dry runs only: the `before` of the next page of ids (`None`: this was the last).
    pub next_before: Option<TaskId>,
}

/// A page of tasks.
#[derive(Debug, Clone)]
pub struct TaskPage {
    pub tasks: Vec<Task>,
    /// Cursor of the next page (None: this was the last).
    pub next_before: Option<TaskId>,
}

/// One audit row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditRecord {
    pub id: i64,
    pub at: DateTime<Utc>,
    pub actor: String,
    pub role: String,
    pub action: String,
    pub target: String,
    pub params: Option<serde_json::Value>,
    pub result: String,
    pub detail: Option<String>,
    /// The connection the call came from (`None` for rows written before peers were recorded,
    /// and for rows of the agent's own work).
    pub peer: Option<String>,
    /// How many calls the row stands for (refused calls of one peer fold into one row).
    pub count: i64,
}

/// What kind of reason keeps a task from running ([`crate::Store::task_explain`]). Blockers
/// come in the order of these variants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BlockerKind {
    /// The task is terminal (succeeded, partially succeeded, dead, cancelled); only a requeue
    /// runs it again. The only blocker of a terminal task.
    Finished,
    /// Cancellation was requested; its holder is stopping it.
    CancelRequested,
    /// An attempt failed and the retry is not due yet.
    RetryWait,
    /// Queued with a due time in the future.
    NotDue,
    /// Its deadline passed; maintenance dead-letters it.
    DeadlinePassed,
    /// Its type, or every type (the global policy), is paused.
    Paused,
    /// Its type's circuit breaker is open, or half-open with its one try running.
    Breaker,
    /// Its type's concurrency limit is reached.
    TypeLimit,
    /// Its type's per-key limit is reached for its concurrency key.
    KeyLimit,
    /// The global concurrency limit is reached.
    GlobalLimit,
    /// Its type's rate limit let in as many starts as it allows in the current window.
    RateLimit,
    /// The global rate limit did.
    GlobalRateLimit,
    /// No live agent serves its type.
    NoAgent,
    /// Claimable tasks of its type come before it in claim order.
    BehindHigherPriority,
    /// Nothing blocks it: the next claim of an agent serving its type takes it.
    Claimable,
}

impl BlockerKind {
    /// Every kind, in the order blockers are reported.
    pub const ALL: [BlockerKind; 15] = [
        BlockerKind::Finished,
        BlockerKind::CancelRequested,
        BlockerKind::RetryWait,
        BlockerKind::NotDue,
        BlockerKind::DeadlinePassed,
        BlockerKind::Paused,
        BlockerKind::Breaker,
        BlockerKind::TypeLimit,
        BlockerKind::KeyLimit,
        BlockerKind::GlobalLimit,
        BlockerKind::RateLimit,
        BlockerKind::GlobalRateLimit,
        BlockerKind::NoAgent,
        BlockerKind::BehindHigherPriority,
        BlockerKind::Claimable,
    ];

    /// The snake_case name shown to users and sent on the wire.
    pub const fn as_str(self) -> &'static str {
        match self {
            BlockerKind::Finished => "finished",
            BlockerKind::CancelRequested => "cancel_requested",
            BlockerKind::RetryWait => "retry_wait",
            BlockerKind::NotDue => "not_due",
            BlockerKind::DeadlinePassed => "deadline_passed",
            BlockerKind::Paused => "paused",
            BlockerKind::Breaker => "breaker",
            BlockerKind::TypeLimit => "type_limit",
            BlockerKind::KeyLimit => "key_limit",
            BlockerKind::GlobalLimit => "global_limit",
            BlockerKind::RateLimit => "rate_limit",
            BlockerKind::GlobalRateLimit => "global_rate_limit",
            BlockerKind::NoAgent => "no_agent",
            BlockerKind::BehindHigherPriority => "behind_higher_priority",
            BlockerKind::Claimable => "claimable",
        }
    }
}

impl std::fmt::Display for BlockerKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One reason a task is not running, with a message an operator on call can act on (numbers,
/// names, RFC 3339 UTC times and their distance from the database's `now()`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Blocker {
    /// What kind of reason this is (for logic, filters and icons).
    pub kind: BlockerKind,
    /// The reason in words, for people.
    pub message: String,
}

/// A policy change: the row before (as read under the change's lock) and after.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyChange {
    pub before: Policy,
    pub after: Policy,
}

/// Most task types an [`Overview`] lists.
pub const OVERVIEW_TYPES_CAP: usize = 1000;

/// Counts per task type and the global policy, as of `now`.
#[derive(Debug, Clone, PartialEq)]
pub struct Overview {
    /// By name; at most [`OVERVIEW_TYPES_CAP`].
    pub types: Vec<TypeCounts>,
    /// More types exist than are listed.
    pub truncated: bool,
    pub global_limit: Option<u32>,
    pub global_paused: bool,
    /// The global rate limit and the starts of every type in its window ending at `now`.
    pub global_rate: Option<RateFill>,
    pub now: DateTime<Utc>,
}

/// A rate limit and how many starts its window ending now holds (its fill).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateFill {
    pub limit: crate::domain::RateLimit,
    pub used: u64,
}

/// One task type's counts, limit and pause.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypeCounts {
    pub task_type: TaskType,
    /// Queued and due.
    pub queued: u64,
    /// Queued, not yet due.
    pub scheduled: u64,
    pub retrying: u64,
    /// Running or cancel_requested.
    pub running: u64,
    pub dead: u64,
    /// Succeeded or partially succeeded in the last 60 s.
    pub finished_last_minute: u64,
    /// Dead-lettered in the last 60 s.
    pub dead_last_minute: u64,
    pub limit: Option<u32>,
    pub paused: bool,
    /// Its own rate limit and fill.
    pub rate: Option<RateFill>,
    /// Load shedding: waiting tasks due longer ago than this are cancelled (reason `shed`).
    pub shed_after: Option<std::time::Duration>,
    /// Tasks shed in the last 60 s.
    pub shed_last_minute: u64,
    /// The per-key limit: running tasks allowed per concurrency key.
    pub per_key_limit: Option<u32>,
    /// Its circuit breaker and where it stands.
    pub breaker: Option<BreakerStatus>,
    /// How long its oldest *waiting* task has been due, by the database clock: the largest
    /// `now - available_at` of its tasks a claim could take now (`queued` or `retry_wait` with
    /// `available_at <= now`, which is what the claim statements select). `None` when none
    /// waits. Millisecond precision.
    pub oldest_waiting: Option<Duration>,
}

/// A task type's circuit breaker and where it stands (database time).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct BreakerStatus {
    pub policy: crate::domain::BreakerPolicy,
    pub state: crate::domain::BreakerState,
    /// When the state last changed (none: never, closed since it was set).
    pub since: Option<DateTime<Utc>>,
    /// An open breaker half-opens at this time.
    pub until: Option<DateTime<Utc>>,
}

impl BreakerTransition {
    /// The audit row of this move, an action of the leader `agent` (role `system`).
    pub fn audit_entry(&self, agent: &crate::domain::AgentId) -> crate::store::AuditEntry {
        use crate::domain::BreakerState::{Closed, HalfOpen, Open};
        let until = self
            .until
            .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
            .unwrap_or_default();
        let detail = match (self.from, self.to) {
            (Closed, Open) => format!(
                "{} failures within {}: not claimed until {until}",
                self.failures.unwrap_or_default(),
                crate::domain::RateLimit::period_text(self.policy.within)
            ),
            (_, Open) => format!("the half-open try failed: not claimed until {until}"),
            (_, HalfOpen) => "cooldown over: one task at a time tries".to_string(),
            (_, Closed) => "the half-open try succeeded".to_string(),
        };
        crate::store::AuditEntry {
            actor: crate::domain::Actor {
                name: agent.as_str().to_string(),
                role: crate::domain::Role::System,
            },
            action: format!("breaker_{}", self.to.as_str()),
            target: format!("type:{}", self.task_type),
            params: Some(serde_json::json!({
                "from": self.from.as_str(),
                "to": self.to.as_str(),
                "failures": self.failures,
                "until": self.until,
                "breaker": self.policy,
            })),
            result: crate::domain::AuditResult::Applied,
            detail: Some(detail),
        }
    }
}

/// A move of a breaker made by [`crate::Store::breaker_tick`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BreakerTransition {
    pub task_type: TaskType,
    pub from: crate::domain::BreakerState,
    pub to: crate::domain::BreakerState,
    /// The failures counted within the window (when it opened from closed).
    pub failures: Option<u64>,
    /// When an opened breaker half-opens.
    pub until: Option<DateTime<Utc>>,
    pub policy: crate::domain::BreakerPolicy,
}

/// One row of an overview statement, decoded by a store: the global policy (the row named
/// `*`) or a task type's counts.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum OverviewRow {
    Global {
        limit: Option<u32>,
        paused: bool,
        rate: Option<RateFill>,
    },
    Type(TypeCounts),
}

impl Overview {
    /// The overview of `rows` (in statement order: the global row first, then types by name),
    /// keeping at most [`OVERVIEW_TYPES_CAP`] types and saying when more were left out.
    pub(crate) fn from_rows(
        now: DateTime<Utc>,
        rows: impl IntoIterator<Item = crate::store::Result<OverviewRow>>,
    ) -> crate::store::Result<Overview> {
        let mut overview = Overview {
            types: Vec::new(),
            truncated: false,
            global_limit: None,
            global_paused: false,
            global_rate: None,
            now,
        };
        for row in rows {
            match row? {
                OverviewRow::Global {
                    limit,
                    paused,
                    rate,
                } => {
                    overview.global_limit = limit;
                    overview.global_paused = paused;
                    overview.global_rate = rate;
                }
                OverviewRow::Type(_) if overview.types.len() == OVERVIEW_TYPES_CAP => {
                    overview.truncated = true;
                    break;
                }
                OverviewRow::Type(counts) => overview.types.push(counts),
            }
        }
        Ok(overview)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn a_renewal_loses_every_asked_lease_it_did_not_renew() {
        let now = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        let lease = |id, epoch| (TaskId(id), LeaseEpoch(epoch));
        let renewed = vec![RenewedLease {
            id: TaskId(2),
            epoch: LeaseEpoch(5),
            lease_until: now,
            cancel_requested: false,
        }];
        // Task 2 at another epoch is a different lease: lost, as is task 3.
        let asked = [lease(2, 5), lease(2, 4), lease(3, 1)];
        let outcome = RenewOutcome::settled(now, renewed, &asked);
        assert_eq!(outcome.lost, [lease(2, 4), lease(3, 1)]);
        assert_eq!(outcome.renewed.len(), 1);
        assert_eq!(outcome.now, now);
    }
}
