//! The maintenance service: leader election, and — while this agent leads — recovery of
//! expired leases, deadline expiry, load shedding, retention and dead-lettering of unserved
//! types.
//!
//! ```text
//!   follower ──elect (leader lease expired + grace)──▶ leader ──renew each tick──▶ leader
//!      ▲                                                  │ renew fenced / unprovable
//!      └──────────────────────────────────────────────────┘
//!   every tick:  the renewal / election reads the database clock (see `db_clock`)
//!   leader tick: recover leases past lease_until + grace (at most `recovery_per_tick`;
//!                none for one TTL after a forward jump of the database clock)
//!                dead-letter waiting tasks past their deadline
//!                cancel (reason `shed`) waiting tasks past their type's shed_after (at most 1,000)
//!                move circuit breakers (open after N failures within D, half-open after the
//!                cooldown, closed or reopened by the half-open try), each move audited
//!                every minute (or every unserved_after / 2): delete finished tasks past retention
//!                and resource lease history older than a day; dead-letter tasks whose
//!                type no live agent serves (after `unserved_after`)
//! ```
//!
//! Recovery latency after an agent dies is bounded by TTL + grace + one tick, also when the
//! dead agent was the leader: its leader lease expires with its task leases, and every agent
//! tries to take it over on each tick. A mass expiry of N leases takes N / `recovery_per_tick`
//! ticks to recover: the cap keeps one tick bounded and spreads a burst of retries.
//!
//! When things fail: every statement re-checks what it changes in the database, so two agents
//! that both believe they lead (a paused leader that wakes up) are harmless, only wasteful; a
//! leader that cannot renew in time — the renewal failed, or was cut off by the step timeout —
//! stops leading locally once its `safe_until` has passed (the leader step is never allowed to
//! run past it). Errors are logged and retried on the next tick.

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use leasehold_shared::TaskStatus;
use leasehold_shared::store::{
    BreakerTickParams, ExpireDeadlinesParams, LeaderElectParams, LeaderOutcome, LeaderRenewParams,
    LeaderRenewal, PurgeParams, RecoverParams, ShedParams, UnservedParams,
};
use tokio_util::sync::CancellationToken;

use super::core::{Core, bump};
use super::db_clock::{ClockJump, DbClock};
use super::events::LifecycleEvent;
use super::queue::MaintenanceQueue;
// Tokio's clock: the monotonic clock, unless a test paused time.
use super::renewal::now;

const BATCH: u32 = 1000;
const HOUSEKEEPING_EVERY: Duration = Duration::from_secs(60);

pub(crate) struct Maintenance {
    pub(crate) core: Arc<Core>,
    /// Where its writes go (the store; the in-memory queue in the unit tests).
    pub(crate) queue: Arc<dyn MaintenanceQueue>,
}

struct Leadership {
    term: i64,
    safe_until: Instant,
}

/// A renewal that failed or timed out: past `safe_until` leadership cannot be proven.
fn step_down_if_unprovable(leading: &mut Option<Leadership>) {
    if let Some(l) = leading.as_ref()
        && now() >= l.safe_until
    {
        tracing::warn!(term = l.term, "leadership not provable: stepping down");
        *leading = None;
    }
}

