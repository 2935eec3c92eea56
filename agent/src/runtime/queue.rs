//! The narrow seams between the agent's services and the store: each service holds only the
//! store writes it makes ([`ClaimQueue`], [`CompleteQueue`], [`RenewQueue`],
//! [`MaintenanceQueue`]), so it can be run alone against the in-memory queue of the unit tests
//! (`memory.rs`) on paused time. [`StoreQueue`] implements all of them once over the real
//! [`Store`], call for call.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use leasehold_shared::store::{
    BreakerTickParams, BreakerTransition, ClaimBatch, ClaimParams, CompleteOutcome, CompleteParams,
    ExpireDeadlinesParams, HolderWrite, LeaderElectParams, LeaderOutcome, LeaderRenewParams,
    LeaderRenewal, PurgeParams, RecoverParams, Recovered, ReleaseOutcome, ReleaseParams,
    RenewOutcome, RenewParams, ShedParams, UnservedParams,
};
use leasehold_shared::{AgentId, Store, StoreError, TaskId, TaskType};

use super::renewal::Connect;
pub(crate) use crate::error::chain;

/// Why a store write of a service did not land: the store said why, or it gave no answer in
/// time (then the write may have landed).
#[derive(Debug, thiserror::Error)]
pub(crate) enum WriteError {
    #[error("{what} timed out after {after:?}")]
    Timeout { what: String, after: Duration },
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl WriteError {
    /// A write of `what` that had no answer within `after`.
    pub(crate) fn timeout(what: impl Into<String>, after: Duration) -> Self {
        WriteError::Timeout {
            what: what.into(),
            after,
        }
    }
}

/// What the claimer writes: one claim of up to `batch` tasks.
#[async_trait]
pub(crate) trait ClaimQueue: Send + Sync {
    async fn task_claim(&self, params: ClaimParams) -> Result<ClaimBatch, StoreError>;
}

/// What the completer writes: ended attempts, and leases given back.
#[async_trait]
pub(crate) trait CompleteQueue: Send + Sync {
    async fn task_complete_many(
        &self,
        batch: Vec<CompleteParams>,
    ) -> Result<Vec<CompleteOutcome>, StoreError>;
    async fn lease_release_many(&self, params: ReleaseParams)
    -> Result<ReleaseOutcome, StoreError>;
}

/// What the heartbeat writes, on a connection of its own: the held leases renewed in one
/// batch, with the agent's liveness deadline.
#[async_trait]
pub(crate) trait RenewQueue: Send + Sync {
    async fn lease_renew_many(&self, params: RenewParams) -> Result<RenewOutcome, StoreError>;
}

/// What the maintenance service writes: the leader lease, and — while it leads — recovery,
/// deadline expiry, retention and the dead-lettering of unserved types.
#[async_trait]
pub(crate) trait MaintenanceQueue: Send + Sync {
    async fn leader_attempt_elect(
        &self,
        params: LeaderElectParams,
    ) -> Result<LeaderOutcome, StoreError>;
    async fn leader_renew(&self, params: LeaderRenewParams) -> Result<LeaderRenewal, StoreError>;
    async fn leader_resign(&self, owner: AgentId, term: i64) -> Result<HolderWrite, StoreError>;
    async fn lease_recover_expired(
        &self,
        params: RecoverParams,
    ) -> Result<Vec<Recovered>, StoreError>;
    async fn task_expire_deadlines(
        &self,
        params: ExpireDeadlinesParams,
    ) -> Result<Vec<TaskId>, StoreError>;
    async fn task_shed(&self, params: ShedParams) -> Result<Vec<(TaskId, TaskType)>, StoreError>;
    async fn breaker_tick(
        &self,
        params: BreakerTickParams,
    ) -> Result<Vec<BreakerTransition>, StoreError>;
    async fn task_purge_finished(&self, params: PurgeParams) -> Result<u64, StoreError>;
    async fn task_dead_letter_unserved(
        &self,
        params: UnservedParams,
    ) -> Result<Vec<(TaskId, TaskType)>, StoreError>;
    async fn resource_history_prune(&self, older_than: Duration) -> Result<u64, StoreError>;
}

/// Every seam over the real store: each call is the store's own, unchanged.
#[derive(Clone)]
pub(crate) struct StoreQueue(pub(crate) Arc<dyn Store>);

impl StoreQueue {
    pub(crate) fn claims(store: &Arc<dyn Store>) -> Arc<dyn ClaimQueue> {
        Arc::new(StoreQueue(Arc::clone(store)))
    }

