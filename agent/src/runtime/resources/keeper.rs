//! The keeper service: on a connection of its own, renews every held lease and membership at
//! each heartbeat (then rebalances the shard groups, see [`super::shards`]), drops a holding
//! past its local deadline, and releases everything at shutdown.

use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold_shared::Store;
use leasehold_shared::store::{ResourceRenewParams, ShardJoinParams};
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;

use super::holdings::{LossReason, lease_left};
use crate::runtime::core::{Core, bump};
use crate::runtime::heartbeat::Connect;

/// The keeper service.
pub(crate) struct Keeper {
    pub(crate) core: Arc<Core>,
    pub(crate) connect: Connect,
    pub(crate) conn: Option<Arc<dyn Store>>,
}

impl Keeper {
    pub(crate) async fn run(mut self, stop: CancellationToken) {
        let settings = &self.core.settings;
        let mut renew = tokio::time::interval(settings.heartbeat);
        renew.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let check_every =
            (settings.heartbeat / 4).clamp(Duration::from_millis(20), Duration::from_millis(250));
        let mut check = tokio::time::interval(check_every);
        check.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = renew.tick() => {
                    let ok = self.renew().await;
                    self.check();
                    if ok && !self.core.is_draining() {
                        self.rebalance().await;
                    }
                }
                _ = check.tick() => {
                    if self.core.holdings.has_unprovable(Instant::now()) {
                        self.renew().await;
                    }
                    self.check();
                }
            }
        }
        self.release_all().await;
    }

    pub(super) async fn connection(&mut self) -> anyhow::Result<Arc<dyn Store>> {
        if let Some(conn) = &self.conn {
            return Ok(Arc::clone(conn));
        }
        let conn = (self.connect)().await?;
        self.conn = Some(Arc::clone(&conn));
        Ok(conn)
    }

    /// Renews every holding and membership; false when the database did not answer.
    async fn renew(&mut self) -> bool {
        let core = Arc::clone(&self.core);
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
            return true;
        }
        let timeout = core.settings.renew_timeout();
        let sent = Instant::now();
        let params = ResourceRenewParams {
            owner: core.id.clone(),
            leases,
            groups,
            ttl: core.settings.lease_ttl,
        };
        let attempt = tokio::time::timeout(timeout, async {
            let conn = self.connection().await?;
            let out = conn.resource_renew_many(params).await?;
            for (name, token) in &pending {
                core.give_back(conn.as_ref(), name, *token).await?;
            }
            anyhow::Ok(out)
        })
        .await;
        let out = match attempt {
            Ok(Ok(out)) => out,
            failed => {
                self.conn = None;
                let reason = match failed {
                    Ok(Err(e)) => format!("{e:#}"),
                    _ => format!("timed out after {timeout:?}"),
                };
                bump(&core.stats.renewal_failures, 1);
                core.metrics.renewal(false);
                tracing::warn!(error = %reason, "resource lease renewal failed");
                core.holdings
                    .to_release
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .extend(pending);
                return false;
            }
        };
        core.metrics.renewal(true);
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
            let joined = match self.connection().await {
                Ok(conn) => conn.shard_join(params).await.map_err(anyhow::Error::new),
                Err(e) => Err(e),
            };
            if let Err(error) = joined {
                tracing::warn!(group = group.as_str(), error = %format!("{error:#}"), "could not re-join a shard group");
            }
        }
        true
    }

    /// Drops holdings past their local deadline.
    pub(super) fn check(&self) {
        let now = Instant::now();
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

    async fn release_all(&mut self) {
        let held = self.core.holdings.keys();
        if held.is_empty() {
            return;
        }
        let core = Arc::clone(&self.core);
        let done = tokio::time::timeout(Duration::from_secs(3), async {
            let conn = self.connection().await?;
            for (name, token) in held {
                core.drop_holding(&name, token, LossReason::Released, Instant::now());
                core.give_back(conn.as_ref(), &name, token).await?;
            }
            anyhow::Ok(())
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
