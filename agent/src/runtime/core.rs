//! What every service of one running agent shares: its identity, stores, handlers, lease book,
//! listeners, metrics, policy cache, the claimer's wake-up and the completion queue; and the
//! bookkeeping of its resource leases (local deadline, hold, drop, give back, fences), which the
//! keeper and the lock handles of [`super::resources`] call.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant, SystemTime};

use leasehold_shared::domain::policy::{DEFAULT_SLOW_THRESHOLD, DEFAULT_TIMEOUT};
use leasehold_shared::domain::{LeaseOutcome, Policy};
use leasehold_shared::store::{AnyStore, Completion, GroupName, ResourceHolderParams};
use leasehold_shared::{AgentId, LeaseEpoch, LeaseKey, Store, StoreError, TaskId, TaskType};
use serde::Serialize;
use tokio::sync::{Notify, mpsc, watch};

use super::book::LeaseBook;
use super::events::{LifecycleEvent, Listeners};
use super::feed::{Feed, FeedEvent};
use super::history::RunHistory;
use super::metrics::Metrics;
use super::resources::{Held, LossReason, resource};
use super::settings::RuntimeSettings;
use crate::handler::HandlerRegistry;

/// An attempt that ended, on its way to the completer.
#[derive(Debug)]
pub(crate) struct Finished {
    pub(crate) key: LeaseKey,
    pub(crate) task_type: TaskType,
    pub(crate) attempt: i32,
    pub(crate) run_time: Duration,
    pub(crate) action: FinishAction,
}

#[derive(Debug)]
pub(crate) enum FinishAction {
    Complete(Completion),
    /// Give the lease back so the task runs again at once (shutdown).
    Release,
}

/// Counters of one run, for `--exit-when-idle` summaries.
#[derive(Debug, Default)]
pub(crate) struct Stats {
    pub(crate) claimed: AtomicU64,
    pub(crate) succeeded: AtomicU64,
    pub(crate) partially_succeeded: AtomicU64,
    pub(crate) failed: AtomicU64,
    pub(crate) retried: AtomicU64,
    pub(crate) dead: AtomicU64,
    pub(crate) cancelled: AtomicU64,
    pub(crate) released: AtomicU64,
    pub(crate) snoozed: AtomicU64,
    pub(crate) fenced: AtomicU64,
    pub(crate) lease_lost: AtomicU64,
    pub(crate) recovered: AtomicU64,
    pub(crate) renewal_failures: AtomicU64,
}

pub(crate) fn bump(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

/// What a run did, printed by `--exit-when-idle` and returned by [`super::Agent::run`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RunSummary {
    pub agent_id: String,
    pub claimed: u64,
    pub succeeded: u64,
    pub partially_succeeded: u64,
    /// Failed attempts (each then retried or dead-lettered).
    pub failed: u64,
    pub retried: u64,
    pub dead: u64,
    pub cancelled: u64,
    pub released: u64,
    /// Attempts a handler snoozed (each task waits again, its attempt given back).
    pub snoozed: u64,
    pub fenced: u64,
    pub lease_lost: u64,
    pub recovered: u64,
    pub renewal_failures: u64,
    /// Why the run ended: `signal`, `idle`, `idle_timeout`, `forced`, `drain` or `failed`.
    pub ended_by: String,
    /// With `--exit-when-idle`: the state of the run's types when it ended (its keys appear at
    /// the top level of the JSON summary).
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub idle: Option<super::idle::IdleSummary>,
}

impl RunSummary {
    /// True when every task this run ended succeeded (the `--exit-when-idle` exit status).
    pub fn all_succeeded(&self) -> bool {
        self.failed == 0
            && self.dead == 0
            && self.cancelled == 0
            && self.lease_lost == 0
            && self.partially_succeeded == 0
    }
}

impl Stats {
    pub(crate) fn summary(&self, agent_id: &AgentId, ended_by: &str) -> RunSummary {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        RunSummary {
            agent_id: agent_id.as_str().to_string(),
            claimed: g(&self.claimed),
            succeeded: g(&self.succeeded),
            partially_succeeded: g(&self.partially_succeeded),
            failed: g(&self.failed),
            retried: g(&self.retried),
            dead: g(&self.dead),
            cancelled: g(&self.cancelled),
            released: g(&self.released),
            snoozed: g(&self.snoozed),
            fenced: g(&self.fenced),
            lease_lost: g(&self.lease_lost),
            recovered: g(&self.recovered),
            renewal_failures: g(&self.renewal_failures),
            ended_by: ended_by.to_string(),
            idle: None,
        }
    }
}

