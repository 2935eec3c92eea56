//! `GetOverview`: counts per task type for consoles, served from a cache.
//!
//! Invariant: the database answers at most one overview query (and one read of the small
//! `policies` table, for each type's settings in force) per [`max_age`] per agent, however many
//! consoles ask — the callers of one refresh wait on the same query (the lock is held across it)
//! and share its answer. Polling `count(*)` from every dashboard is what hurts other queues at
//! scale; this keeps the cost flat in the number of consoles. The query counts every waiting
//! task (about 0.35 s per million on one core), so the cache also keeps it flat in the depth of
//! the queue: an answer is served for [`OVERVIEW_MAX_AGE`] or [`OVERVIEW_COST_FACTOR`] times as
//! long as it took to read, whichever is longer — the overview's reads take at most a tenth of
//! one database connection's time, at 10 million waiting tasks as at 10. The answer carries the
//! database time it was read at (`now_ms`), so a console can tell how old its counts are.
//!
//! When things fail: a failed query is not cached; each waiting caller gets the error and the
//! next call tries again.

use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold_proto::v1 as pb;
use leasehold_shared::domain::{Policy, PolicyScope};
use leasehold_shared::store::{BreakerStatus, Overview, RateFill, Store, StoreError};
use tokio::sync::Mutex;

use super::convert::{ms, opt_ms};

/// How old a served overview may be at least.
pub const OVERVIEW_MAX_AGE: Duration = Duration::from_secs(1);
/// A served overview may be this many times as old as its read took.
pub const OVERVIEW_COST_FACTOR: u32 = 10;

/// How long an overview whose read took `took` is served.
pub fn max_age(took: Duration) -> Duration {
    OVERVIEW_MAX_AGE.max(took.saturating_mul(OVERVIEW_COST_FACTOR))
}

/// The last overview, when it was read and how long that took.
#[derive(Default)]
pub struct OverviewCache {
    last: Mutex<Option<(Instant, Duration, Arc<pb::GetOverviewResponse>)>>,
}

impl OverviewCache {
    /// The cached overview if fresh, else a new one from `store`.
    pub async fn get(&self, store: &dyn Store) -> Result<Arc<pb::GetOverviewResponse>, StoreError> {
        let mut last = self.last.lock().await;
        if let Some((at, took, overview)) = last.as_ref()
            && at.elapsed() < max_age(*took)
        {
            return Ok(Arc::clone(overview));
        }
        let started = Instant::now();
        let overview = store.task_overview().await?;
        let policies = store.policy_list().await?;
        let fresh = Arc::new(to_wire(overview, &policies));
        *last = Some((Instant::now(), started.elapsed(), Arc::clone(&fresh)));
        Ok(fresh)
    }
}

fn to_wire(o: Overview, policies: &[Policy]) -> pb::GetOverviewResponse {
    let global = policies
        .iter()
        .find(|p| p.scope == PolicyScope::Global)
        .cloned()
        .unwrap_or_else(|| Policy::inherit(PolicyScope::Global));
    let settings_of = |t: &leasehold_shared::TaskType| {
        let scope = PolicyScope::Type(t.clone());
        let row = policies
            .iter()
            .find(|p| p.scope == scope)
            .cloned()
            .unwrap_or_else(|| Policy::inherit(scope));
        super::policy_settings::settings(&row, &global)
    };
    pb::GetOverviewResponse {
        types: o
            .types
            .into_iter()
            .map(|t| pb::TypeSummary {
                settings: settings_of(&t.task_type),
                task_type: t.task_type.as_str().to_string(),
                queued: t.queued,
                scheduled: t.scheduled,
                retrying: t.retrying,
                running: t.running,
                dead: t.dead,
                finished_last_minute: t.finished_last_minute,
                dead_last_minute: t.dead_last_minute,
                limit: t.limit,
                paused: t.paused,
                rate: t.rate.map(rate_fill),
                shed_after_ms: t
                    .shed_after
                    .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
                shed_last_minute: t.shed_last_minute,
                per_key_limit: t.per_key_limit,
                breaker: t.breaker.map(breaker_summary),
                oldest_waiting_ms: t
                    .oldest_waiting
                    .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            })
            .collect(),
        global_limit: o.global_limit,
        global_paused: o.global_paused,
        truncated: o.truncated,
        now_ms: ms(o.now),
        global_rate: o.global_rate.map(rate_fill),
    }
}

fn breaker_summary(b: BreakerStatus) -> pb::BreakerSummary {
    let policy = super::policy::breaker_to_wire(b.policy);
    pb::BreakerSummary {
        failures: policy.failures,
        within_ms: policy.within_ms,
        cooldown_ms: policy.cooldown_ms,
        state: b.state.as_str().to_string(),
        since_ms: opt_ms(b.since),
        until_ms: opt_ms(b.until),
    }
}

fn rate_fill(f: RateFill) -> pb::RateFill {
    pb::RateFill {
        limit: Some(super::policy::rate_to_wire(f.limit)),
        used: f.used,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slow_read_is_served_ten_times_as_long_as_it_took() {
        assert_eq!(max_age(Duration::ZERO), OVERVIEW_MAX_AGE);
        assert_eq!(max_age(Duration::from_millis(100)), OVERVIEW_MAX_AGE);
        assert_eq!(
            max_age(Duration::from_millis(340)),
            Duration::from_millis(3400)
        );
        assert_eq!(max_age(Duration::from_secs(3)), Duration::from_secs(30));
        assert_eq!(max_age(Duration::MAX), Duration::MAX);
    }
}
