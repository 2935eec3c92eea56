//! The keeper: the locks and shards this agent holds, kept by a [`Renewal`] on a connection of
//! its own. At each beat it renews every held lease and membership (and gives back what is
//! waiting to be released), then rebalances the shard groups (see [`super::shards`]); it drops
//! a holding past its local deadline, and releases everything once stopped.

use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold_shared::store::{ResourceRenewOutcome, ResourceRenewParams, ShardJoinParams};
use leasehold_shared::{Store, StoreError};

use super::holdings::{LossReason, lease_left};
use crate::runtime::core::Core;
use crate::runtime::renewal::{self, Cadence, Connect, Line, Renewable, Renewal};

/// The resource leases this agent holds, kept by a [`Renewal`].
pub(crate) struct Keeper {
    pub(crate) core: Arc<Core>,
}

/// One renewal of the keeper.
pub(crate) struct KeeperBatch {
    params: ResourceRenewParams,
    /// Lost or dropped holdings to give back (fenced) in the same renewal.
    pending: Vec<(String, i64)>,
}

impl Keeper {
    /// The keeper service; it opens its connection at its first beat.
    pub(crate) fn service(core: Arc<Core>, connect: Connect<Arc<dyn Store>>) -> Renewal<Keeper> {
        let cadence = Cadence::of(&core.settings);
        Renewal::new(Keeper { core }, Line::new("keeper", connect, None), cadence)
    }

    async fn release_all(&mut self, line: &mut Line<Arc<dyn Store>>) {
        let held = self.core.holdings.keys();
        if held.is_empty() {
            return;
        }
        let core = Arc::clone(&self.core);
        let done = tokio::time::timeout(Duration::from_secs(3), async {
            let conn = line.get().await?;
            for (name, token) in held {
                core.drop_holding(&name, token, LossReason::Released, Instant::now());
                core.give_back(conn.as_ref(), &name, token).await?;
            }
            Ok::<(), StoreError>(())
        })
        .await;
        match done {
            Ok(Ok(())) => tracing::info!("released the resource leases"),
            _ => tracing::warn!(
                "could not release every resource lease; they are taken over after TTL + grace"
            ),
        }
    }
}

impl Renewable for Keeper {
    type Conn = Arc<dyn Store>;
    type Batch = KeeperBatch;
    type Renewed = ResourceRenewOutcome;

    /// Every holding, membership and pending give-back; `None` when there is none.
    fn batch(&mut self) -> Option<KeeperBatch> {
        let core = &self.core;
        let leases = core.holdings.keys();
        let groups = core.settings.shard_groups.clone();
        let pending: Vec<(String, i64)> = std::mem::take(
            &mut *core
                .holdings
                .to_release
                .lock()
                .unwrap_or_else(|p| p.into_inner()),
        );
        if leases.is_empty() && groups.is_empty() && pending.is_empty() {
            return None;
        }
        Some(KeeperBatch {
            params: ResourceRenewParams {
                owner: core.id.clone(),
                leases,
                groups,
                ttl: core.settings.lease_ttl,
            },
            pending,
        })
    }

    async fn send(
        &self,
        conn: Arc<dyn Store>,
        batch: &KeeperBatch,
    ) -> Result<ResourceRenewOutcome, StoreError> {
        let out = conn.resource_renew_many(batch.params.clone()).await?;
        for (name, token) in &batch.pending {
            self.core.give_back(conn.as_ref(), name, *token).await?;
        }
        Ok(out)
    }

    async fn renewed(
        &mut self,
        _batch: KeeperBatch,
        sent: Instant,
        out: ResourceRenewOutcome,
        line: &mut Line<Arc<dyn Store>>,
    ) {
        let core = &self.core;
        renewal::count(core, true);
        {
            let mut held = core.holdings.lock();
            for (name, token, until) in &out.renewed {
                if let Some(h) = held.get_mut(name)
                    && h.token == *token
                {
                    let left = out
                        .now
                        .map_or(Duration::ZERO, |now| lease_left(*until, now));
                    h.safe_until = core.safe_until(sent, Some(left));
                }
            }
        }
        for (name, token) in out.lost {
            let last = core
                .holdings
                .lock()
                .get(&name)
                .map_or(sent, |h| h.safe_until.min(sent));
            if core.drop_holding(&name, token, LossReason::Revoked, last) {
                core.resource_fenced("renew", &name, token);
            }
        }
        for group in out.left_groups {
            // The membership row went (pruned, or the group re-created): join again.
            let params = ShardJoinParams {
                group: group.clone(),
                member: core.id.clone(),
                ttl: core.settings.lease_ttl,
            };
            let joined = match line.get().await {
                Ok(conn) => conn.shard_join(params).await.map(drop),
                Err(e) => Err(e),
            };
            if let Err(error) = joined {
                tracing::warn!(group = group.as_str(), error = %crate::runtime::queue::chain(&error), "could not re-join a shard group");
            }
        }
    }

    /// The give-backs wait for the next renewal.
    fn failed(&mut self, batch: KeeperBatch, reason: String) {
        let core = &self.core;
        renewal::count(core, false);
        tracing::warn!(error = %reason, "resource lease renewal failed");
        core.holdings
            .to_release
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(batch.pending);
    }

    fn has_unprovable(&self, now: Instant) -> bool {
        self.core.holdings.has_unprovable(now)
    }

    /// Drops holdings past their local deadline (and queues them to be given back).
    fn check(&mut self, now: Instant) {
        let due: Vec<(String, i64, Instant)> = self
            .core
            .holdings
            .lock()
            .iter()
            .filter(|(_, h)| h.safe_until <= now)
            .map(|(n, h)| (n.clone(), h.token, h.safe_until))
            .collect();
        for (name, token, safe_until) in due {
            if self
                .core
                .drop_holding(&name, token, LossReason::Unprovable, safe_until)
            {
                self.core
                    .holdings
                    .to_release
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push((name, token));
            }
        }
    }

    /// Rebalances the shard groups after a beat that landed (not while draining).
    async fn after_beat(&mut self, line: &mut Line<Arc<dyn Store>>, renewed: bool) {
        if renewed && !self.core.is_draining() {
            self.rebalance(line).await;
        }
    }

    async fn stopped(&mut self, line: &mut Line<Arc<dyn Store>>) {
        self.release_all(line).await;
    }
}