/// A type's attempt timeout and slow threshold.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TypeTimings {
    pub(crate) timeout: Duration,
    pub(crate) slow_after: Duration,
}

/// The timings of the types of one claim batch, each looked up once (a batch holds few types).
#[derive(Debug, Default)]
pub(crate) struct BatchTimings(Vec<(TaskType, TypeTimings)>);

impl BatchTimings {
    pub(crate) fn get(&mut self, cache: &PolicyCache, task_type: &TaskType) -> TypeTimings {
        if let Some((_, t)) = self.0.iter().find(|(ty, _)| ty == task_type) {
            return *t;
        }
        let t = cache.timings(task_type);
        self.0.push((task_type.clone(), t));
        t
    }
}

/// Per-type timeouts and slow thresholds, refreshed from `policies` by the registry loop.
#[derive(Debug, Default)]
pub(crate) struct PolicyCache {
    by_scope: RwLock<HashMap<String, Policy>>,
}

impl PolicyCache {
    pub(crate) fn replace(&self, policies: Vec<Policy>) {
        let map = policies
            .into_iter()
            .map(|p| (p.scope.key().to_string(), p))
            .collect();
        if let Ok(mut guard) = self.by_scope.write() {
            *guard = map;
        }
    }

    /// The attempt timeout and slow threshold of `task_type` (its own policy, else the global
    /// one, else the defaults), under one read of the cache.
    pub(crate) fn timings(&self, task_type: &TaskType) -> TypeTimings {
        let Ok(guard) = self.by_scope.read() else {
            return TypeTimings {
                timeout: DEFAULT_TIMEOUT,
                slow_after: DEFAULT_SLOW_THRESHOLD,
            };
        };
        let own = guard.get(task_type.as_str());
        let global = guard.get("*");
        let pick =
            |f: fn(&Policy) -> Option<Duration>| own.and_then(f).or_else(|| global.and_then(f));
        TypeTimings {
            timeout: pick(|p| p.timeout).unwrap_or(DEFAULT_TIMEOUT),
            slow_after: pick(|p| p.slow_threshold).unwrap_or(DEFAULT_SLOW_THRESHOLD),
        }
    }
}

/// Shared by every service of one agent.
pub(crate) struct Core {
    pub(crate) settings: RuntimeSettings,
    pub(crate) id: AgentId,
    pub(crate) store: Arc<dyn Store>,
    /// The connected store behind `store`, by backend: its wake-up source, the PostgreSQL
    /// pool lent to handlers ([`crate::handler::TaskContext::pool`]), the pool to close last.
    pub(crate) database: AnyStore,
    pub(crate) handlers: HandlerRegistry,
    pub(crate) types: Vec<TaskType>,
    pub(crate) book: Arc<LeaseBook>,
    pub(crate) listeners: Listeners,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) policies: PolicyCache,
    /// Each served type's recent successful runs, for the slow-compared-with-history rule.
    pub(crate) history: RunHistory,
    /// Wakes the claimer: a NOTIFY arrived, a slot freed, the listener reconnected.
    pub(crate) wake: Notify,
    /// How many wake-ups there were: a claim worker whose claim came back short looks again at
    /// once when this moved while it claimed (the wake-up may have been taken by a worker that
    /// had no slot to claim with).
    pub(crate) wakes: AtomicU64,
    pub(crate) finished: mpsc::UnboundedSender<Finished>,
    pub(crate) stats: Stats,
    pub(crate) draining: AtomicBool,
    /// What the Watch aggregator is told about leases.
    pub(crate) feed: Arc<Feed>,
    /// True while this agent is the maintenance leader.
    pub(crate) leading: AtomicBool,
    /// The leader term this agent holds (0 when it does not lead): the fence of its firing.
    pub(crate) leader_term: std::sync::atomic::AtomicI64,
    /// Wakes the scheduler: leadership changed, or a schedule was changed through this agent.
    pub(crate) schedules_changed: Notify,
    /// Cancelled by the gRPC `Drain` call: the agent drains as on SIGTERM.
    pub(crate) drain: tokio_util::sync::CancellationToken,
    /// Resource leases (locks, shards) this agent holds.
    pub(crate) holdings: super::resources::Holdings,
}

