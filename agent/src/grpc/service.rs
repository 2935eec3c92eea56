//! `leasehold.v1.AgentService`: the RPC handlers. Each one authenticates the caller, validates
//! the request into domain types (bad input changes nothing), calls the store (actions write
//! their audit row in the same transaction as their change) and converts the answer.
//!
//! Denied calls — no token, an unknown token, a viewer calling an action — are audited with
//! result `denied` (aggregated per peer, actor and action: [`super::denials`]) and change
//! nothing else.
//!
//! This file holds the [`Service`], what every handler shares (the caller check, the audit
//! row) and the one `AgentService` impl tonic needs, a thin dispatcher: the handlers live by
//! what they do in the sibling modules — reads (`reads.rs`), task and agent actions
//! (`actions.rs`), policy (`policy.rs`), schedules ([`super::schedules`]), locks and shards
//! ([`super::resources`]), the audit log ([`super::audit`]) and suspect leases
//! ([`super::suspect`]) and the queue stats ([`super::stats`]).

use std::pin::Pin;
use std::sync::Arc;

use futures_util::Stream;
use leasehold_proto::v1 as pb;
use leasehold_proto::v1::agent_service_server::AgentService;
use leasehold_shared::domain::AuditResult;
use leasehold_shared::store::AuditEntry;
use leasehold_shared::{Actor, Role};
use tonic::{Request, Response, Status};

use super::auth::Auth;
use super::denials::{Denials, UNKNOWN_PEER};
use super::hub::HubHandle;
use super::overview::OverviewCache;
use super::peer::Peer;
use super::reads::CountCache;
use super::stats::StatsCache;
use super::status::from_store;
use crate::runtime::core::Core;

pub use super::actions::MAX_CANCEL_WAIT;
pub use super::policy::{LOCAL_LIMIT_ACTION, MAX_LOCAL_CONCURRENCY, POLICY_ACTION};

/// Longest target (in characters) of the audit row of a refused call.
pub const MAX_DENIED_TARGET_CHARS: usize = 200;

