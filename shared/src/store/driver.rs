//! The [`Driver`]: what one backend (PostgreSQL, SQLite) provides, and the one [`Store`]
//! written over it.
//!
//! ```text
//!   caller ──▶ Store (this file, once)            ──▶ Driver (per backend)       ──▶ database
//!              validates params                        runs its statements
//!              derives policy_get, task_complete       in one transaction each
//!              wakes agents after a write that         wake(): PostgreSQL NOTIFY;
//!              makes work claimable                    SQLite nothing (agents watch
//!                                                      PRAGMA data_version)
//! ```
//!
//! Every type that implements [`Driver`] is a [`Store`] (the blanket impl below), so
//! `PgStore`, `SqliteStore` and `Arc<dyn Store>` are used as before. A backend does not write
//! its `Driver` impl by hand: `impl_driver!` (`driver/generate.rs`) generates it from the
//! backend's `ops` module, which names, under each operation's name, the function that runs it.
//!
//! Invariants: a driver method receives input the Store layer has validated where the
//! operation has a `validate()` (some backend functions still validate again: harmless). The
//! Store layer wakes agents the same way for both backends: after a release that released
//! something, every requeue, a requeue of dead tasks that moved any, a recovery that recovered
//! any, and every policy change.
//!
//! When things fail: a validation error is [`StoreError::Invalid`] before any statement runs;
//! a driver error is returned as it is; a failed wake-up is only logged by the driver (agents
//! poll as well, so a lost wake-up delays work, never loses it).

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::resources::{
    GroupName, LockAcquireParams, LockAcquired, LockForceReleaseParams, LockListing,
    ResourceHolderParams, ResourceRecord, ResourceRenewOutcome, ResourceRenewParams,
    ShardAcquireParams, ShardGroupCreateParams, ShardGroupCreated, ShardGroupRecord,
    ShardGroupView, ShardJoinParams,
};
use super::schedules::{
    FireReport, LeaderRecord, ScheduleAddParams, ScheduleAdded, ScheduleEnableParams,
    ScheduleEnabled, ScheduleFireParams, ScheduleListing, ScheduleNameParams, ScheduleRecord,
    ScheduleTriggered,
};
use super::{
    AgentHeartbeatParams, AgentRecord, AgentRegisterParams, AuditEntry, AuditListParams,
    AuditRecord, Blocker, BreakerTickParams, BreakerTransition, CancelOutcome, CancelParams,
    CheckpointParams, ClaimBatch, ClaimParams, CompleteOutcome, CompleteParams, DeadBulkOutcome,
    DeleteOutcome, DeleteTaskParams, DeniedCalls, EnqueueAuditedParams, Enqueued,
    ExpireDeadlinesParams, ExplainParams, HolderWrite, IdleReport, IdleReportParams,
    LeaderElectParams, LeaderOutcome, LeaderRenewParams, LeaderRenewal, NewTask, Overview,
    PolicyChange, PolicySetParams, ProgressParams, PurgeDeadParams, PurgeParams, QueueStats,
    RecentRun, RecentRunsParams, RecoverParams, Recovered, ReleaseOutcome, ReleaseParams,
    RenewOutcome, RenewParams, RequeueDeadParams, RequeueOutcome, RequeueParams, Result,
    RunNowOutcome, RunNowParams, ShedParams, Store, StoreError, SuspectLease, SuspectParams,
    TaskCountParams, TaskCounts, TaskDetail, TaskListParams, TaskPage, UnservedParams,
};
use crate::domain::{AgentId, InputLimits, Policy, PolicyScope, TaskId, TaskType};