    pub(crate) fn completions(store: &Arc<dyn Store>) -> Arc<dyn CompleteQueue> {
        Arc::new(StoreQueue(Arc::clone(store)))
    }

    pub(crate) fn maintenance(store: &Arc<dyn Store>) -> Arc<dyn MaintenanceQueue> {
        Arc::new(StoreQueue(Arc::clone(store)))
    }

    pub(crate) fn renewals(store: &Arc<dyn Store>) -> Arc<dyn RenewQueue> {
        Arc::new(StoreQueue(Arc::clone(store)))
    }

    /// The heartbeat's connector: each call opens a store of its own through `connect` (so a
    /// stuck connection is abandoned, never shared) and hands out only its renewal seam.
    pub(crate) fn renew_connect(connect: &Connect<Arc<dyn Store>>) -> Connect<Arc<dyn RenewQueue>> {
        let connect = Arc::clone(connect);
        Arc::new(move || {
            let opening = connect();
            Box::pin(async move { opening.await.map(|store| StoreQueue::renewals(&store)) })
        })
    }
}

#[async_trait]
impl ClaimQueue for StoreQueue {
    async fn task_claim(&self, params: ClaimParams) -> Result<ClaimBatch, StoreError> {
        self.0.task_claim(params).await
    }
}

#[async_trait]
impl CompleteQueue for StoreQueue {
    async fn task_complete_many(
        &self,
        batch: Vec<CompleteParams>,
    ) -> Result<Vec<CompleteOutcome>, StoreError> {
        self.0.task_complete_many(batch).await
    }

    async fn lease_release_many(
        &self,
        params: ReleaseParams,
    ) -> Result<ReleaseOutcome, StoreError> {
        self.0.lease_release_many(params).await
    }
}

#[async_trait]
impl RenewQueue for StoreQueue {
    async fn lease_renew_many(&self, params: RenewParams) -> Result<RenewOutcome, StoreError> {
        self.0.lease_renew_many(params).await
    }
}

#[async_trait]
impl MaintenanceQueue for StoreQueue {
    async fn leader_attempt_elect(
        &self,
        params: LeaderElectParams,
    ) -> Result<LeaderOutcome, StoreError> {
        self.0.leader_attempt_elect(params).await
    }

    async fn leader_renew(&self, params: LeaderRenewParams) -> Result<LeaderRenewal, StoreError> {
        self.0.leader_renew(params).await
    }

    async fn leader_resign(&self, owner: AgentId, term: i64) -> Result<HolderWrite, StoreError> {
        self.0.leader_resign(owner, term).await
    }

    async fn lease_recover_expired(
        &self,
        params: RecoverParams,
    ) -> Result<Vec<Recovered>, StoreError> {
        self.0.lease_recover_expired(params).await
    }

    async fn task_expire_deadlines(
        &self,
        params: ExpireDeadlinesParams,
    ) -> Result<Vec<TaskId>, StoreError> {
        self.0.task_expire_deadlines(params).await
    }

    async fn task_shed(&self, params: ShedParams) -> Result<Vec<(TaskId, TaskType)>, StoreError> {
        self.0.task_shed(params).await
    }

    async fn breaker_tick(
        &self,
        params: BreakerTickParams,
    ) -> Result<Vec<BreakerTransition>, StoreError> {
        self.0.breaker_tick(params).await
    }

    async fn task_purge_finished(&self, params: PurgeParams) -> Result<u64, StoreError> {
        self.0.task_purge_finished(params).await
    }

    async fn task_dead_letter_unserved(
        &self,
        params: UnservedParams,
    ) -> Result<Vec<(TaskId, TaskType)>, StoreError> {
        self.0.task_dead_letter_unserved(params).await
    }

    async fn resource_history_prune(&self, older_than: Duration) -> Result<u64, StoreError> {
        self.0.resource_history_prune(older_than).await
    }
}
