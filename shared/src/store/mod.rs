//! The [`Store`] trait: the seam between the runtime and the databases.
//!
//! `Store` is implemented once (`driver.rs`), over a `Driver` per backend (`postgres/`,
//! `sqlite/`) that only runs statements: validation, operations derived from others and the
//! wake-up of agents after writes that make work claimable are decided there, the same for both.
//! Rows become domain types in `rows.rs`, once; each backend only decodes its column types.
//! Where the backends differ only by statement text and time binding, the operation is written
//! once over a `Dialect` (`dialect.rs`), or its statements once in `*_statements_alike!`.
//!
//! Every method is one statement or one short transaction. Methods are named noun-first, take
//! a `…Params` struct when they have more than an id or two, and return typed outcomes. Holder writes carry a
//! [`LeaseKey`](crate::LeaseKey) and are *fenced*: when the row's owner, epoch or status no
//! longer match, nothing changes and the outcome says `Fenced`.
//!
//! ```text
//!            claim (epoch+1, lease_until = now()+ttl)
//!   queued ───────────────────────────────────────────▶ running(owner, epoch)
//!                                                         │  renew: lease_until = now()+ttl
//!                                                         │  (owner, epoch, status must match)
//!       heartbeat_at older than revoke threshold ──▶ suspect (listed, not taken)
//!       lease_until + grace < now()             ──▶ recovered: epoch+1, retry_wait|dead|cancelled
//!       holder write with old (owner, epoch)    ──▶ Fenced, nothing changes
//! ```
//!
//! Every lease time is the database's `now()`; no host clock is ever written into a lease.
//!
//! When things fail: a statement error is a [`StoreError`] and changed nothing (each
//! operation is atomic). A completion whose reply was lost can be repeated: the same
//! (task, epoch, owner, outcome) reports `Repeated`. Recovery re-checks status, owner, epoch and
//! expiry in the statement that changes the row, so it never touches a finished or newer row.

mod any;
mod audit;
mod dialect;
mod driver;
pub(crate) mod error;
pub mod explain;
pub mod idle;
mod key_cursors;
pub mod lifecycle;
pub mod outcomes;
pub mod params;
pub mod postgres;
pub mod queue_history;
pub mod resources;
mod rows;
pub mod schedules;
#[cfg(feature = "sqlite")]
pub mod sqlite;
pub mod stats;
pub mod wake;

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

pub use any::AnyStore;
pub use error::{NOT_MIGRATED, Result, StoreError, error_sentence, redact_url};
pub use idle::{IdleGroup, IdleReport, IdleReportParams};
pub use key_cursors::KeyCursors;
pub use outcomes::*;
pub use stats::{QueueStats, STATS_WINDOWS, StatsWindow};
pub use wake::{WakeError, WakeEvent, WakeKind, WakeSource, WakeSubscription};

/// Whether `url` names a SQLite database (`sqlite://PATH`, `sqlite:PATH`), whether or not
/// this build has the SQLite store (the cargo feature `sqlite`, on by default).
pub fn is_sqlite_url(url: &str) -> bool {
    url.starts_with("sqlite:")
}
pub use params::*;
pub use queue_history::{
    HISTORY_DEFAULT_MINUTES, HISTORY_MAX_MINUTES, HistoryCounts, HistoryPoint, HistoryPruneParams,
    HistoryReadParams, HistorySample, HistorySampleParams, QueueHistory,
};
pub use resources::{
    GroupName, LockAcquireParams, LockAcquired, LockForceReleaseParams, LockListing, LockName,
    ResourceHolderParams, ResourceRecord, ResourceRenewOutcome, ResourceRenewParams,
    ShardAcquireParams, ShardGroupCreateParams, ShardGroupCreated, ShardGroupRecord,
    ShardGroupView, ShardJoinParams, ShardMemberRecord,
};
pub use schedules::{
    FireReport, FiredTick, LeaderRecord, ScheduleAddParams, ScheduleAdded, ScheduleEnableParams,
    ScheduleEnabled, ScheduleFireParams, ScheduleListing, ScheduleNameParams, ScheduleRecord,
    ScheduleTriggered, ScheduleWriteMode, UnreadableSchedule,
};

