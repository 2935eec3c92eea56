//! The scheduler service: while this agent leads, fire cron schedules on time.
//!
//! ```text
//!   not leading ──(maintenance elects us: leader_term set, woken)──▶ leading
//!   leading: fire pass (fenced by term) ──▶ sleep until the earliest next fire time
//!            (database clock; at most one poll interval, woken early by leadership changes
//!            and by schedule changes made through this agent)
//! ```
//!
//! Each pass is one store transaction that checks the leader lease under this agent's term
//! and enqueues one task per due tick with the tick's idempotency key, so a stale leader
//! fires nothing and two leaders racing still make one task per tick. Ticks late by less
//! than [`ON_TIME`] always fire; older ones follow the schedule's missed-tick policy.
//!
//! When things fail: a pass that errors is logged and retried after a short pause; a
//! schedule that cannot fire is logged and its `last_error` says why; a fenced pass waits
//! for the maintenance service to settle leadership.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use leasehold_shared::store::ScheduleFireParams;
use tokio_util::sync::CancellationToken;

use super::core::Core;
use super::events::LifecycleEvent;

/// Ticks late by less than this fire whatever the missed-tick policy says: a leader's
/// ordinary lateness (a slow statement, a busy host) is not a missed tick.
pub const ON_TIME: Duration = Duration::from_secs(1);
/// Most schedules fired in one pass; more due ones fire in the next pass, at once.
const PASS_LIMIT: u32 = 100;
/// How long after the next fire time the pass runs: the database's now must have reached it.
const AFTER_TICK: Duration = Duration::from_millis(5);
/// Pause after a failed pass.
const RETRY_AFTER: Duration = Duration::from_millis(500);

pub(crate) struct Scheduler {
    pub(crate) core: Arc<Core>,
}

impl Scheduler {
    pub(crate) async fn run(self, stop: CancellationToken) {
        let core = &self.core;
        let idle = core.settings.poll_interval.max(Duration::from_millis(100));
        loop {
            let term = core.leader_term.load(Ordering::Relaxed);
            let wait = if term == 0 {
                idle
            } else {
                self.pass(term).await.unwrap_or(RETRY_AFTER)
            };
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = core.schedules_changed.notified() => {}
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// One firing pass; returns how long to sleep before the next (`None`: it failed).
    async fn pass(&self, term: i64) -> Option<Duration> {
        let core = &self.core;
        let idle = core.settings.poll_interval.max(Duration::from_millis(100));
        let started = tokio::time::Instant::now();
        let limit = (core.settings.lease_ttl / 2).max(Duration::from_secs(1));
        let fired = tokio::time::timeout(
            limit,
            core.store.schedule_fire_due(ScheduleFireParams {
                leader: core.id.clone(),
                term,
                on_time: ON_TIME,
                limit: PASS_LIMIT,
            }),
        )
        .await;
        let report = match fired {
            Ok(Ok(report)) => report,
            Ok(Err(error)) => {
                tracing::warn!(%error, "firing schedules failed");
                return None;
            }
            Err(_) => {
                tracing::warn!(?limit, "firing schedules timed out");
                return None;
            }
        };
        if report.fenced {
            tracing::info!(term, "not firing schedules: the leader lease is not ours");
            return Some(idle);
        }
        for tick in &report.fired {
            let outcome = if tick.task.created {
                "enqueued"
            } else {
                "duplicate"
            };
            core.metrics.tick(tick.name.as_str(), outcome);
            tracing::info!(
                schedule = tick.name.as_str(),
                tick = %tick.tick,
                task.id = tick.task.id.0,
                created = tick.task.created,
                "fired schedule"
            );
            core.listeners.emit(LifecycleEvent::ScheduleFired {
                schedule: tick.name.to_string(),
                tick: tick.tick,
                task: tick.task.id,
                created: tick.task.created,
            });
        }
        for (name, error) in &report.failed {
            core.metrics.tick(name.as_str(), "failed");
            tracing::warn!(schedule = name.as_str(), error, "schedule could not fire");
        }
        if report.fired.iter().any(|t| t.task.created) {
            core.wake_claimers();
        }
        // Until the earliest next fire time, in the database's clock, less the pass's own
        // time since it read the clock.
        let until_next = match (report.next_due, report.now) {
            (Some(next), Some(now)) => (next - now)
                .to_std()
                .unwrap_or(Duration::ZERO)
                .saturating_sub(started.elapsed() / 2),
            _ => idle,
        };
        Some((until_next + AFTER_TICK).min(idle))
    }
}

/// A warning when no live agent (not stopped, its own liveness deadline not passed) handles
/// `task_type`: its schedule's tasks would wait (and, with `unserved_after`, be dead-lettered).
/// `None` when one does, or when the registry cannot be read (the add itself will then say
/// what is wrong).
pub(crate) async fn unserved_warning(
    core: &Core,
    task_type: &leasehold_shared::TaskType,
) -> Option<String> {
    let agents = core.store.agent_list().await.ok()?;
    // Each agent by its own liveness deadline; our TTL + grace only for rows without one.
    let stale = core.settings.lease_ttl + core.settings.grace;
    let served = agents.iter().any(|a| {
        let alive = match a.alive_until {
            Some(until) => until > a.now,
            None => (a.now - a.heartbeat_at)
                .to_std()
                .is_ok_and(|age| age <= stale),
        };
        a.state != leasehold_shared::domain::AgentState::Stopped
            && alive
            && a.task_types.iter().any(|t| t == task_type.as_str())
    });
    (!served).then(|| unserved_message(task_type))
}

/// The warning of [`unserved_warning`]: the type by its name, never the newtype's Debug form.
fn unserved_message(task_type: &leasehold_shared::TaskType) -> String {
    format!(
        "no live agent handles task type {}: its tasks will wait until one does",
        task_type.as_str()
    )
}

/// Upserts the schedules of the agent's configuration ([`ScheduleWriteMode::Declare`]: a
/// restart never re-enables one an operator disabled), audited as actor `config:<agent>`.
/// Logs each outcome and a warning for a type no live agent handles.
pub(crate) async fn declare(
    core: &Core,
    schedules: &[leasehold_shared::domain::Schedule],
) -> leasehold_shared::store::Result<()> {
    use leasehold_shared::domain::ScheduleAddOutcome;
    use leasehold_shared::store::{ScheduleAddParams, ScheduleWriteMode};
    let actor = leasehold_shared::Actor {
        name: format!("config:{}", core.id),
        role: leasehold_shared::Role::System,
    };
    for schedule in schedules {
        let added = core
            .store
            .schedule_add(ScheduleAddParams {
                schedule: schedule.clone(),
                mode: ScheduleWriteMode::Declare,
                actor: actor.clone(),
            })
            .await?;
        let name = schedule.name().as_str();
        match added.outcome {
            ScheduleAddOutcome::Unchanged => {
                tracing::debug!(schedule = name, "schedule as declared")
            }
            outcome => tracing::info!(
                schedule = name,
                outcome = outcome.as_str(),
                enabled = added.record.schedule.enabled(),
                "declared schedule"
            ),
        }
        if let Some(warning) = unserved_warning(core, schedule.task_type()).await {
            tracing::warn!(schedule = name, "{warning}");
        }
    }
    if !schedules.is_empty() {
        core.schedules_changed.notify_one();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_unserved_warning_names_the_type_as_written() {
        let t = leasehold_shared::TaskType::new("report.build").unwrap();
        assert_eq!(
            unserved_message(&t),
            "no live agent handles task type report.build: its tasks will wait until one does"
        );
    }
}
