//! `GetOverview`: counts per task type for consoles, served from a cache.
//!
//! Invariant: the database answers at most one overview query (and one read of the small
//! `policies` table, for each type's settings in force) per agent per [`OVERVIEW_MAX_AGE`], or
//! per ten times as long as the last one took when that is longer (`read_cache.rs`), however
//! many consoles ask. Polling `count(*)` from every dashboard is what hurts other queues at
//! scale; this keeps the cost flat in the number of consoles and in the depth of the queue.
//!
//! When things fail: a failed query is not cached; the callers that waited on it each query on
//! their own, side by side (`read_cache.rs`), and the next call tries again.

use std::sync::Arc;
use std::time::Duration;

use leasehold_proto::v1 as pb;
use leasehold_shared::domain::{Policy, PolicyScope};
use leasehold_shared::store::{BreakerStatus, Overview, RateFill, Store, StoreError};

use super::convert::{ms, opt_ms};
use super::read_cache::ReadCache;

/// How old a served overview may be at least.
pub const OVERVIEW_MAX_AGE: Duration = Duration::from_secs(1);

/// The last overview.
pub struct OverviewCache {
    last: ReadCache<(), Arc<pb::GetOverviewResponse>>,
}

impl Default for OverviewCache {
    fn default() -> Self {
        OverviewCache {
            last: ReadCache::new(OVERVIEW_MAX_AGE, Duration::ZERO),
        }
    }
}

impl OverviewCache {
    /// Drops the answer (what it counted has changed).
    pub fn clear(&self) {
        self.last.clear();
    }

    /// The cached overview if fresh, else a new one from `store`.
    pub async fn get(&self, store: &dyn Store) -> Result<Arc<pb::GetOverviewResponse>, StoreError> {
        self.last
            .get((), || async {
                let overview = store.task_overview().await?;
                let policies = store.policy_list().await?;
                Ok(Arc::new(to_wire(overview, &policies)))
            })
            .await
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