impl Core {
    pub(crate) fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Relaxed)
    }

    /// Wakes every claim worker (and leaves a permit for one that is not waiting yet).
    pub(crate) fn wake_claimers(&self) {
        self.wakes.fetch_add(1, Ordering::SeqCst);
        self.wake.notify_waiters();
        self.wake.notify_one();
    }

    /// A holder write found the lease moved on: counted in the summary and the metrics, and
    /// logged — never an error (DESIGN §4).
    pub(crate) fn fenced(&self, op: &'static str, id: TaskId, epoch: LeaseEpoch) {
        bump(&self.stats.fenced, 1);
        self.metrics.fenced(op);
        self.feed.push(FeedEvent::Fenced {
            id,
            epoch,
            write: op,
        });
        tracing::warn!(
            task.id = id.0,
            lease.epoch = epoch.0,
            op,
            "write fenced: the lease had moved on"
        );
    }

    /// A lease given back (shutdown): counted in the summary and the metrics, and reported.
    pub(crate) fn released(
        &self,
        id: TaskId,
        epoch: LeaseEpoch,
        task_type: &TaskType,
        run_time: Duration,
    ) {
        bump(&self.stats.released, 1);
        self.feed.push(FeedEvent::Ended {
            id,
            epoch,
            outcome: LeaseOutcome::Released,
        });
        self.metrics
            .finished(task_type.as_str(), "released", run_time);
        self.listeners.emit(LifecycleEvent::Released {
            id,
            task_type: task_type.clone(),
        });
    }

    pub(crate) fn update_active(&self) {
        self.metrics.set_active(self.book.executing());
    }
}

/// The wall-clock time of a monotonic instant (for the Watch stream's `at_ms`).
fn wall(at: Instant) -> SystemTime {
    let now = Instant::now();
    if at >= now {
        SystemTime::now() + (at - now)
    } else {
        SystemTime::now() - (now - at)
    }
}

impl Core {
    /// The local deadline of a lease written by a call sent at `sent`: the TTL after it, or
    /// what the database said is `left` of the lease when that is less (a lock's
    /// `lock_at_most_for` caps its `lease_until`), minus the safety margin. It never passes
    /// the database's `lease_until` − margin: this agent stops believing it holds a lease
    /// before anyone else can take it.
    pub(crate) fn safe_until(&self, sent: Instant, left: Option<Duration>) -> Instant {
        let ttl = self.settings.lease_ttl;
        let lease = left.map_or(ttl, |left| left.min(ttl));
        sent + lease.saturating_sub(self.settings.safety_margin())
    }

    /// Records a new holding (written by a call sent at `sent`, with `left` of it by the
    /// database): the book, listeners, the Watch stream, the log.
    pub(super) fn hold(
        &self,
        name: String,
        group: Option<(GroupName, u32)>,
        token: i64,
        sent: Instant,
        left: Option<Duration>,
        lost: Option<watch::Sender<Option<LossReason>>>,
    ) {
        let held = Held {
            group,
            token,
            safe_until: self.safe_until(sent, left),
            lost,
        };
        let res = resource(&name, &held);
        self.holdings.lock().insert(name.clone(), held);
        tracing::info!(lease = name, token, "resource lease acquired");
        self.feed.push(FeedEvent::Resource {
            resource: res.clone(),
            held: true,
            reason: "acquired",
            at: SystemTime::now(),
        });
        self.listeners.emit(LifecycleEvent::ResourceAcquired {
            name,
            shard: res.group,
            token,
        });
        // Published last, as a loss is (see `drop_holding`).
        self.holdings.publish();
    }