/// One backend's primitives: one method per store operation (as [`Store`]'s, taking its input
/// by reference), plus the input limits and the wake-up hook. See the module doc.
#[async_trait]
pub trait Driver: Send + Sync + 'static {
    /// The input limits the backend was opened with.
    fn limits(&self) -> &InputLimits;
    /// Tells waiting agents there may be work to claim (a hint: agents poll as well).
    async fn wake(&self);
    async fn db_now(&self) -> Result<DateTime<Utc>>;

    async fn task_enqueue(&self, task: &NewTask) -> Result<Enqueued>;
    async fn task_enqueue_audited(&self, params: &EnqueueAuditedParams) -> Result<Enqueued>;
    async fn task_enqueue_many(&self, tasks: &[NewTask]) -> Result<Vec<Enqueued>>;
    async fn task_claim(&self, params: &ClaimParams) -> Result<ClaimBatch>;
    async fn lease_renew_many(&self, params: &RenewParams) -> Result<RenewOutcome>;
    async fn task_progress(&self, params: &ProgressParams) -> Result<HolderWrite>;
    async fn task_checkpoint(&self, params: &CheckpointParams) -> Result<HolderWrite>;
    async fn task_complete_many(&self, batch: &[CompleteParams]) -> Result<Vec<CompleteOutcome>>;
    async fn lease_release_many(&self, params: &ReleaseParams) -> Result<ReleaseOutcome>;

    async fn task_cancel(&self, params: &CancelParams) -> Result<CancelOutcome>;
    async fn task_requeue(&self, params: &RequeueParams) -> Result<RequeueOutcome>;
    async fn task_requeue_dead(&self, params: &RequeueDeadParams) -> Result<DeadBulkOutcome>;
    async fn task_purge_dead(&self, params: &PurgeDeadParams) -> Result<DeadBulkOutcome>;
    async fn task_run_now(&self, params: &RunNowParams) -> Result<RunNowOutcome>;
    async fn task_delete(&self, params: &DeleteTaskParams) -> Result<DeleteOutcome>;

    async fn lease_recover_expired(&self, params: &RecoverParams) -> Result<Vec<Recovered>>;
    async fn task_expire_deadlines(&self, params: &ExpireDeadlinesParams) -> Result<Vec<TaskId>>;
    async fn task_shed(&self, params: &ShedParams) -> Result<Vec<(TaskId, TaskType)>>;
    async fn breaker_tick(&self, params: &BreakerTickParams) -> Result<Vec<BreakerTransition>>;
    async fn task_purge_finished(&self, params: &PurgeParams) -> Result<u64>;
    async fn task_dead_letter_unserved(
        &self,
        params: &UnservedParams,
    ) -> Result<Vec<(TaskId, TaskType)>>;
    async fn task_count_claimable(&self, task_types: &[TaskType]) -> Result<u64>;
    async fn task_recent_runs(&self, params: &RecentRunsParams) -> Result<Vec<RecentRun>>;
    async fn task_idle_report(&self, params: &IdleReportParams) -> Result<IdleReport>;
    async fn lease_list_suspect(&self, params: &SuspectParams) -> Result<Vec<SuspectLease>>;

    async fn policy_list(&self) -> Result<Vec<Policy>>;
    async fn policy_change(&self, params: &PolicySetParams) -> Result<PolicyChange>;

    async fn agent_register(&self, params: &AgentRegisterParams) -> Result<AgentRecord>;
    async fn agent_heartbeat(&self, params: &AgentHeartbeatParams) -> Result<bool>;
    async fn agent_list(&self) -> Result<Vec<AgentRecord>>;
    async fn agent_mark_stopped(&self, id: &AgentId) -> Result<()>;

    async fn leader_attempt_elect(&self, params: &LeaderElectParams) -> Result<LeaderOutcome>;
    async fn leader_renew(&self, params: &LeaderRenewParams) -> Result<LeaderRenewal>;
    async fn leader_resign(&self, owner: &AgentId, term: i64) -> Result<HolderWrite>;
    async fn leader_get(&self) -> Result<Option<LeaderRecord>>;

    async fn schedule_list(&self) -> Result<ScheduleListing>;
    async fn schedule_add(&self, params: &ScheduleAddParams) -> Result<ScheduleAdded>;
    async fn schedule_remove(&self, params: &ScheduleNameParams) -> Result<Option<ScheduleRecord>>;
    async fn schedule_set_enabled(&self, params: &ScheduleEnableParams) -> Result<ScheduleEnabled>;
    async fn schedule_trigger(&self, params: &ScheduleNameParams) -> Result<ScheduleTriggered>;
    async fn schedule_fire_due(&self, params: &ScheduleFireParams) -> Result<FireReport>;

    async fn lock_acquire(&self, params: &LockAcquireParams) -> Result<LockAcquired>;
    async fn resource_renew(&self, params: &ResourceHolderParams)
    -> Result<Option<ResourceRecord>>;
    async fn resource_release(
        &self,
        params: &ResourceHolderParams,
    ) -> Result<Option<ResourceRecord>>;
    async fn lock_force_release(&self, params: &LockForceReleaseParams) -> Result<ResourceRecord>;
    async fn lock_list(&self) -> Result<LockListing>;
    async fn resource_renew_many(
        &self,
        params: &ResourceRenewParams,
    ) -> Result<ResourceRenewOutcome>;
    async fn shard_group_create(
        &self,
        params: &ShardGroupCreateParams,
    ) -> Result<ShardGroupCreated>;
    async fn shard_group_list(
        &self,
        grace: Duration,
    ) -> Result<(Vec<ShardGroupRecord>, DateTime<Utc>)>;
    async fn shard_group_get(
        &self,
        group: &GroupName,
        grace: Duration,
    ) -> Result<Option<ShardGroupView>>;
    async fn shard_join(&self, params: &ShardJoinParams) -> Result<()>;
    async fn shard_leave(&self, group: &GroupName, member: &AgentId) -> Result<()>;
    async fn shard_acquire(&self, params: &ShardAcquireParams) -> Result<Option<i64>>;
    async fn resource_history_prune(&self, older_than: Duration) -> Result<u64>;

    async fn audit_record(&self, entry: &AuditEntry) -> Result<()>;
    async fn audit_record_denied(&self, calls: &DeniedCalls) -> Result<()>;
    async fn audit_list(&self, params: &AuditListParams) -> Result<Vec<AuditRecord>>;

    async fn task_list(&self, params: &TaskListParams) -> Result<TaskPage>;
    async fn task_get(&self, id: TaskId) -> Result<Option<TaskDetail>>;
    async fn task_explain(&self, params: &ExplainParams) -> Result<Vec<Blocker>>;
    async fn task_count_states(&self, params: &TaskCountParams) -> Result<TaskCounts>;
    async fn task_overview(&self) -> Result<Overview>;

    /// How many migrations the database applied, and how many this build knows (for the
    /// tools, through [`AnyStore`](super::AnyStore); not a [`Store`] operation).
    async fn migrations_applied(&self) -> Result<(usize, usize)>;
    async fn queue_history_sample(
        &self,
        params: &super::HistorySampleParams,
    ) -> Result<super::HistorySample>;
    async fn queue_history_read(
        &self,
        params: &super::HistoryReadParams,
    ) -> Result<super::QueueHistory>;
    async fn queue_history_prune(&self, params: &super::HistoryPruneParams) -> Result<u64>;
    /// Deletes every task of `task_type`, whatever its status (for the tools, as above).
    async fn task_delete_of_type(&self, task_type: &TaskType) -> Result<u64>;

    async fn task_stats(&self) -> Result<QueueStats>;
}

