//! Prometheus metrics of one agent; [`serve`] is the HTTP endpoint that serves them
//! (`--metrics-listen`, `GET /metrics`, text exposition format), with the agent's liveness and
//! readiness ([`health`]: `GET /healthz`, `GET /readyz`).
//!
//! Label sets stay small: task types are the agent's own registered types, outcomes a fixed set;
//! the leader alone exports the backlog gauges of every type ([`backlog`], at most 1,000).

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

mod backlog;
mod health;
mod serve;
#[cfg(test)]
mod tests;

pub use backlog::{BACKLOG_TYPES_CAP, BacklogRow};
pub use health::{
    DATABASE_CHECK_TTL, DATABASE_TIMEOUT, MigrationCount, Readiness, ReadinessReport,
    ReadinessSource,
};
pub use serve::{bind_metrics, serve_metrics};

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TypeLabel {
    task_type: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SlowLabel {
    task_type: String,
    /// `threshold` or `history`: which rule flagged it.
    rule: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BreakerLabel {
    task_type: String,
    to: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TickLabel {
    schedule: String,
    outcome: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    task_type: String,
    outcome: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OpLabel {
    op: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DirectionLabel {
    direction: &'static str,
}

fn seconds_histogram() -> Histogram {
    // 1 ms … ~9 h in 16 doubling buckets… plus a few more for long tasks.
    Histogram::new(exponential_buckets(0.001, 2.0, 25))
}

/// The per-type series a task touches when it is claimed and when it ends, resolved once per
/// type and kept: the hot path hashes the type name only, and builds no label set (the series
/// are shared handles, so the registry sees every update).
struct TypeSeries {
    claimed: Counter,
    queue_wait: Histogram,
    run_time: Histogram,
    /// By outcome name; a handful at most, so a scan.
    outcomes: RwLock<Vec<(&'static str, Counter)>>,
}

/// The agent's metrics.
pub struct Metrics {
    registry: Registry,
    active: Gauge,
    claimed: Family<TypeLabel, Counter>,
    claim_statements: Counter,
    claim_errors: Counter,
    queue_wait: Family<TypeLabel, Histogram, fn() -> Histogram>,
    run_time: Family<TypeLabel, Histogram, fn() -> Histogram>,
    outcomes: Family<OutcomeLabel, Counter>,
    renewals: Counter,
    renewal_failures: Counter,
    fenced: Family<OpLabel, Counter>,
    leases_lost: Family<OpLabel, Counter>,
    recoveries: Counter,
    clock_jumps: Family<DirectionLabel, Counter>,
    ticks: Family<TickLabel, Counter>,
    timeouts: Family<TypeLabel, Counter>,
    slow: Family<SlowLabel, Counter>,
    shed: Family<TypeLabel, Counter>,
    breakers: Family<BreakerLabel, Counter>,
    database_up: Gauge,
    leader: Gauge,
    /// The leader-only backlog gauges.
    backlog: backlog::Backlog,
    by_type: RwLock<HashMap<String, Arc<TypeSeries>>>,
    enqueued: Family<TypeLabel, Counter>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("leasehold");
        let m = Metrics {
            active: Gauge::default(),
            claimed: Family::default(),
            claim_statements: Counter::default(),
            claim_errors: Counter::default(),
            queue_wait: Family::new_with_constructor(seconds_histogram),
            run_time: Family::new_with_constructor(seconds_histogram),
            outcomes: Family::default(),
            renewals: Counter::default(),
            renewal_failures: Counter::default(),
            fenced: Family::default(),
            leases_lost: Family::default(),
            recoveries: Counter::default(),
            clock_jumps: Family::default(),
            ticks: Family::default(),
            timeouts: Family::default(),
            slow: Family::default(),
            shed: Family::default(),
            breakers: Family::default(),
            database_up: Gauge::default(),
            leader: Gauge::default(),
            backlog: backlog::Backlog::default(),
            by_type: RwLock::default(),
            enqueued: Family::default(),
            registry: Registry::default(),
        };
        registry.register(
            "active_tasks",
            "Executions running on this agent",
            m.active.clone(),
        );
        registry.register(
            "tasks_claimed",
            "Tasks claimed by this agent",
            m.claimed.clone(),
        );
        registry.register(
            "claim_statements",
            "Claim statements run",
            m.claim_statements.clone(),
        );
        registry.register(
            "claim_errors",
            "Claim statements that failed",
            m.claim_errors.clone(),
        );
        registry.register(
            "queue_wait_seconds",
            "Time from due to claimed, by type",
            m.queue_wait.clone(),
        );
        registry.register(
            "execution_seconds",
            "Run time of an attempt, by type",
            m.run_time.clone(),
        );
        registry.register(
            "task_outcomes",
            "Ended attempts by type and outcome",
            m.outcomes.clone(),
        );
        registry.register(
            "renewals",
            "Batch lease renewals that landed",
            m.renewals.clone(),
        );
        registry.register(
            "renewal_failures",
            "Batch lease renewals that failed or timed out",
            m.renewal_failures.clone(),
        );
        registry.register(
            "fenced_writes",
            "Holder writes refused because the lease moved on, by operation",
            m.fenced.clone(),
        );
        registry.register(
            "leases_lost",
            "Executions stopped because their lease was lost, by how it was found",
            m.leases_lost.clone(),
        );
        registry.register(
            "recoveries",
            "Expired leases recovered by this agent as leader",
            m.recoveries.clone(),
        );
        registry.register(
            "database_clock_jumps",
            "Jumps of the database clock against monotonic time seen by maintenance, by direction \
             (a forward jump holds lease recovery for one TTL)",
            m.clock_jumps.clone(),
        );
        registry.register(
            "schedule_ticks",
            "Cron ticks this agent fired as leader, by schedule and outcome (enqueued; duplicate: \
             another leader had enqueued the tick; failed: not enqueued)",
            m.ticks.clone(),
        );
        registry.register(
            "timeouts",
            "Attempts stopped by their timeout, by type",
            m.timeouts.clone(),
        );
        registry.register(
            "slow_tasks",
            "Executions flagged slow, by type and rule (threshold: past the type's slow_after; \
             history: past the p95 of its recent successful runs)",
            m.slow.clone(),
        );
        registry.register(
            "tasks_enqueued",
            "Tasks enqueued, by type, as the leader's history sampler counts them from the \
             database (every producer's enqueues, not this agent's): exported by the leader \
             only, raised by what each sampler pass newly counts",
            m.enqueued.clone(),
        );
        registry.register(
            "tasks_shed",
            "Waiting tasks this agent cancelled as leader by load shedding (their type's \
             shed_after passed), by type",
            m.shed.clone(),
        );
        registry.register(
            "breaker_transitions",
            "Circuit breaker moves this agent made as leader, by type and the state moved to \
             (open, half_open, closed)",
            m.breakers.clone(),
        );
        registry.register(
            "database_up",
            "1 while the last database round trip succeeded",
            m.database_up.clone(),
        );
        registry.register(
            "leader",
            "1 while this agent holds the leader lease",
            m.leader.clone(),
        );
        m.backlog.register(&mut registry);
        // Series that exist from the start, so dashboards and alerts see zeros, not gaps.
        for op in ["renew", "complete", "release", "progress"] {
            m.fenced
                .get_or_create(&OpLabel { op: op.to_string() })
                .inc_by(0);
        }
        for direction in ["forward", "backward"] {
            m.clock_jumps
                .get_or_create(&DirectionLabel { direction })
                .inc_by(0);
        }
        for how in ["revoked", "unprovable"] {
            m.leases_lost
                .get_or_create(&OpLabel {
                    op: how.to_string(),
                })
                .inc_by(0);
        }
        Metrics { registry, ..m }
    }

    /// Creates the per-type series of the agent's task types at zero.
    pub(crate) fn register_types<'a>(&self, types: impl IntoIterator<Item = &'a str>) {
        for t in types {
            let label = TypeLabel {
                task_type: t.to_string(),
            };
            self.claimed.get_or_create(&label).inc_by(0);
            self.timeouts.get_or_create(&label).inc_by(0);
            for rule in ["threshold", "history"] {
                self.slow
                    .get_or_create(&SlowLabel {
                        task_type: t.to_string(),
                        rule: rule.to_string(),
                    })
                    .inc_by(0);
            }
        }
    }

    pub(crate) fn set_active(&self, n: usize) {
        self.active.set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    pub(crate) fn claim_statement(&self, ok: bool) {
        self.claim_statements.inc();
        if !ok {
            self.claim_errors.inc();
        }
    }

    /// The series of `task_type`, made on first use.
    fn series(&self, task_type: &str) -> Arc<TypeSeries> {
        if let Some(found) = self
            .by_type
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(task_type)
        {
            return Arc::clone(found);
        }
        let label = TypeLabel {
            task_type: task_type.to_string(),
        };
        let made = Arc::new(TypeSeries {
            claimed: self.claimed.get_or_create(&label).clone(),
            queue_wait: self.queue_wait.get_or_create(&label).clone(),
            run_time: self.run_time.get_or_create(&label).clone(),
            outcomes: RwLock::default(),
        });
        let mut by_type = self.by_type.write().unwrap_or_else(|p| p.into_inner());
        Arc::clone(by_type.entry(task_type.to_string()).or_insert(made))
    }

    pub(crate) fn claimed(&self, task_type: &str, queue_wait: Duration) {
        let series = self.series(task_type);
        series.claimed.inc();
        series.queue_wait.observe(queue_wait.as_secs_f64());
    }

    pub(crate) fn finished(&self, task_type: &str, outcome: &'static str, run_time: Duration) {
        let series = self.series(task_type);
        series.run_time.observe(run_time.as_secs_f64());
        let found = series
            .outcomes
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .find(|(name, _)| *name == outcome)
            .map(|(_, counter)| counter.clone());
        let counter = found.unwrap_or_else(|| {
            let counter = self
                .outcomes
                .get_or_create(&OutcomeLabel {
                    task_type: task_type.to_string(),
                    outcome: outcome.to_string(),
                })
                .clone();
            series
                .outcomes
                .write()
                .unwrap_or_else(|p| p.into_inner())
                .push((outcome, counter.clone()));
            counter
        });
        counter.inc();
    }

    pub(crate) fn renewal(&self, ok: bool) {
        if ok {
            self.renewals.inc();
        } else {
            self.renewal_failures.inc();
        }
    }

    pub(crate) fn fenced(&self, op: &str) {
        self.fenced
            .get_or_create(&OpLabel { op: op.to_string() })
            .inc();
    }

    pub(crate) fn lease_lost(&self, how: &str) {
        self.leases_lost
            .get_or_create(&OpLabel {
                op: how.to_string(),
            })
            .inc();
    }

    pub(crate) fn recovered(&self, n: usize) {
        self.recoveries.inc_by(u64::try_from(n).unwrap_or(0));
    }

    pub(crate) fn clock_jump(&self, direction: &'static str) {
        self.clock_jumps
            .get_or_create(&DirectionLabel { direction })
            .inc();
    }

    pub(crate) fn tick(&self, schedule: &str, outcome: &str) {
        self.ticks
            .get_or_create(&TickLabel {
                schedule: schedule.to_string(),
                outcome: outcome.to_string(),
            })
            .inc();
    }

    pub(crate) fn timeout(&self, task_type: &str) {
        self.timeouts
            .get_or_create(&TypeLabel {
                task_type: task_type.to_string(),
            })
            .inc();
    }

    /// The history sampler counted `n` more enqueues of `task_type`.
    pub(crate) fn enqueued(&self, task_type: &str, n: u64) {
        self.enqueued
            .get_or_create(&TypeLabel {
                task_type: task_type.to_string(),
            })
            .inc_by(n);
    }

    pub(crate) fn shed(&self, task_type: &str) {
        self.shed
            .get_or_create(&TypeLabel {
                task_type: task_type.to_string(),
            })
            .inc();
    }

    pub(crate) fn breaker(&self, task_type: &str, to: &str) {
        self.breakers
            .get_or_create(&BreakerLabel {
                task_type: task_type.to_string(),
                to: to.to_string(),
            })
            .inc();
    }

    pub(crate) fn slow(&self, task_type: &str, rule: &str) {
        self.slow
            .get_or_create(&SlowLabel {
                task_type: task_type.to_string(),
                rule: rule.to_string(),
            })
            .inc();
    }

    pub(crate) fn database(&self, up: bool) {
        self.database_up.set(i64::from(up));
    }

    pub(crate) fn set_leader(&self, leader: bool) {
        self.leader.set(i64::from(leader));
    }

    /// The backlog gauges of the leader: a series per row (at most [`BACKLOG_TYPES_CAP`]),
    /// those of types not in `rows` removed.
    pub(crate) fn set_backlog(&self, rows: &[BacklogRow]) {
        self.backlog.set(rows);
    }

    /// Removes every backlog series (this agent does not lead).
    pub(crate) fn clear_backlog(&self) {
        self.backlog.clear();
    }

    /// The metrics in the Prometheus text format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}