impl Maintenance {
    pub(crate) async fn run(self, stop: CancellationToken) {
        let mut leading: Option<Leadership> = None;
        let mut clock = DbClock::new(self.core.settings.lease_ttl);
        let mut last_housekeeping: Option<Instant> = None;
        // Every step is bounded, so a silent connection can neither stall maintenance for good
        // nor hold up shutdown.
        let limit = (self.core.settings.lease_ttl / 2).max(Duration::from_secs(1));
        let bounded = |step: &'static str| {
            move |r: Result<(), tokio::time::error::Elapsed>| {
                if r.is_err() {
                    tracing::warn!(step, ?limit, "maintenance step timed out");
                }
            }
        };
        loop {
            // The leader step never runs past safe_until: leadership it cannot prove by then is
            // given up below, not after another full step.
            let lead_limit = leading.as_ref().map_or(limit, |l| {
                let left = l.safe_until.saturating_duration_since(now());
                limit.min(left.max(self.core.settings.renew_timeout()))
            });
            let led = tokio::time::timeout(lead_limit, self.lead(&mut leading, &mut clock)).await;
            if led.is_err() {
                tracing::warn!(step = "leader", limit = ?lead_limit, "maintenance step timed out");
                // A renewal cut off by the timeout is a failed one.
                step_down_if_unprovable(&mut leading);
            }
            self.publish(leading.as_ref());
            if leading.is_some() {
                bounded("recovery")(tokio::time::timeout(limit, self.recover(&clock)).await);
                bounded("deadlines")(tokio::time::timeout(limit, self.expire_deadlines()).await);
                bounded("shedding")(tokio::time::timeout(limit, self.shed()).await);
                bounded("breakers")(tokio::time::timeout(limit, self.breakers()).await);
                if last_housekeeping.is_none_or(|at| {
                    now().saturating_duration_since(at) >= self.housekeeping_every()
                }) {
                    last_housekeeping = Some(now());
                    bounded("housekeeping")(
                        tokio::time::timeout(limit * 4, self.housekeeping()).await,
                    );
                }
            }
            let wait = self
                .core
                .settings
                .poll_interval
                .mul_f64(0.9 + fastrand::f64() * 0.2);
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tokio::time::sleep(wait) => {}
            }
        }
        if let Some(l) = leading {
            match self.queue.leader_resign(self.core.id.clone(), l.term).await {
                Ok(_) => tracing::info!(term = l.term, "resigned leadership"),
                Err(error) => {
                    tracing::warn!(%error, "could not resign leadership; it expires by itself")
                }
            }
        }
        self.publish(None);
    }

    /// Tells the rest of the agent (the scheduler, the gRPC registry view, the metrics)
    /// whether and in which term it leads; wakes the scheduler when that changed.
    fn publish(&self, leading: Option<&Leadership>) {
        use std::sync::atomic::Ordering;
        let core = &self.core;
        let term = leading.map_or(0, |l| l.term);
        core.metrics.set_leader(leading.is_some());
        if leading.is_none() {
            // A follower exports no backlog gauges (the backlog service would clear them at
            // its next refresh; this is sooner).
            core.metrics.clear_backlog();
        }
        core.leading.store(leading.is_some(), Ordering::Relaxed);
        if core.leader_term.swap(term, Ordering::Relaxed) != term {
            core.schedules_changed.notify_one();
        }
    }

    /// Every minute, or more often when unserved types must be found sooner.
    fn housekeeping_every(&self) -> Duration {
        match self.core.settings.unserved_after {
            Some(after) => HOUSEKEEPING_EVERY
                .min(after / 2)
                .max(self.core.settings.poll_interval),
            None => HOUSEKEEPING_EVERY,
        }
    }

    async fn lead(&self, leading: &mut Option<Leadership>, clock: &mut DbClock) {
        let core = &self.core;
        let ttl = core.settings.lease_ttl;
        let sent = now();
        let safe = sent + ttl.saturating_sub(core.settings.safety_margin());
        if let Some(l) = leading.as_mut() {
            let renewed = self
                .queue
                .leader_renew(LeaderRenewParams {
                    owner: core.id.clone(),
                    term: l.term,
                    ttl,
                })
                .await;
            match renewed {
                Ok(LeaderRenewal::Held { now }) => {
                    l.safe_until = safe;
                    self.observe(clock, now, sent);
                    return;
                }
                Ok(LeaderRenewal::Fenced) => {
                    tracing::warn!(term = l.term, "leadership lost: another agent took over");
                    *leading = None;
                }
                Err(error) => {
                    tracing::warn!(%error, "leader renewal failed");
                    step_down_if_unprovable(leading);
                    return;
                }
            }
        }
        let elect_sent = now();
        let elected = self
            .queue
            .leader_attempt_elect(LeaderElectParams {
                owner: core.id.clone(),
                ttl,
                grace: core.settings.grace,
            })
            .await;
        match elected {
            Ok(LeaderOutcome::Leader { term, now, .. }) => {
                self.observe(clock, now, elect_sent);
                tracing::info!(term, "became leader");
                *leading = Some(Leadership {
                    term,
                    safe_until: safe,
                });
            }
            Ok(LeaderOutcome::Follower { now, .. }) => self.observe(clock, now, elect_sent),
            Err(error) => tracing::debug!(%error, "leader election failed"),
        }
    }

    /// Checks database time `db`, read by a statement sent at `sent`, for a clock jump.
    fn observe(&self, clock: &mut DbClock, db: DateTime<Utc>, sent: Instant) {
        let Some(jump) = clock.observe(db, sent, now()) else {
            return;
        };
        self.core.metrics.clock_jump(jump.direction());
        match jump {
            ClockJump::Forward(by) => tracing::warn!(
                ?by,
                hold = ?self.core.settings.lease_ttl,
                "database clock jumped forward: lease recovery held for one TTL, so live \
                 holders renew at the new time first"
            ),
            ClockJump::Backward(by) => tracing::warn!(
                ?by,
                "database clock jumped backward: leases last longer by the jump"
            ),
        }
    }

    /// Recovers at most `recovery_per_tick` expired leases, none while a database clock jump
    /// holds recovery; each statement refuses to act on a clock past the monotonic bound.
    async fn recover(&self, clock: &DbClock) {
        let core = &self.core;
        if clock.recovery_held(now()) {
            tracing::debug!("lease recovery held after a database clock jump");
            return;
        }
        let mut left = core.settings.recovery_per_tick;
        while left > 0 {
            let limit = left.min(BATCH);
            let recovered = match self
                .queue
                .lease_recover_expired(RecoverParams {
                    grace: core.settings.grace,
                    limit,
                    clock_bound: clock.bound(now()),
                })
                .await
            {
                Ok(r) => r,
                Err(error) => {
                    tracing::warn!(%error, "lease recovery failed");
                    return;
                }
            };
            if recovered.is_empty() {
                return;
            }
            let n = recovered.len();
            bump(&core.stats.recovered, n as u64);
            core.metrics.recovered(n);
            tracing::warn!(recovered = n, "recovered expired leases");
            core.listeners.emit(LifecycleEvent::RecoveryBatch {
                tasks: recovered
                    .iter()
                    .map(|r| (r.id, r.owner.clone(), r.revoked_epoch, r.status))
                    .collect(),
            });
            core.wake_claimers();
            if n < limit as usize {
                return;
            }
            left -= limit;
        }
        tracing::info!(
            cap = core.settings.recovery_per_tick,
            "lease recovery reached its cap for this tick; the rest follows on the next ticks"
        );
    }

    async fn expire_deadlines(&self) {
        match self
            .queue
            .task_expire_deadlines(ExpireDeadlinesParams { limit: BATCH })
            .await
        {
            Ok(ids) if !ids.is_empty() => {
                tracing::info!(
                    tasks = ids.len(),
                    "dead-lettered waiting tasks past their deadline"
                );
            }
            Ok(_) => {}
            Err(error) => tracing::warn!(%error, "deadline expiry failed"),
        }
    }

    /// Load shedding: waiting tasks of shedding types past their `shed_after` are cancelled
    /// (reason `shed`), counted by type.
    async fn shed(&self) {
        match self.queue.task_shed(ShedParams { limit: BATCH }).await {
            Ok(shed) if !shed.is_empty() => {
                for (_, task_type) in &shed {
                    self.core.metrics.shed(task_type.as_str());
                }
                tracing::info!(
                    tasks = shed.len(),
                    "cancelled waiting tasks past their type's shed_after (load shedding)"
                );
            }
            Ok(_) => {}
            Err(error) => tracing::warn!(%error, "load shedding failed"),
        }
    }

    /// Circuit breakers: each move is audited by the store as this agent's action, counted,
    /// logged and sent to the listeners.
    async fn breakers(&self) {
        let params = BreakerTickParams {
            agent: self.core.id.clone(),
        };
        match self.queue.breaker_tick(params).await {
            Ok(moves) => {
                for moved in moves {
                    self.core
                        .metrics
                        .breaker(moved.task_type.as_str(), moved.to.as_str());
                    tracing::warn!(
                        task_type = %moved.task_type,
                        from = moved.from.as_str(),
                        to = moved.to.as_str(),
                        failures = moved.failures,
                        "circuit breaker moved"
                    );
                    self.core.listeners.emit(LifecycleEvent::Breaker {
                        task_type: moved.task_type,
                        from: moved.from,
                        to: moved.to,
                        failures: moved.failures,
                    });
                }
            }
            Err(error) => tracing::warn!(%error, "circuit breaker tick failed"),
        }
    }

    async fn housekeeping(&self) {
        let core = &self.core;
        match self
            .queue
            .resource_history_prune(leasehold_shared::store::resources::HISTORY_RETENTION)
            .await
        {
            Ok(0) => {}
            Ok(deleted) => tracing::info!(deleted, "pruned resource lease history"),
            Err(error) => tracing::warn!(%error, "resource lease history pruning failed"),
        }
        let purges = [
            (
                vec![
                    TaskStatus::Succeeded,
                    TaskStatus::PartiallySucceeded,
                    TaskStatus::Cancelled,
                ],
                core.settings.retention,
            ),
            (vec![TaskStatus::Dead], core.settings.dead_retention),
        ];
        for (statuses, older_than) in purges {
            // Batches until one comes back short, so retention keeps up with any throughput.
            let mut deleted = 0;
            loop {
                let purged = self
                    .queue
                    .task_purge_finished(PurgeParams {
                        statuses: statuses.clone(),
                        older_than,
                        limit: BATCH * 10,
                    })
                    .await;
                match purged {
                    Ok(n) => {
                        deleted += n;
                        if n < u64::from(BATCH * 10) {
                            break;
                        }
                    }
                    Err(error) => {
                        tracing::warn!(%error, "retention failed");
                        break;
                    }
                }
            }
            if deleted > 0 {
                tracing::info!(deleted, "deleted finished tasks past retention");
            }
        }
        if let Some(after) = core.settings.unserved_after {
            match self
                .queue
                .task_dead_letter_unserved(UnservedParams {
                    due_for: after,
                    // Each agent is judged by its own liveness deadline; this bound is only
                    // for rows of agents from before it existed.
                    legacy_stale_after: core.settings.lease_ttl + core.settings.grace,
                    limit: BATCH,
                })
                .await
            {
                Ok(dead) if !dead.is_empty() => {
                    tracing::warn!(
                        tasks = dead.len(),
                        "dead-lettered tasks of types no live agent serves"
                    );
                }
                Ok(_) => {}
                Err(error) => tracing::warn!(%error, "unserved-type check failed"),
            }
        }
    }
}

#[cfg(test)]
mod tests;