mod generate;
#[cfg(test)]
mod tests;

pub(crate) use generate::impl_driver;

/// The one [`Store`]: validation, derived operations and wake-ups over any [`Driver`].
#[async_trait]
impl<D: Driver> Store for D {
    fn input_limits(&self) -> &InputLimits {
        Driver::limits(self)
    }

    async fn db_now(&self) -> Result<DateTime<Utc>> {
        Driver::db_now(self).await
    }

    async fn task_enqueue(&self, task: NewTask) -> Result<Enqueued> {
        Driver::task_enqueue(self, &task).await
    }

    async fn task_enqueue_audited(&self, params: EnqueueAuditedParams) -> Result<Enqueued> {
        Driver::task_enqueue_audited(self, &params).await
    }

    async fn task_enqueue_many(&self, tasks: Vec<NewTask>) -> Result<Vec<Enqueued>> {
        Driver::task_enqueue_many(self, &tasks).await
    }

    async fn task_claim(&self, params: ClaimParams) -> Result<ClaimBatch> {
        Driver::task_claim(self, &params).await
    }

    async fn lease_renew_many(&self, params: RenewParams) -> Result<RenewOutcome> {
        Driver::lease_renew_many(self, &params).await
    }

    async fn task_progress(&self, params: ProgressParams) -> Result<HolderWrite> {
        Driver::task_progress(self, &params).await
    }