use crate::domain::{AgentId, Policy, PolicyScope, TaskId, TaskType};

/// Storage of tasks, leases, policies, agents, the leader and the audit log.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// The input limits this store enforces (payload size and the rest), so a caller can
    /// refuse an oversized input before doing any work with it.
    fn input_limits(&self) -> &crate::domain::InputLimits;

    /// The database's current time.
    async fn db_now(&self) -> Result<DateTime<Utc>>;

    /// Enqueue one task (an existing task when its idempotency key is known).
    async fn task_enqueue(&self, task: NewTask) -> Result<Enqueued>;
    /// Enqueue one task on behalf of an operator: [`Store::task_enqueue`] and its audit row
    /// (action `enqueue`, result `applied`, or `noop` when the idempotency key matched) in one
    /// transaction. A viewer is refused with [`StoreError::PermissionDenied`] (audited as
    /// `denied`, nothing enqueued); invalid input is [`StoreError::Invalid`] and writes nothing,
    /// not even an audit row.
    async fn task_enqueue_audited(&self, params: EnqueueAuditedParams) -> Result<Enqueued>;
    /// Enqueue many tasks in one statement; results in input order.
    async fn task_enqueue_many(&self, tasks: Vec<NewTask>) -> Result<Vec<Enqueued>>;
    /// Claim up to `batch` due tasks (DESIGN §4 order), within every concurrency limit.
    async fn task_claim(&self, params: ClaimParams) -> Result<ClaimBatch>;
    /// Renew a batch of leases; reports lost and cancel-requested ones.
    async fn lease_renew_many(&self, params: RenewParams) -> Result<RenewOutcome>;
    /// Record progress (fenced).
    async fn task_progress(&self, params: ProgressParams) -> Result<HolderWrite>;
    /// Save a checkpoint (fenced); the task's next attempt receives it.
    async fn task_checkpoint(&self, params: CheckpointParams) -> Result<HolderWrite>;
    /// End an attempt (fenced, idempotent per (task, epoch)); writes the attempt row.
    async fn task_complete(&self, params: CompleteParams) -> Result<CompleteOutcome>;
    /// End many attempts in one statement (each fenced on its own); results in input order.
    async fn task_complete_many(&self, batch: Vec<CompleteParams>) -> Result<Vec<CompleteOutcome>>;
    /// Give leases back so they run again at once (fenced). Idempotent per (task, owner,
    /// epoch), as completion is: a retry of a release that landed (its reply lost) is
    /// `repeated`, never `fenced`, and changes nothing.
    async fn lease_release_many(&self, params: ReleaseParams) -> Result<ReleaseOutcome>;

    /// Operator cancel (audited).
    async fn task_cancel(&self, params: CancelParams) -> Result<CancelOutcome>;
    /// Operator requeue of a finished task (audited).
    async fn task_requeue(&self, params: RequeueParams) -> Result<RequeueOutcome>;
    /// Requeue dead tasks matching a filter in one transaction (audited: one row with the
    /// filter and the count; a viewer is refused, with a `denied` row). With `dry_run` nothing
    /// changes: the outcome has the count and a page of the matching ids, newest first.
    async fn task_requeue_dead(&self, params: RequeueDeadParams) -> Result<DeadBulkOutcome>;
    /// Delete dead tasks matching a filter, with their attempts, in one transaction (audited
    /// as [`Store::task_requeue_dead`] is, action `purge_dead`). With `dry_run` nothing
    /// changes: the outcome has the count and a page of the matching ids, newest first.
    async fn task_purge_dead(&self, params: PurgeDeadParams) -> Result<DeadBulkOutcome>;
    /// Operator run-now of a waiting task (queued not yet due, or waiting to retry): due at
    /// the database's now, so the next claim may take it (audited; agents are woken). A task
    /// already due is left as it is (`moved: false`, audited `noop`); a running or finished
    /// one is refused ([`StoreError::Transition`]).
    async fn task_run_now(&self, params: RunNowParams) -> Result<RunNowOutcome>;
    /// Operator delete of a task no agent holds, with its attempts (audited, the audit row
    /// naming its type and status). A running task is refused ([`StoreError::Transition`]):
    /// cancel it first.
    async fn task_delete(&self, params: DeleteTaskParams) -> Result<DeleteOutcome>;

    /// Take expired leases after grace.
    async fn lease_recover_expired(&self, params: RecoverParams) -> Result<Vec<Recovered>>;
    /// Dead-letter waiting tasks whose deadline passed.
    async fn task_expire_deadlines(&self, params: ExpireDeadlinesParams) -> Result<Vec<TaskId>>;
    /// Cancel (reason `shed`) waiting tasks of shedding types that became due longer ago than
    /// their type's `shed_after`; returns them with their types.
    async fn task_shed(&self, params: ShedParams) -> Result<Vec<(TaskId, TaskType)>>;
    /// Move the circuit breakers (closed → open after too many failures, open → half-open after
    /// the cooldown, half-open → closed or open by the try's outcome); each move is audited as
    /// an action of the agent. Returns the moves.
    async fn breaker_tick(&self, params: BreakerTickParams) -> Result<Vec<BreakerTransition>>;
    /// Delete finished tasks past retention; returns how many went.
    async fn task_purge_finished(&self, params: PurgeParams) -> Result<u64>;
    /// Dead-letter waiting tasks whose type no live agent serves (code `unknown_type`).
    async fn task_dead_letter_unserved(
        &self,
        params: UnservedParams,
    ) -> Result<Vec<(TaskId, TaskType)>>;
    /// The run times of the newest successful runs of some types (newest first), bounded as
    /// [`RecentRunsParams`] says.
    async fn task_recent_runs(&self, params: RecentRunsParams) -> Result<Vec<RecentRun>>;
    /// Tasks of these types that a claim could take now (due, not paused).
    async fn task_count_claimable(&self, task_types: Vec<TaskType>) -> Result<u64>;
    /// The work of the run's task types as it stands now, for `--exit-when-idle`: pending
    /// (queued, retry_wait, running, cancel_requested), ended badly (dead, cancelled, within
    /// `ended_within`) and waiting tasks of other types no live agent serves; see [`idle`].
    async fn task_idle_report(&self, params: IdleReportParams) -> Result<IdleReport>;
    /// Leases whose renewals are overdue.
    async fn lease_list_suspect(&self, params: SuspectParams) -> Result<Vec<SuspectLease>>;

    /// Every policy row (the global one first).
    async fn policy_list(&self) -> Result<Vec<Policy>>;
    /// One policy row (a type without a row inherits everything).
    async fn policy_get(&self, scope: PolicyScope) -> Result<Policy>;
    /// Change a policy row (audited); takes effect at the next claim.
    async fn policy_set(&self, params: PolicySetParams) -> Result<Policy> {
        Ok(self.policy_change(params).await?.after)
    }
    /// Change a policy row (audited) and say what it was before, as read under the lock the
    /// change took: concurrent changes never make the answer disagree with the audit row.
    async fn policy_change(&self, params: PolicySetParams) -> Result<PolicyChange>;

    /// Register a starting agent process and give it its per-start id.
    async fn agent_register(&self, params: AgentRegisterParams) -> Result<AgentRecord>;
    /// Registry heartbeat; false when the agent is unknown or marked stopped.
    async fn agent_heartbeat(&self, params: AgentHeartbeatParams) -> Result<bool>;
    /// Agents heard from within the last hour (a crashed agent, which never marks itself
    /// stopped, drops out an hour after its last registry heartbeat), plus those stopped
    /// within the last hour.
    async fn agent_list(&self) -> Result<Vec<AgentRecord>>;
    /// Mark an agent stopped.
    async fn agent_mark_stopped(&self, id: AgentId) -> Result<()>;

    /// Become or stay leader.
    async fn leader_attempt_elect(&self, params: LeaderElectParams) -> Result<LeaderOutcome>;
    /// Renew leadership (fenced by term).
    async fn leader_renew(&self, params: LeaderRenewParams) -> Result<LeaderRenewal>;
    /// Give leadership up (fenced by term). A retry of a resignation that landed (its reply
    /// lost) is `Held` again and changes nothing.
    async fn leader_resign(&self, owner: AgentId, term: i64) -> Result<HolderWrite>;
    /// The `leader` lease row.
    async fn leader_get(&self) -> Result<Option<LeaderRecord>>;

    /// Every schedule by name, with the status of its last task; rows that cannot be read
    /// are listed apart, with why.
    async fn schedule_list(&self) -> Result<ScheduleListing>;
    /// Create, replace or declare a schedule (audited; a declaration that changed nothing is
    /// not, since every agent start declares again);
    /// [`StoreError::ScheduleExists`] when [`ScheduleWriteMode::Create`] meets a different
    /// one (audited as `failed`). Its first tick is the first after the database's now.
    async fn schedule_add(&self, params: ScheduleAddParams) -> Result<ScheduleAdded>;
    /// Delete a schedule (audited); its tasks stay. Returns it as it was (`None` when its row
    /// could not be read: bad database state is deleted too). [`StoreError::ScheduleNotFound`]
    /// when there is none.
    async fn schedule_remove(&self, params: ScheduleNameParams) -> Result<Option<ScheduleRecord>>;
    /// Enable or disable a schedule (audited). Enabling fires from the first tick after now.
    async fn schedule_set_enabled(&self, params: ScheduleEnableParams) -> Result<ScheduleEnabled>;
    /// Fire a schedule now, once, outside its cron (audited), enabled or not.
    async fn schedule_trigger(&self, params: ScheduleNameParams) -> Result<ScheduleTriggered>;
    /// The leader's firing pass: one task per due tick, fenced by the leader's term (nothing
    /// fires and `fenced` is set when the caller does not hold the leader lease).
    async fn schedule_fire_due(&self, params: ScheduleFireParams) -> Result<FireReport>;

    /// Take a lock, or extend it when the holder holds it already (same token); refused (not
    /// an error: `acquired` false, the current holding returned) while someone else holds it,
    /// until its `lease_until + grace` (or `lock_at_most_until`, or after a release, its
    /// `lock_at_least_until`). Each new holding gets the next token and a history row.
    async fn lock_acquire(&self, params: LockAcquireParams) -> Result<LockAcquired>;
    /// Renew one lease (a lock or a shard) by its holder (fenced): `None` when holder or
    /// token no longer match, or it was released, or `lock_at_most_until` passed.
    async fn resource_renew(&self, params: ResourceHolderParams) -> Result<Option<ResourceRecord>>;
    /// Give one lease back (fenced). Before `lock_at_least_until` it stays held until then
    /// (state released); otherwise it is free at once. Returns the row after, `None` when
    /// fenced. Idempotent per (name, holder, token): a retry of a release that landed (its
    /// reply lost) changes nothing and returns the row as it is.
    async fn resource_release(
        &self,
        params: ResourceHolderParams,
    ) -> Result<Option<ResourceRecord>>;
    /// An operator frees a lock whoever holds it (audited); the token stays, so the next
    /// holding gets a higher one and the old holder's writes are fenced.
    /// [`StoreError::LockNotFound`] when there is no such lock.
    async fn lock_force_release(&self, params: LockForceReleaseParams) -> Result<ResourceRecord>;
    /// Every lock (not shards), by name, with its moves in the last hour.
    async fn lock_list(&self) -> Result<LockListing>;
    /// Renew, in one statement per table, the holder's leases and group memberships.
    async fn resource_renew_many(
        &self,
        params: ResourceRenewParams,
    ) -> Result<ResourceRenewOutcome>;

    /// Declare a group of shards (audited): its shard rows are created free.
    /// [`StoreError::ShardGroupExists`] when it exists with another count.
    async fn shard_group_create(&self, params: ShardGroupCreateParams)
    -> Result<ShardGroupCreated>;
    /// Every group by name, with counts (`grace`: how long a member counts past its lease).
    async fn shard_group_list(
        &self,
        grace: Duration,
    ) -> Result<(Vec<ShardGroupRecord>, DateTime<Utc>)>;
    /// One group with its shards and members; `None` when there is no such group.
    async fn shard_group_get(
        &self,
        group: GroupName,
        grace: Duration,
    ) -> Result<Option<ShardGroupView>>;
    /// Join a group (or renew the membership). [`StoreError::ShardGroupNotFound`] when there is
    /// no such group.
    async fn shard_join(&self, params: ShardJoinParams) -> Result<()>;
    /// Leave a group (the membership row goes; the member's shards are not touched).
    async fn shard_leave(&self, group: GroupName, member: AgentId) -> Result<()>;
    /// Take one shard when it is free or takeable (as [`Store::lock_acquire`] decides); the
    /// new token, or `None` when someone else holds it.
    async fn shard_acquire(&self, params: ShardAcquireParams) -> Result<Option<i64>>;
    /// Delete history rows older than `older_than`; returns how many went.
    async fn resource_history_prune(&self, older_than: Duration) -> Result<u64>;

    /// Write an audit row on its own (e.g. a denied call).
    async fn audit_record(&self, entry: AuditEntry) -> Result<()>;
    /// Write one `denied` audit row standing for `calls.count` refused calls of `calls.peer`
    /// (columns `peer` and `count`). Bad input ([`DeniedCalls::validate`]: a count of 0, a
    /// result other than `denied`, oversized text) is [`StoreError::Invalid`] and writes nothing.
    async fn audit_record_denied(&self, calls: DeniedCalls) -> Result<()>;
    /// A page of the audit log, newest first.
    async fn audit_list(&self, params: AuditListParams) -> Result<Vec<AuditRecord>>;

    /// A page of tasks, newest first.
    async fn task_list(&self, params: TaskListParams) -> Result<TaskPage>;
    /// One task with its attempts.
    async fn task_get(&self, id: TaskId) -> Result<Option<TaskDetail>>;
    /// Why a task is not running: one [`Blocker`] per reason that applies, in
    /// [`BlockerKind`] order ([`BlockerKind::Claimable`] alone when nothing blocks a due task;
    /// empty for a running task). [`StoreError::NotFound`] for an unknown id.
    async fn task_explain(&self, params: ExplainParams) -> Result<Vec<Blocker>>;
    /// Tasks per state under a [`TaskListParams`]-like filter, each count capped
    /// ([`TaskCounts`]): the waiting and running states from the live partition, the finished
    /// ones within [`TASK_COUNT_FINISHED_TIMEOUT`] or not at all.
    async fn task_count_states(&self, params: TaskCountParams) -> Result<TaskCounts>;

    /// Counts per task type and the global policy ([`Overview`]), in one statement that reads
    /// only the live, dead and recently finished tasks through their partial indexes.
    async fn task_overview(&self) -> Result<Overview>;

    /// The whole queue at a glance ([`QueueStats`]): live counts now and the finishes and
    /// failed attempts of the last minute, quarter hour and hour, in one statement that reads
    /// only indexes (see `store/stats.rs`).
    async fn task_stats(&self) -> Result<QueueStats>;
    // Queue history (issue 26).
    /// One pass of the leader's history sampler ([`queue_history`]): writes the complete
    /// minutes not yet counted (at most `backfill` back) and recounts the newest `recount`,
    /// idempotently; stores the id mark of the coming minute.
    async fn queue_history_sample(&self, params: HistorySampleParams) -> Result<HistorySample>;
    /// Every minute of the last `minutes` complete ones, oldest first, of one type or of every
    /// type summed, with the database's now.
    async fn queue_history_read(&self, params: HistoryReadParams) -> Result<QueueHistory>;
    /// Retention: deletes history older than `older_than` in small batches; returns how many
    /// rows went.
    async fn queue_history_prune(&self, params: HistoryPruneParams) -> Result<u64>;
}
