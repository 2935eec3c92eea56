//! The heartbeat service: one batch renewal of every held lease per interval, on a connection
//! of its own with a statement timeout, so a busy pool or a slow handler never makes a healthy
//! agent look dead.
//!
//! The same statement pushes the agent's liveness deadline (`agents.alive_until` = database
//! `now()` + its own lease TTL + grace) on every beat, leases held or not: the leader judges
//! whether a type is served by that deadline, never by its own timings (issue 18).
//!
//! ```text
//!   every heartbeat:  renew all (one statement) ──▶ renewed: safe_until = sent + min(ttl, lease_until − db now) − margin
//!                                              ├──▶ cancel_requested: ask the handler to stop
//!                                              └──▶ lost: drop the execution at once
//!   every check:      executing lease past safe_until ──▶ drop it (cannot prove the lease)
//!                     running past the slow threshold  ──▶ flag slow (once)
//! ```
//!
//! When things fail: a renewal that errors or times out is counted and logged, and the
//! connection is replaced (a half-open socket is abandoned, not waited on). Leases keep their
//! last local deadline, so executions run on through a short outage and stop at that deadline
//! in a long one. The database's recovery only takes a lease after `lease_until + grace`, which
//! is later than the local deadline, so the agent always stops first.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold_shared::store::{RenewOutcome, RenewParams};
use leasehold_shared::{LeaseEpoch, Store, TaskId};
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;

use super::core::{Core, bump};
use super::events::LifecycleEvent;
use super::feed::FeedEvent;
use crate::handler::StopReason;

/// Opens the heartbeat's own connection.
pub(crate) type Connect = Arc<
    dyn Fn() -> Pin<Box<dyn Future<Output = anyhow::Result<Arc<dyn Store>>> + Send>> + Send + Sync,
>;

pub(crate) struct Heartbeat {
    pub(crate) core: Arc<Core>,
    pub(crate) connect: Connect,
    pub(crate) conn: Option<Arc<dyn Store>>,
}