    async fn task_checkpoint(&self, params: CheckpointParams) -> Result<HolderWrite> {
        params.validate()?;
        Driver::task_checkpoint(self, &params).await
    }

    async fn task_complete(&self, params: CompleteParams) -> Result<CompleteOutcome> {
        params.validate()?;
        let mut outcomes = Driver::task_complete_many(self, std::slice::from_ref(&params)).await?;
        outcomes.pop().ok_or_else(|| StoreError::Corrupt {
            what: "completion",
            detail: "no result".into(),
        })
    }

    async fn task_complete_many(&self, batch: Vec<CompleteParams>) -> Result<Vec<CompleteOutcome>> {
        super::lifecycle::check_completions(&batch)?;
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        Driver::task_complete_many(self, &batch).await
    }

    async fn lease_release_many(&self, params: ReleaseParams) -> Result<ReleaseOutcome> {
        let outcome = Driver::lease_release_many(self, &params).await?;
        if !outcome.released.is_empty() {
            self.wake().await;
        }
        Ok(outcome)
    }

    async fn task_cancel(&self, params: CancelParams) -> Result<CancelOutcome> {
        Driver::task_cancel(self, &params).await
    }

    async fn task_requeue(&self, params: RequeueParams) -> Result<RequeueOutcome> {
        let outcome = Driver::task_requeue(self, &params).await?;
        self.wake().await;
        Ok(outcome)
    }

    async fn task_requeue_dead(&self, params: RequeueDeadParams) -> Result<DeadBulkOutcome> {
        let outcome = Driver::task_requeue_dead(self, &params).await?;
        if outcome.count > 0 && !params.dry_run {
            self.wake().await;
        }
        Ok(outcome)
    }

    async fn task_purge_dead(&self, params: PurgeDeadParams) -> Result<DeadBulkOutcome> {
        Driver::task_purge_dead(self, &params).await
    }

    async fn task_run_now(&self, params: RunNowParams) -> Result<RunNowOutcome> {
        let outcome = Driver::task_run_now(self, &params).await?;
        if outcome.moved {
            self.wake().await;
        }
        Ok(outcome)
    }

    async fn task_delete(&self, params: DeleteTaskParams) -> Result<DeleteOutcome> {
        Driver::task_delete(self, &params).await
    }

    async fn lease_recover_expired(&self, params: RecoverParams) -> Result<Vec<Recovered>> {
        params.validate()?;
        let recovered = Driver::lease_recover_expired(self, &params).await?;
        if !recovered.is_empty() {
            self.wake().await;
        }
        Ok(recovered)
    }

    async fn task_expire_deadlines(&self, params: ExpireDeadlinesParams) -> Result<Vec<TaskId>> {
        params.validate()?;
        Driver::task_expire_deadlines(self, &params).await
    }

    async fn task_shed(&self, params: ShedParams) -> Result<Vec<(TaskId, TaskType)>> {
        params.validate()?;
        Driver::task_shed(self, &params).await
    }

    async fn breaker_tick(&self, params: BreakerTickParams) -> Result<Vec<BreakerTransition>> {
        Driver::breaker_tick(self, &params).await
    }

    async fn task_purge_finished(&self, params: PurgeParams) -> Result<u64> {
        params.validate()?;
        Driver::task_purge_finished(self, &params).await
    }

    async fn task_dead_letter_unserved(
        &self,
        params: UnservedParams,
    ) -> Result<Vec<(TaskId, TaskType)>> {
        params.validate()?;
        Driver::task_dead_letter_unserved(self, &params).await
    }

