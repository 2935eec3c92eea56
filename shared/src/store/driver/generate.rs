//! [`impl_driver!`]: a backend's [`Driver`](super::Driver) impl, generated, so that the
//! forwarding from each operation to the backend function that runs it is written once for
//! every backend. A backend only lists, in its `ops` module, which function runs which
//! operation (renaming where its area file names it otherwise).

/// Implements [`Driver`](super::Driver) for a backend store `$store` with fields `pool`,
/// `limits` and `key_cursors`, whose module has an `ops` module holding, under each operation's name, a function
/// taking the pool first (and, for enqueues and schedule firing, the limits last), plus
/// `ops::wake(&pool)`.
macro_rules! impl_driver {
    ($store:ty) => {
        const _: () = {
            use std::time::Duration;

            use chrono::{DateTime, Utc};

            use $crate::domain::{AgentId, InputLimits, Policy, TaskId, TaskType};
            use $crate::store::*;

            #[async_trait::async_trait]
            impl $crate::store::driver::Driver for $store {
                fn limits(&self) -> &InputLimits {
                    &self.limits
                }
                async fn wake(&self) {
                    ops::wake(&self.pool).await
                }
                async fn db_now(&self) -> Result<DateTime<Utc>> {
                    ops::db_now(&self.pool).await
                }
                async fn task_enqueue(&self, task: &NewTask) -> Result<Enqueued> {
                    $crate::store::error::retry_partition_race(|| {
                        ops::task_enqueue(&self.pool, task, &self.limits)
                    })
                    .await
                }
                async fn task_enqueue_audited(&self, p: &EnqueueAuditedParams) -> Result<Enqueued> {
                    $crate::store::error::retry_partition_race(|| {
                        ops::task_enqueue_audited(&self.pool, p, &self.limits)
                    })
                    .await
                }
                async fn task_enqueue_many(&self, tasks: &[NewTask]) -> Result<Vec<Enqueued>> {
                    $crate::store::error::retry_partition_race(|| {
                        ops::task_enqueue_many(&self.pool, tasks, &self.limits)
                    })
                    .await
                }
                async fn task_claim(&self, p: &ClaimParams) -> Result<ClaimBatch> {
                    $crate::store::error::retry_partition_race_runs(
                        $crate::store::error::CLAIM_PARTITION_RACE_RUNS,
                        || ops::task_claim(&self.pool, p, &self.key_cursors),
                    )
                    .await
                }
                async fn lease_renew_many(&self, p: &RenewParams) -> Result<RenewOutcome> {
                    $crate::store::error::retry_partition_race(|| {
                        ops::lease_renew_many(&self.pool, p)
                    })
                    .await
                }
                async fn task_progress(&self, p: &ProgressParams) -> Result<HolderWrite> {
                    $crate::store::error::retry_partition_race(|| ops::task_progress(&self.pool, p))
                        .await
                }
                async fn task_checkpoint(&self, p: &CheckpointParams) -> Result<HolderWrite> {
                    $crate::store::error::retry_partition_race(|| {
                        ops::task_checkpoint(&self.pool, p)
                    })
                    .await
                }
                async fn task_complete_many(
                    &self,
                    batch: &[CompleteParams],
                ) -> Result<Vec<CompleteOutcome>> {
                    $crate::store::error::retry_partition_race(|| {
                        ops::task_complete_many(&self.pool, batch)
                    })
                    .await
                }
                async fn lease_release_many(&self, p: &ReleaseParams) -> Result<ReleaseOutcome> {
                    $crate::store::error::retry_partition_race(|| {
                        ops::lease_release_many(&self.pool, p)
                    })
                    .await
                }
                async fn task_cancel(&self, p: &CancelParams) -> Result<CancelOutcome> {
                    $crate::store::error::retry_partition_race(|| ops::task_cancel(&self.pool, p))
                        .await
                }
                async fn task_requeue(&self, p: &RequeueParams) -> Result<RequeueOutcome> {
                    $crate::store::error::retry_partition_race(|| ops::task_requeue(&self.pool, p))
                        .await
                }
                async fn task_requeue_dead(
                    &self,
                    p: &RequeueDeadParams,
                ) -> Result<DeadBulkOutcome> {
                    $crate::store::error::retry_partition_race(|| {
                        ops::task_requeue_dead(&self.pool, p)
                    })
                    .await
                }
                async fn task_purge_dead(&self, p: &PurgeDeadParams) -> Result<DeadBulkOutcome> {
                    $crate::store::error::retry_partition_race(|| {
                        ops::task_purge_dead(&self.pool, p)
                    })
                    .await
                }
                async fn task_run_now(&self, p: &RunNowParams) -> Result<RunNowOutcome> {
                    $crate::store::error::retry_partition_race(|| ops::task_run_now(&self.pool, p))
                        .await
                }
                async fn task_delete(&self, p: &DeleteTaskParams) -> Result<DeleteOutcome> {
                    $crate::store::error::retry_partition_race(|| ops::task_delete(&self.pool, p))
                        .await
                }
                async fn lease_recover_expired(&self, p: &RecoverParams) -> Result<Vec<Recovered>> {
                    $crate::store::error::retry_partition_race(|| {
                        ops::lease_recover_expired(&self.pool, p)
                    })
                    .await
                }
                async fn task_expire_deadlines(
                    &self,
                    p: &ExpireDeadlinesParams,
                ) -> Result<Vec<TaskId>> {
                    $crate::store::error::retry_partition_race(|| {
                        ops::task_expire_deadlines(&self.pool, p)
                    })
                    .await
                }
                async fn task_shed(&self, p: &ShedParams) -> Result<Vec<(TaskId, TaskType)>> {
                    $crate::store::error::retry_partition_race(|| ops::task_shed(&self.pool, p))
                        .await
                }
                async fn breaker_tick(
                    &self,
                    p: &BreakerTickParams,
                ) -> Result<Vec<BreakerTransition>> {
                    ops::breaker_tick(&self.pool, p).await
                }
                async fn task_purge_finished(&self, p: &PurgeParams) -> Result<u64> {
                    $crate::store::error::retry_partition_race(|| {
                        ops::task_purge_finished(&self.pool, p)
                    })
                    .await
                }
                async fn task_dead_letter_unserved(
                    &self,
                    p: &UnservedParams,
                ) -> Result<Vec<(TaskId, TaskType)>> {
                    $crate::store::error::retry_partition_race(|| {
                        ops::task_dead_letter_unserved(&self.pool, p)
                    })
                    .await
                }
                async fn task_count_claimable(&self, task_types: &[TaskType]) -> Result<u64> {
                    ops::task_count_claimable(&self.pool, task_types).await
                }
                async fn task_recent_runs(&self, p: &RecentRunsParams) -> Result<Vec<RecentRun>> {
                    ops::task_recent_runs(&self.pool, p).await
                }
                async fn task_idle_report(&self, p: &IdleReportParams) -> Result<IdleReport> {
                    ops::task_idle_report(&self.pool, p).await
                }
                async fn lease_list_suspect(&self, p: &SuspectParams) -> Result<Vec<SuspectLease>> {
                    ops::lease_list_suspect(&self.pool, p).await
                }
                async fn policy_list(&self) -> Result<Vec<Policy>> {
                    ops::policy_list(&self.pool).await
                }
                async fn policy_change(&self, p: &PolicySetParams) -> Result<PolicyChange> {
                    ops::policy_change(&self.pool, p).await
                }
                async fn agent_register(&self, p: &AgentRegisterParams) -> Result<AgentRecord> {
                    ops::agent_register(&self.pool, p).await
                }
                async fn agent_heartbeat(&self, p: &AgentHeartbeatParams) -> Result<bool> {
                    ops::agent_heartbeat(&self.pool, p).await
                }
                async fn agent_list(&self) -> Result<Vec<AgentRecord>> {
                    ops::agent_list(&self.pool).await
                }
                async fn agent_mark_stopped(&self, id: &AgentId) -> Result<()> {
                    ops::agent_mark_stopped(&self.pool, id).await
                }
                async fn leader_attempt_elect(
                    &self,
                    p: &LeaderElectParams,
                ) -> Result<LeaderOutcome> {
                    ops::leader_attempt_elect(&self.pool, p).await
                }
                async fn leader_renew(&self, p: &LeaderRenewParams) -> Result<LeaderRenewal> {
                    ops::leader_renew(&self.pool, p).await
                }
                async fn leader_resign(&self, owner: &AgentId, term: i64) -> Result<HolderWrite> {
                    ops::leader_resign(&self.pool, owner, term).await
                }
                async fn leader_get(&self) -> Result<Option<LeaderRecord>> {
                    ops::leader_get(&self.pool).await
                }
                async fn schedule_list(&self) -> Result<ScheduleListing> {
                    ops::schedule_list(&self.pool).await
                }
                async fn schedule_add(&self, p: &ScheduleAddParams) -> Result<ScheduleAdded> {
                    ops::schedule_add(&self.pool, p).await
                }
                async fn schedule_remove(
                    &self,
                    p: &ScheduleNameParams,
                ) -> Result<Option<ScheduleRecord>> {
                    ops::schedule_remove(&self.pool, p).await
                }
                async fn schedule_set_enabled(
                    &self,
                    p: &ScheduleEnableParams,
                ) -> Result<ScheduleEnabled> {
                    ops::schedule_set_enabled(&self.pool, p).await
                }
                async fn schedule_trigger(
                    &self,
                    p: &ScheduleNameParams,
                ) -> Result<ScheduleTriggered> {
                    $crate::store::error::retry_partition_race(|| {
                        ops::schedule_trigger(&self.pool, p, &self.limits)
                    })
                    .await
                }
                async fn schedule_fire_due(&self, p: &ScheduleFireParams) -> Result<FireReport> {
                    $crate::store::error::retry_partition_race(|| {
                        ops::schedule_fire_due(&self.pool, p, &self.limits)
                    })
                    .await
                }
                async fn lock_acquire(&self, p: &LockAcquireParams) -> Result<LockAcquired> {
                    ops::lock_acquire(&self.pool, p).await
                }
                async fn resource_renew(
                    &self,
                    p: &ResourceHolderParams,
                ) -> Result<Option<ResourceRecord>> {
                    ops::resource_renew(&self.pool, p).await
                }
                async fn resource_release(
                    &self,
                    p: &ResourceHolderParams,
                ) -> Result<Option<ResourceRecord>> {
                    ops::resource_release(&self.pool, p).await
                }
                async fn lock_force_release(
                    &self,
                    p: &LockForceReleaseParams,
                ) -> Result<ResourceRecord> {
                    ops::lock_force_release(&self.pool, p).await
                }
                async fn lock_list(&self) -> Result<LockListing> {
                    ops::lock_list(&self.pool).await
                }
                async fn resource_renew_many(
                    &self,
                    p: &ResourceRenewParams,
                ) -> Result<ResourceRenewOutcome> {
                    ops::resource_renew_many(&self.pool, p).await
                }
                async fn shard_group_create(
                    &self,
                    p: &ShardGroupCreateParams,
                ) -> Result<ShardGroupCreated> {
                    ops::shard_group_create(&self.pool, p).await
                }
                async fn shard_group_list(
                    &self,
                    grace: Duration,
                ) -> Result<(Vec<ShardGroupRecord>, DateTime<Utc>)> {
                    ops::shard_group_list(&self.pool, grace).await
                }
                async fn shard_group_get(
                    &self,
                    group: &GroupName,
                    grace: Duration,
                ) -> Result<Option<ShardGroupView>> {
                    ops::shard_group_get(&self.pool, group, grace).await
                }
                async fn shard_join(&self, p: &ShardJoinParams) -> Result<()> {
                    ops::shard_join(&self.pool, p).await
                }
                async fn shard_leave(&self, group: &GroupName, member: &AgentId) -> Result<()> {
                    ops::shard_leave(&self.pool, group, member).await
                }
                async fn shard_acquire(&self, p: &ShardAcquireParams) -> Result<Option<i64>> {
                    ops::shard_acquire(&self.pool, p).await
                }
                async fn resource_history_prune(&self, older_than: Duration) -> Result<u64> {
                    ops::resource_history_prune(&self.pool, older_than).await
                }
                async fn audit_record(&self, entry: &AuditEntry) -> Result<()> {
                    ops::audit_record(&self.pool, entry).await
                }
                async fn audit_record_denied(&self, calls: &DeniedCalls) -> Result<()> {
                    ops::audit_record_denied(&self.pool, calls).await
                }
                async fn audit_list(&self, p: &AuditListParams) -> Result<Vec<AuditRecord>> {
                    ops::audit_list(&self.pool, p).await
                }
                async fn task_list(&self, p: &TaskListParams) -> Result<TaskPage> {
                    ops::task_list(&self.pool, p).await
                }
                async fn task_get(&self, id: TaskId) -> Result<Option<TaskDetail>> {
                    ops::task_get(&self.pool, id).await
                }
                async fn task_explain(&self, p: &ExplainParams) -> Result<Vec<Blocker>> {
                    ops::task_explain(&self.pool, p).await
                }
                async fn task_count_states(&self, p: &TaskCountParams) -> Result<TaskCounts> {
                    ops::task_count_states(&self.pool, p).await
                }
                async fn task_overview(&self) -> Result<Overview> {
                    ops::task_overview(&self.pool).await
                }
                async fn migrations_applied(&self) -> Result<(usize, usize)> {
                    ops::migrations_applied(&self.pool).await
                }
                async fn queue_history_sample(
                    &self,
                    p: &$crate::store::HistorySampleParams,
                ) -> Result<$crate::store::HistorySample> {
                    ops::queue_history_sample(&self.pool, p).await
                }
                async fn queue_history_read(
                    &self,
                    p: &$crate::store::HistoryReadParams,
                ) -> Result<$crate::store::QueueHistory> {
                    ops::queue_history_read(&self.pool, p).await
                }
                async fn queue_history_prune(
                    &self,
                    p: &$crate::store::HistoryPruneParams,
                ) -> Result<u64> {
                    ops::queue_history_prune(&self.pool, p).await
                }
                async fn task_delete_of_type(&self, task_type: &TaskType) -> Result<u64> {
                    $crate::store::error::retry_partition_race(|| {
                        ops::task_delete_of_type(&self.pool, task_type)
                    })
                    .await
                }
                async fn task_stats(&self) -> Result<QueueStats> {
                    ops::task_stats(&self.pool).await
                }
            }
        };
    };
}
pub(crate) use impl_driver;