/// The target of a refused call's audit row, from unvalidated input: control characters
/// escaped (PostgreSQL text cannot hold NUL, and the row must still be written) and cut to
/// [`MAX_DENIED_TARGET_CHARS`], so a caller without a valid token cannot write arbitrary text
/// into the audit log.
fn denied_target(raw: &str) -> String {
    let mut out = String::new();
    for (n, c) in raw.chars().enumerate() {
        if n == MAX_DENIED_TARGET_CHARS {
            out.push('…');
            break;
        }
        if c.is_control() {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    out
}

/// The service of one agent.
pub struct Service {
    pub(crate) core: Arc<Core>,
    pub(crate) hub: HubHandle,
    pub(crate) auth: Arc<Auth>,
    pub(crate) overview: Arc<OverviewCache>,
    /// The last `GetStats` answer (at most one stats query a second).
    pub(crate) stats: Arc<StatsCache>,
    /// The last `CountTasks` answer of each filter, kept while its read was slow (a deep queue).
    pub(crate) counts: Arc<CountCache>,
    /// Where refused actions are counted and audited.
    pub(crate) denials: Arc<Denials>,
}

impl Service {
    /// After an action that may change tasks or policies: the cached answers of the overview,
    /// the stats and the Tasks view's counts are dropped, so the caller's next poll reads what it
    /// did (however slow the read, see `read_cache.rs`). Other agents' caches keep theirs until
    /// they expire.
    fn reads_changed(&self) {
        self.overview.clear();
        self.stats.clear();
        self.counts.clear();
    }
}

/// What a call needs.
pub(super) enum Need<'a> {
    View,
    Act { action: &'a str, target: String },
}

impl Service {
    /// The caller, allowed to do what the call needs (see [`Auth::authenticate`] for who is
    /// who); a refused action is audited through the aggregation of denied calls
    /// ([`Denials`]): the first of its peer, actor and action in a minute at once, the rest
    /// counted into one row.
    pub(super) async fn caller<T>(
        &self,
        request: &Request<T>,
        need: Need<'_>,
    ) -> Result<Actor, Status> {
        let peer = Peer::of(request);
        let (actor, status) = match self.auth.authenticate(request.metadata(), peer.as_ref()) {
            Ok(caller) => match (&need, caller.actor.role) {
                (Need::View, _) | (Need::Act { .. }, Role::Operator) => return Ok(caller.actor),
                (Need::Act { action, .. }, _) => {
                    let status = caller.refusal(action);
                    (caller.actor, status)
                }
            },
            Err(rejected) => (
                Actor {
                    name: rejected.actor,
                    role: Role::Viewer,
                },
                rejected.status,
            ),
        };
        let mut first = true;
        if let Need::Act { action, target } = need {
            let entry = AuditEntry {
                actor,
                action: action.to_string(),
                // The target may be what a bad request carried: keep the row small and
                // storable (no NUL).
                target: denied_target(&target),
                params: None,
                result: AuditResult::Denied,
                detail: Some(status.message().chars().take(500).collect()),
            };
            first = self.denials.record(peer.as_ref(), entry).await;
        }
        let peer = peer
            .as_ref()
            .map_or_else(|| UNKNOWN_PEER.to_string(), Peer::label);
        if first {
            tracing::warn!(code = ?status.code(), message = status.message(), peer, "call refused");
        } else {
            // A repeat within its window: counted, not logged at warn (a flood must not fill
            // the log either).
            tracing::debug!(code = ?status.code(), peer, "call refused again");
        }
        Err(status)
    }

    /// Writes an audit row this handler records itself (the store writes the others).
    pub(super) async fn audit(&self, entry: AuditEntry) -> Result<(), Status> {
        self.core
            .store
            .audit_record(entry)
            .await
            .map_err(|e| from_store("audit", e))
    }
}

type WatchStream = Pin<Box<dyn Stream<Item = Result<pb::WatchUpdate, Status>> + Send + 'static>>;

#[tonic::async_trait]
impl AgentService for Service {
    type WatchStream = WatchStream;

    async fn watch(
        &self,
        request: Request<pb::WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let actor = self.caller(&request, Need::View).await?;
        let stream = self.hub.subscribe(&actor).await?;
        Ok(Response::new(Box::pin(stream)))
    }

    async fn list_tasks(
        &self,
        request: Request<pb::ListTasksRequest>,
    ) -> Result<Response<pb::ListTasksResponse>, Status> {
        self.list_tasks_rpc(request).await
    }

    async fn get_task(
        &self,
        request: Request<pb::GetTaskRequest>,
    ) -> Result<Response<pb::GetTaskResponse>, Status> {
        self.get_task_rpc(request).await
    }

    async fn list_agents(
        &self,
        request: Request<pb::ListAgentsRequest>,
    ) -> Result<Response<pb::ListAgentsResponse>, Status> {
        self.list_agents_rpc(request).await
    }

    async fn get_overview(
        &self,
        request: Request<pb::GetOverviewRequest>,
    ) -> Result<Response<pb::GetOverviewResponse>, Status> {
        self.get_overview_rpc(request).await
    }

    async fn enqueue(
        &self,
        request: Request<pb::EnqueueRequest>,
    ) -> Result<Response<pb::EnqueueResponse>, Status> {
        let reply = self.enqueue_rpc(request).await;
        self.reads_changed();
        reply
    }

    async fn cancel(
        &self,
        request: Request<pb::CancelRequest>,
    ) -> Result<Response<pb::CancelResponse>, Status> {
        let reply = self.cancel_rpc(request).await;
        self.reads_changed();
        reply
    }

    async fn requeue(
        &self,
        request: Request<pb::RequeueRequest>,
    ) -> Result<Response<pb::RequeueResponse>, Status> {
        let reply = self.requeue_rpc(request).await;
        self.reads_changed();
        reply
    }

    async fn run_now(
        &self,
        request: Request<pb::RunNowRequest>,
    ) -> Result<Response<pb::RunNowResponse>, Status> {
        let reply = self.run_now_rpc(request).await;
        self.reads_changed();
        reply
    }

    async fn delete_task(
        &self,
        request: Request<pb::DeleteTaskRequest>,
    ) -> Result<Response<pb::DeleteTaskResponse>, Status> {
        let reply = self.delete_task_rpc(request).await;
        self.reads_changed();
        reply
    }

    async fn count_tasks(
        &self,
        request: Request<pb::CountTasksRequest>,
    ) -> Result<Response<pb::CountTasksResponse>, Status> {
        self.count_tasks_rpc(request).await
    }

    async fn requeue_dead(
        &self,
        request: Request<pb::RequeueDeadRequest>,
    ) -> Result<Response<pb::RequeueDeadResponse>, Status> {
        let reply = self.requeue_dead_rpc(request).await;
        self.reads_changed();
        reply
    }

    async fn purge_dead(
        &self,
        request: Request<pb::PurgeDeadRequest>,
    ) -> Result<Response<pb::PurgeDeadResponse>, Status> {
        let reply = self.purge_dead_rpc(request).await;
        self.reads_changed();
        reply
    }

    async fn set_concurrency(
        &self,
        request: Request<pb::SetConcurrencyRequest>,
    ) -> Result<Response<pb::SetConcurrencyResponse>, Status> {
        let reply = self.set_concurrency_rpc(request).await;
        self.reads_changed();
        reply
    }

    async fn set_rate_limit(
        &self,
        request: Request<pb::SetRateLimitRequest>,
    ) -> Result<Response<pb::SetRateLimitResponse>, Status> {
        let reply = self.set_rate_limit_rpc(request).await;
        self.reads_changed();
        reply
    }

    async fn set_shed_after(
        &self,
        request: Request<pb::SetShedAfterRequest>,
    ) -> Result<Response<pb::SetShedAfterResponse>, Status> {
        let reply = self.set_shed_after_rpc(request).await;
        self.reads_changed();
        reply
    }

    async fn set_breaker(
        &self,
        request: Request<pb::SetBreakerRequest>,
    ) -> Result<Response<pb::SetBreakerResponse>, Status> {
        let reply = self.set_breaker_rpc(request).await;
        self.reads_changed();
        reply
    }

    async fn pause_type(
        &self,
        request: Request<pb::PauseTypeRequest>,
    ) -> Result<Response<pb::PauseTypeResponse>, Status> {
        let reply = self.pause_type_rpc(request).await;
        self.reads_changed();
        reply
    }

    async fn resume_type(
        &self,
        request: Request<pb::ResumeTypeRequest>,
    ) -> Result<Response<pb::ResumeTypeResponse>, Status> {
        let reply = self.resume_type_rpc(request).await;
        self.reads_changed();
        reply
    }

    async fn drain(
        &self,
        request: Request<pb::DrainRequest>,
    ) -> Result<Response<pb::DrainResponse>, Status> {
        let reply = self.drain_rpc(request).await;
        self.reads_changed();
        reply
    }

    async fn list_schedules(
        &self,
        request: Request<pb::ListSchedulesRequest>,
    ) -> Result<Response<pb::ListSchedulesResponse>, Status> {
        self.list_schedules_rpc(request).await
    }

    async fn add_schedule(
        &self,
        request: Request<pb::AddScheduleRequest>,
    ) -> Result<Response<pb::AddScheduleResponse>, Status> {
        self.add_schedule_rpc(request).await
    }

    async fn remove_schedule(
        &self,
        request: Request<pb::RemoveScheduleRequest>,
    ) -> Result<Response<pb::RemoveScheduleResponse>, Status> {
        self.remove_schedule_rpc(request).await
    }

    async fn set_schedule_enabled(
        &self,
        request: Request<pb::SetScheduleEnabledRequest>,
    ) -> Result<Response<pb::SetScheduleEnabledResponse>, Status> {
        self.set_schedule_enabled_rpc(request).await
    }

    async fn trigger_schedule(
        &self,
        request: Request<pb::TriggerScheduleRequest>,
    ) -> Result<Response<pb::TriggerScheduleResponse>, Status> {
        let reply = self.trigger_schedule_rpc(request).await;
        self.reads_changed();
        reply
    }

    async fn list_locks(
        &self,
        request: Request<pb::ListLocksRequest>,
    ) -> Result<Response<pb::ListLocksResponse>, Status> {
        self.list_locks_rpc(request).await
    }

    async fn acquire_lock(
        &self,
        request: Request<pb::AcquireLockRequest>,
    ) -> Result<Response<pb::AcquireLockResponse>, Status> {
        self.acquire_lock_rpc(request).await
    }

    async fn renew_lock(
        &self,
        request: Request<pb::RenewLockRequest>,
    ) -> Result<Response<pb::RenewLockResponse>, Status> {
        self.renew_lock_rpc(request).await
    }

    async fn release_lock(
        &self,
        request: Request<pb::ReleaseLockRequest>,
    ) -> Result<Response<pb::ReleaseLockResponse>, Status> {
        self.release_lock_rpc(request).await
    }

    async fn create_shard_group(
        &self,
        request: Request<pb::CreateShardGroupRequest>,
    ) -> Result<Response<pb::CreateShardGroupResponse>, Status> {
        self.create_shard_group_rpc(request).await
    }

    async fn list_shard_groups(
        &self,
        request: Request<pb::ListShardGroupsRequest>,
    ) -> Result<Response<pb::ListShardGroupsResponse>, Status> {
        self.list_shard_groups_rpc(request).await
    }

    async fn list_shards(
        &self,
        request: Request<pb::ListShardsRequest>,
    ) -> Result<Response<pb::ListShardsResponse>, Status> {
        self.list_shards_rpc(request).await
    }

    async fn list_audit(
        &self,
        request: Request<pb::ListAuditRequest>,
    ) -> Result<Response<pb::ListAuditResponse>, Status> {
        self.list_audit_rpc(request).await
    }

    async fn list_suspect_leases(
        &self,
        request: Request<pb::ListSuspectLeasesRequest>,
    ) -> Result<Response<pb::ListSuspectLeasesResponse>, Status> {
        self.list_suspect_leases_rpc(request).await
    }

    async fn get_policy(
        &self,
        request: Request<pb::GetPolicyRequest>,
    ) -> Result<Response<pb::GetPolicyResponse>, Status> {
        self.get_policy_rpc(request).await
    }

    async fn set_policy(
        &self,
        request: Request<pb::SetPolicyRequest>,
    ) -> Result<Response<pb::SetPolicyResponse>, Status> {
        let reply = self.set_policy_rpc(request).await;
        self.reads_changed();
        reply
    }

    async fn get_stats(
        &self,
        request: Request<pb::GetStatsRequest>,
    ) -> Result<Response<pb::GetStatsResponse>, Status> {
        self.get_stats_rpc(request).await
    }

    async fn get_history(
        &self,
        request: Request<pb::GetHistoryRequest>,
    ) -> Result<Response<pb::GetHistoryResponse>, Status> {
        self.get_history_rpc(request).await
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn denied_targets_are_escaped_and_bounded() {
        assert_eq!(denied_target("type:email.send"), "type:email.send");
        assert_eq!(denied_target("type:a\0b\u{1b}"), "type:a\\u{0}b\\u{1b}");
        let long = denied_target(&"x".repeat(5000));
        assert_eq!(long.chars().count(), MAX_DENIED_TARGET_CHARS + 1);
        assert!(long.ends_with('…'));
    }
}