    async fn task_count_claimable(&self, task_types: Vec<TaskType>) -> Result<u64> {
        Driver::task_count_claimable(self, &task_types).await
    }

    async fn task_recent_runs(&self, params: RecentRunsParams) -> Result<Vec<RecentRun>> {
        params.validate()?;
        let mut runs = Driver::task_recent_runs(self, &params).await?;
        // The backend returns every success in the scan, newest first (a per-type limit in
        // SQL costs a sort of the whole scan); the newest `per_type` of each are kept here.
        let mut kept: std::collections::HashMap<TaskType, u32> = Default::default();
        runs.retain(|r| {
            let n = kept.entry(r.task_type.clone()).or_default();
            *n += 1;
            *n <= params.per_type
        });
        Ok(runs)
    }

    async fn task_idle_report(&self, params: IdleReportParams) -> Result<IdleReport> {
        params.validate()?;
        Driver::task_idle_report(self, &params).await
    }

    async fn lease_list_suspect(&self, params: SuspectParams) -> Result<Vec<SuspectLease>> {
        params.validate()?;
        Driver::lease_list_suspect(self, &params).await
    }

    async fn policy_list(&self) -> Result<Vec<Policy>> {
        Driver::policy_list(self).await
    }

    async fn policy_get(&self, scope: PolicyScope) -> Result<Policy> {
        let all = Driver::policy_list(self).await?;
        Ok(all
            .into_iter()
            .find(|p| p.scope == scope)
            .unwrap_or_else(|| Policy::inherit(scope)))
    }

    async fn policy_change(&self, params: PolicySetParams) -> Result<PolicyChange> {
        let change = Driver::policy_change(self, &params).await?;
        self.wake().await;
        Ok(change)
    }

    async fn agent_register(&self, params: AgentRegisterParams) -> Result<AgentRecord> {
        params.validate()?;
        Driver::agent_register(self, &params).await
    }

    async fn agent_heartbeat(&self, params: AgentHeartbeatParams) -> Result<bool> {
        Driver::agent_heartbeat(self, &params).await
    }

    async fn agent_list(&self) -> Result<Vec<AgentRecord>> {
        Driver::agent_list(self).await
    }

    async fn agent_mark_stopped(&self, id: AgentId) -> Result<()> {
        Driver::agent_mark_stopped(self, &id).await
    }

    async fn leader_attempt_elect(&self, params: LeaderElectParams) -> Result<LeaderOutcome> {
        Driver::leader_attempt_elect(self, &params).await
    }

    async fn leader_renew(&self, params: LeaderRenewParams) -> Result<LeaderRenewal> {
        Driver::leader_renew(self, &params).await
    }

    async fn leader_resign(&self, owner: AgentId, term: i64) -> Result<HolderWrite> {
        Driver::leader_resign(self, &owner, term).await
    }

    async fn leader_get(&self) -> Result<Option<LeaderRecord>> {
        Driver::leader_get(self).await
    }

    async fn schedule_list(&self) -> Result<ScheduleListing> {
        Driver::schedule_list(self).await
    }

    async fn schedule_add(&self, params: ScheduleAddParams) -> Result<ScheduleAdded> {
        Driver::schedule_add(self, &params).await
    }

    async fn schedule_remove(&self, params: ScheduleNameParams) -> Result<Option<ScheduleRecord>> {
        Driver::schedule_remove(self, &params).await
    }

    async fn schedule_set_enabled(&self, params: ScheduleEnableParams) -> Result<ScheduleEnabled> {
        Driver::schedule_set_enabled(self, &params).await
    }

    async fn schedule_trigger(&self, params: ScheduleNameParams) -> Result<ScheduleTriggered> {
        Driver::schedule_trigger(self, &params).await
    }

    async fn schedule_fire_due(&self, params: ScheduleFireParams) -> Result<FireReport> {
        Driver::schedule_fire_due(self, &params).await
    }