    /// Ends a holding (if it is still the one with `token`); `at` is the last instant it was
    /// provably held.
    pub(super) fn drop_holding(
        &self,
        name: &str,
        token: i64,
        reason: LossReason,
        at: Instant,
    ) -> bool {
        let removed = {
            let mut held = self.holdings.lock();
            match held.get(name) {
                Some(h) if h.token == token => held.remove(name),
                _ => None,
            }
        };
        let Some(h) = removed else { return false };
        let res = resource(name, &h);
        match reason {
            LossReason::Released => tracing::info!(lease = name, token, "resource lease released"),
            _ => tracing::warn!(
                lease = name,
                token,
                reason = reason.as_str(),
                "resource lease lost: its holder was told to stop"
            ),
        }
        if reason != LossReason::Released {
            // Counted in the metrics only: the run summary's lease_lost is about tasks.
            self.metrics.lease_lost(match reason {
                LossReason::Revoked => "resource_revoked",
                _ => "resource_unprovable",
            });
        }
        self.feed.push(FeedEvent::Resource {
            resource: res.clone(),
            held: false,
            reason: reason.as_str(),
            at: wall(at.min(Instant::now())),
        });
        self.listeners.emit(LifecycleEvent::ResourceLost {
            name: name.to_string(),
            shard: res.group,
            token,
            reason: reason.as_str(),
        });
        // The holder and the shard watchers are told last, so by the time `HeldLock::lost`
        // resolves or `shards()` changes, the loss is already logged, counted, streamed and
        // seen by the listeners: one consistent picture (listeners are quick, so "at once"
        // still holds).
        self.holdings.publish();
        if let Some(lost) = &h.lost {
            lost.send_replace(Some(reason));
        }
        true
    }
}

impl Core {
    /// Gives `name` (of `token`) back again at the next renewal: a give-back that failed may
    /// have landed with its reply lost, and a release is idempotent, so its retry is told it
    /// landed rather than counted as fenced.
    pub(super) fn retry_give_back(&self, name: &str, token: i64) {
        self.holdings
            .to_release
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((name.to_string(), token));
    }

    /// This agent's holder write giving `name` (of `token`) back on `conn`; a refused one is
    /// counted as fenced. True when it landed.
    pub(super) async fn give_back(
        &self,
        conn: &dyn Store,
        name: &str,
        token: i64,
    ) -> Result<bool, StoreError> {
        let out = conn
            .resource_release(ResourceHolderParams {
                name: name.to_string(),
                holder: self.id.clone(),
                token,
                ttl: self.settings.lease_ttl,
                actor: None,
            })
            .await?;
        if out.is_none() {
            self.resource_fenced("release", name, token);
        }
        Ok(out.is_some())
    }
}

impl Core {
    /// A holder write on a resource lease was refused: counted and logged, never an error.
    pub(crate) fn resource_fenced(&self, op: &'static str, name: &str, token: i64) {
        bump(&self.stats.fenced, 1);
        self.metrics.fenced(match op {
            "renew" => "resource_renew",
            _ => "resource_release",
        });
        tracing::warn!(
            lease = name,
            token,
            op,
            "resource write fenced: the lease had moved on"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold_shared::domain::PolicyScope;

    fn ty(name: &str) -> TaskType {
        TaskType::new(name).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn timings_take_the_types_own_policy_then_the_global_one_then_the_defaults() {
        let cache = PolicyCache::default();
        let none = cache.timings(&ty("a"));
        assert_eq!(none.timeout, DEFAULT_TIMEOUT);
        assert_eq!(none.slow_after, DEFAULT_SLOW_THRESHOLD);
        let mut global = Policy::inherit(PolicyScope::Global);
        global.timeout = Some(Duration::from_secs(60));
        global.slow_threshold = Some(Duration::from_secs(5));
        let mut own = Policy::inherit(PolicyScope::Type(ty("a")));
        own.timeout = Some(Duration::from_secs(7));
        cache.replace(vec![global, own]);
        let a = cache.timings(&ty("a"));
        assert_eq!(a.timeout, Duration::from_secs(7));
        assert_eq!(
            a.slow_after,
            Duration::from_secs(5),
            "inherited from the global row"
        );
        let b = cache.timings(&ty("b"));
        assert_eq!(b.timeout, Duration::from_secs(60));
        let mut batch = BatchTimings::default();
        assert_eq!(batch.get(&cache, &ty("a")).timeout, Duration::from_secs(7));
        assert_eq!(batch.get(&cache, &ty("b")).timeout, Duration::from_secs(60));
        assert_eq!(batch.get(&cache, &ty("a")).timeout, Duration::from_secs(7));
    }
}
