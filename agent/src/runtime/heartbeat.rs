//! The heartbeat: the task leases this agent holds, kept by the renewal loop
//! ([`super::renewal`]) on a connection of its own with a statement timeout, so a busy pool or
//! a slow handler never makes a healthy agent look dead. Each beat renews every held lease in
//! one batch statement.
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
//! is later than the local deadline, so the agent always stops first. A failed liveness beat
//! (nothing held) is logged only.

use std::sync::Arc;
use std::time::Instant;

use leasehold_shared::domain::LeaseOutcome;
use leasehold_shared::store::{RenewOutcome, RenewParams};
use leasehold_shared::{LeaseEpoch, StoreError, TaskId};

use super::core::{Core, bump};
use super::events::LifecycleEvent;
use super::feed::FeedEvent;
use super::queue::RenewQueue;
use super::renewal::{self, Cadence, Connect, Line, Renewable, Renewal};
use crate::handler::StopReason;

/// The task leases this agent holds, kept by a [`Renewal`].
pub(crate) struct Heartbeat {
    pub(crate) core: Arc<Core>,
}

impl Heartbeat {
    /// The heartbeat service: `connect` opens a connection of its own (again after each
    /// failure), `conn` is the one opened at start.
    pub(crate) fn service(
        core: Arc<Core>,
        connect: Connect<Arc<dyn RenewQueue>>,
        conn: Arc<dyn RenewQueue>,
    ) -> Renewal<Heartbeat> {
        let cadence = Cadence::of(&core.settings);
        let line = Line::new("heartbeat", connect, Some(conn));
        Renewal::new(Heartbeat { core }, line, cadence)
    }
}

impl Renewable for Heartbeat {
    type Conn = Arc<dyn RenewQueue>;
    /// The leases to renew; none: a liveness beat.
    type Batch = Vec<(TaskId, LeaseEpoch)>;
    type Renewed = RenewOutcome;

    /// Every held lease; with none, the beat still pushes the agent's liveness deadline on
    /// (the renewal statement with no leases), so an idle agent's types stay served.
    fn batch(&mut self) -> Option<Self::Batch> {
        Some(self.core.book.keys())
    }

    /// One renewal statement: the leases given (maybe none) and the agent's liveness deadline.
    async fn send(
        &self,
        conn: Arc<dyn RenewQueue>,
        leases: &Self::Batch,
    ) -> Result<RenewOutcome, StoreError> {
        let settings = &self.core.settings;
        let params = RenewParams {
            owner: self.core.id.clone(),
            leases: leases.clone(),
            lease_ttl: settings.lease_ttl,
            alive_for: Some(settings.alive_for()),
        };
        conn.lease_renew_many(params).await
    }

    async fn renewed(
        &mut self,
        leases: Self::Batch,
        sent: Instant,
        out: RenewOutcome,
        _line: &mut Line<Self::Conn>,
    ) {
        if leases.is_empty() {
            return; // a liveness beat: nothing held, nothing to count
        }
        let core = &self.core;
        renewal::count(core, true);
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

    /// A failed liveness beat is logged only: it is not a lease renewal failure (nothing was
    /// held).
    fn failed(&mut self, leases: Self::Batch, reason: String) {
        let core = &self.core;
        if leases.is_empty() {
            tracing::warn!(error = %reason, "liveness beat failed");
            return;
        }
        renewal::count(core, false);
        tracing::warn!(error = %reason, held = core.book.len(), "lease renewal failed");
        if core.feed.is_enabled() {
            core.feed.push(FeedEvent::RenewalFailed {
                reason: reason.into(),
                leases,
            });
        }
    }

    fn has_unprovable(&self, now: Instant) -> bool {
        self.core.book.has_unprovable(now)
    }

    /// Stops executions past their local deadline, and flags slow ones (once).
    fn check(&mut self, now: Instant) {
        let core = &self.core;
        let unprovable = core.book.take_unprovable(now);
        if !unprovable.is_empty() {
            core.update_active();
        }
        for noted in unprovable {
            noted.stop.stop(StopReason::LeaseLost);
            core.feed.push(FeedEvent::Ended {
                id: noted.id,
                epoch: noted.epoch,
                outcome: LeaseOutcome::Lost,
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
        for (noted, rule) in core.book.newly_slow(now, &core.history) {
            core.metrics.slow(noted.task_type.as_str(), rule.as_str());
            core.feed.push(FeedEvent::Slow {
                id: noted.id,
                epoch: noted.epoch,
                running_for: noted.running_for,
                rule,
            });
            tracing::warn!(
                task.id = noted.id.0,
                task.r#type = noted.task_type.as_str(),
                running_for = ?noted.running_for,
                rule = rule.as_str(),
                limit = ?rule.limit(),
                "slow task"
            );
            core.listeners.emit(LifecycleEvent::Slow {
                id: noted.id,
                task_type: noted.task_type,
                running_for: noted.running_for,
                rule,
            });
        }
    }
}

#[cfg(test)]
mod tests;