    async fn lock_acquire(&self, params: LockAcquireParams) -> Result<LockAcquired> {
        Driver::lock_acquire(self, &params).await
    }

    async fn resource_renew(&self, params: ResourceHolderParams) -> Result<Option<ResourceRecord>> {
        Driver::resource_renew(self, &params).await
    }

    async fn resource_release(
        &self,
        params: ResourceHolderParams,
    ) -> Result<Option<ResourceRecord>> {
        Driver::resource_release(self, &params).await
    }

    async fn lock_force_release(&self, params: LockForceReleaseParams) -> Result<ResourceRecord> {
        Driver::lock_force_release(self, &params).await
    }

    async fn lock_list(&self) -> Result<LockListing> {
        Driver::lock_list(self).await
    }

    async fn resource_renew_many(
        &self,
        params: ResourceRenewParams,
    ) -> Result<ResourceRenewOutcome> {
        Driver::resource_renew_many(self, &params).await
    }

    async fn shard_group_create(
        &self,
        params: ShardGroupCreateParams,
    ) -> Result<ShardGroupCreated> {
        Driver::shard_group_create(self, &params).await
    }

    async fn shard_group_list(
        &self,
        grace: Duration,
    ) -> Result<(Vec<ShardGroupRecord>, DateTime<Utc>)> {
        Driver::shard_group_list(self, grace).await
    }

    async fn shard_group_get(
        &self,
        group: GroupName,
        grace: Duration,
    ) -> Result<Option<ShardGroupView>> {
        Driver::shard_group_get(self, &group, grace).await
    }

    async fn shard_join(&self, params: ShardJoinParams) -> Result<()> {
        Driver::shard_join(self, &params).await
    }

    async fn shard_leave(&self, group: GroupName, member: AgentId) -> Result<()> {
        Driver::shard_leave(self, &group, &member).await
    }

    async fn shard_acquire(&self, params: ShardAcquireParams) -> Result<Option<i64>> {
        Driver::shard_acquire(self, &params).await
    }

    async fn resource_history_prune(&self, older_than: Duration) -> Result<u64> {
        Driver::resource_history_prune(self, older_than).await
    }

    async fn audit_record(&self, entry: AuditEntry) -> Result<()> {
        Driver::audit_record(self, &entry).await
    }

    async fn audit_record_denied(&self, calls: DeniedCalls) -> Result<()> {
        Driver::audit_record_denied(self, &calls).await
    }

    async fn audit_list(&self, params: AuditListParams) -> Result<Vec<AuditRecord>> {
        params.validate()?;
        Driver::audit_list(self, &params).await
    }

    async fn task_list(&self, params: TaskListParams) -> Result<TaskPage> {
        params.validate()?;
        Driver::task_list(self, &params).await
    }

    async fn task_get(&self, id: TaskId) -> Result<Option<TaskDetail>> {
        Driver::task_get(self, id).await
    }

    async fn task_explain(&self, params: ExplainParams) -> Result<Vec<Blocker>> {
        params.validate()?;
        Driver::task_explain(self, &params).await
    }

    async fn task_count_states(&self, params: TaskCountParams) -> Result<TaskCounts> {
        params.validate()?;
        Driver::task_count_states(self, &params).await
    }

    async fn task_overview(&self) -> Result<Overview> {
        Driver::task_overview(self).await
    }
    async fn task_stats(&self) -> Result<QueueStats> {
        Driver::task_stats(self).await
    }

    async fn queue_history_sample(
        &self,
        params: super::HistorySampleParams,
    ) -> Result<super::HistorySample> {
        params.validate()?;
        Driver::queue_history_sample(self, &params).await
    }

    async fn queue_history_read(
        &self,
        params: super::HistoryReadParams,
    ) -> Result<super::QueueHistory> {
        params.validate()?;
        Driver::queue_history_read(self, &params).await
    }

    async fn queue_history_prune(&self, params: super::HistoryPruneParams) -> Result<u64> {
        params.validate()?;
        Driver::queue_history_prune(self, &params).await
    }
}