impl Heartbeat {
    pub(crate) async fn run(mut self, stop: CancellationToken) {
        let settings = &self.core.settings;
        let mut renew = tokio::time::interval(settings.heartbeat);
        renew.set_missed_tick_behavior(MissedTickBehavior::Delay);
        renew.tick().await; // the first tick is immediate; leases were just claimed
        let check_every =
            (settings.heartbeat / 4).clamp(Duration::from_millis(20), Duration::from_millis(250));
        let mut check = tokio::time::interval(check_every);
        check.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = renew.tick() => {
                    self.renew().await;
                    self.check();
                }
                _ = check.tick() => {
                    // Before giving up a lease at its local deadline, try once to prove it
                    // (after a freeze the deadline and the renewal fall due together).
                    if self.core.book.has_unprovable(Instant::now()) {
                        self.renew().await;
                    }
                    self.check();
                }
            }
        }
    }

    async fn connection(&mut self) -> anyhow::Result<Arc<dyn Store>> {
        if let Some(conn) = &self.conn {
            return Ok(Arc::clone(conn));
        }
        let conn = (self.connect)().await?;
        tracing::info!("heartbeat connection (re)established");
        self.conn = Some(Arc::clone(&conn));
        Ok(conn)
    }

    async fn renew(&mut self) {
        let core = Arc::clone(&self.core);
        let leases = core.book.keys();
        if leases.is_empty() {
            self.prove_alive().await;
            return;
        }
        let sent = Instant::now();
        let failed_keys = if core.feed.is_enabled() {
            leases.clone()
        } else {
            Vec::new()
        };
        let result = self.send_renewal(leases).await;
        let out = match result {
            Ok(out) => out,
            Err(error) => {
                core.metrics.renewal(false);
                core.metrics.database(false);
                bump(&core.stats.renewal_failures, 1);
                let reason = format!("{error:#}");
                tracing::warn!(error = %reason, held = core.book.len(), "lease renewal failed");
                if !failed_keys.is_empty() {
                    core.feed.push(FeedEvent::RenewalFailed {
                        reason: reason.into(),
                        leases: failed_keys,
                    });
                }
                return;
            }
        };
        core.metrics.renewal(true);
        core.metrics.database(true);
        // Never past the database's lease_until (minus the margin): the least any renewed
        // lease has left at the database's now.
        let left = out
            .renewed
            .iter()
            .map(|r| super::resources::lease_left(r.lease_until, out.now))
            .min();
        let safe_until = core.safe_until(sent, left);
        let renewed: Vec<_> = out
            .renewed
            .iter()
            .map(|r| (r.id, r.epoch, r.cancel_requested))
            .collect();
        core.feed.push_with(|| FeedEvent::Renewed {
            now: out.now,
            leases: out
                .renewed
                .iter()
                .map(|r| (r.id, r.epoch, r.lease_until))
                .collect(),
        });
        for noted in core.book.renewed(&renewed, safe_until) {
            core.feed.push(FeedEvent::CancelRequested {
                id: noted.id,
                epoch: noted.epoch,
            });
            tracing::info!(
                task.id = noted.id.0,
                "cancel requested by an operator, seen at renewal: stopping the execution"
            );
            noted.stop.stop(StopReason::Cancelled);
        }
        for (id, epoch) in out.lost {
            // A lease whose handler already ended may simply have completed since the snapshot:
            // the completer's own write tells. An executing lease that is gone was revoked.
            if let Some(lease) = core.book.remove_lost(id, epoch) {
                // The renewal was a holder write that found the lease moved on: a fenced write.
                core.fenced("renew", id, epoch);
                lease.stop.stop(StopReason::LeaseLost);
                bump(&core.stats.lease_lost, 1);
                core.metrics.lease_lost("revoked");
                tracing::warn!(
                    task.id = id.0,
                    lease.epoch = epoch.0,
                    "lease lost at renewal: execution stopped"
                );
                core.listeners.emit(LifecycleEvent::LeaseLost {
                    id,
                    task_type: lease.task_type.clone(),
                    epoch,
                    reason: "revoked",
                });
            }
        }
        core.update_active();
    }

    /// With no lease to renew, the beat still pushes the agent's liveness deadline on (the
    /// renewal statement with no leases), so an idle agent's types stay served. A failure is
    /// logged and, on a connection error or timeout, the connection replaced; it is not a
    /// lease renewal failure (nothing was held).
    async fn prove_alive(&mut self) {
        if let Err(error) = self.send_renewal(Vec::new()).await {
            tracing::warn!(error = %format!("{error:#}"), "liveness beat failed");
        }
    }

    /// One renewal statement on the heartbeat connection: the leases given (maybe none) and
    /// the agent's liveness deadline, connecting and renewing within one renewal timeout. A
    /// connection error or a timeout drops the connection: a half-open or stuck socket is
    /// never waited on again.
    async fn send_renewal(
        &mut self,
        leases: Vec<(TaskId, LeaseEpoch)>,
    ) -> anyhow::Result<RenewOutcome> {
        let core = Arc::clone(&self.core);
        let timeout = core.settings.renew_timeout();
        let params = RenewParams {
            owner: core.id.clone(),
            leases,
            lease_ttl: core.settings.lease_ttl,
            alive_for: Some(core.settings.alive_for()),
        };
        let attempt = tokio::time::timeout(timeout, async {
            let conn = self.connection().await?;
            conn.lease_renew_many(params)
                .await
                .map_err(anyhow::Error::new)
        })
        .await;
        match attempt {
            Ok(Ok(out)) => Ok(out),
            Ok(Err(e)) => {
                let connection = e
                    .downcast_ref::<leasehold_shared::StoreError>()
                    .is_none_or(|s| s.is_connection());
                if connection {
                    self.conn = None;
                }
                Err(e)
            }
            Err(_) => {
                self.conn = None;
                Err(anyhow::anyhow!("renewal timed out after {timeout:?}"))
            }
        }
    }

    fn check(&self) {
        let core = &self.core;
        let now = Instant::now();
        let unprovable = core.book.take_unprovable(now);
        if !unprovable.is_empty() {
            core.update_active();
        }
        for noted in unprovable {
            noted.stop.stop(StopReason::LeaseLost);
            core.feed.push(FeedEvent::Ended {
                id: noted.id,
                epoch: noted.epoch,
                outcome: "lost",
            });
            bump(&core.stats.lease_lost, 1);
            core.metrics.lease_lost("unprovable");
            tracing::warn!(
                task.id = noted.id.0,
                lease.epoch = noted.epoch.0,
                "lease not renewed in time: execution stopped at its local safety deadline"
            );
            core.listeners.emit(LifecycleEvent::LeaseLost {
                id: noted.id,
                task_type: noted.task_type,
                epoch: noted.epoch,
                reason: "unprovable",
            });
        }
        for noted in core.book.newly_slow(now) {
            core.metrics.slow(noted.task_type.as_str());
            core.feed.push(FeedEvent::Slow {
                id: noted.id,
                epoch: noted.epoch,
                running_for: noted.running_for,
            });
            tracing::warn!(task.id = noted.id.0, task.r#type = noted.task_type.as_str(), running_for = ?noted.running_for, "slow task");
            core.listeners.emit(LifecycleEvent::Slow {
                id: noted.id,
                task_type: noted.task_type,
                running_for: noted.running_for,
            });
        }
    }
}
