//! Lifecycle events and the listeners library users register for them.
//!
//! Listeners are called synchronously, in registration order, on the task that produced the
//! event; they should be quick (hand work to a channel). A listener that panics is caught and
//! logged: it never affects the task, the lease or the other listeners.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::Duration;

use leasehold_shared::{AgentId, LeaseEpoch, TaskError, TaskId, TaskStatus, TaskType};

/// Which rule flagged an execution slow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlowRule {
    /// It ran past its type's fixed slow threshold (`slow_after`).
    Threshold { after: Duration },
    /// It ran past the p95 of its type's `runs` most recent successful runs (at least 20).
    History { p95: Duration, runs: u32 },
}

impl SlowRule {
    /// The running time past which the rule fired.
    pub fn limit(&self) -> Duration {
        match self {
            SlowRule::Threshold { after } => *after,
            SlowRule::History { p95, .. } => *p95,
        }
    }

    /// A word for logs and metrics: `threshold` or `history`.
    pub fn as_str(&self) -> &'static str {
        match self {
            SlowRule::Threshold { .. } => "threshold",
            SlowRule::History { .. } => "history",
        }
    }
}

/// What happened to a task this agent held.
#[derive(Debug, Clone, PartialEq)]
pub enum LifecycleEvent {
    /// An execution started.
    Started {
        id: TaskId,
        task_type: TaskType,
        epoch: LeaseEpoch,
        attempt: i32,
        /// Time between becoming due and being claimed.
        queue_wait: Duration,
    },
    /// The attempt succeeded (or partially succeeded) and the completion committed.
    Completed {
        id: TaskId,
        task_type: TaskType,
        status: TaskStatus,
        run_time: Duration,
    },
    /// The attempt failed; `next` says what the task became (retry_wait or dead).
    Failed {
        id: TaskId,
        task_type: TaskType,
        error: TaskError,
        next: TaskStatus,
        run_time: Duration,
    },
    /// The failed task will run again.
    Retried {
        id: TaskId,
        task_type: TaskType,
        attempt: i32,
    },
    /// The task went to the dead-letter queue.
    DeadLettered {
        id: TaskId,
        task_type: TaskType,
        error: TaskError,
    },
    /// The task was cancelled by an operator and stopped.
    Cancelled { id: TaskId, task_type: TaskType },
    /// The lease was given back (shutdown) so another agent can start the task at once.
    Released { id: TaskId, task_type: TaskType },
    /// The handler snoozed the task: it waits again until `until` (database time), its attempt
    /// given back.
    Snoozed {
        id: TaskId,
        task_type: TaskType,
        until: Option<chrono::DateTime<chrono::Utc>>,
    },
    /// The execution has run longer than its type's slow threshold, or than the p95 of its
    /// type's recent successful runs; `rule` says which (the first one passed).
    Slow {
        id: TaskId,
        task_type: TaskType,
        running_for: Duration,
        rule: SlowRule,
    },
    /// The lease is gone (revoked, fenced, or not provable in time): the execution was stopped.
    LeaseLost {
        id: TaskId,
        task_type: TaskType,
        epoch: LeaseEpoch,
        reason: &'static str,
    },
    /// The leader moved a type's circuit breaker: opened it after `failures` failures (or after
    /// a failed half-open try), half-opened it after its cooldown, or closed it after a
    /// successful try.
    Breaker {
        task_type: TaskType,
        from: leasehold_shared::domain::BreakerState,
        to: leasehold_shared::domain::BreakerState,
        failures: Option<u64>,
    },
    /// The leader recovered a batch of expired leases.
    RecoveryBatch {
        tasks: Vec<(TaskId, AgentId, LeaseEpoch, TaskStatus)>,
    },
    /// The leader fired a cron tick: `created` is false when the tick's task already existed
    /// (another leader enqueued it).
    ScheduleFired {
        schedule: String,
        tick: chrono::DateTime<chrono::Utc>,
        task: TaskId,
        created: bool,
    },
    /// This agent took a resource lease: a lock, or shard `shard` = (group, number).
    ResourceAcquired {
        name: String,
        shard: Option<(String, u32)>,
        token: i64,
    },
    /// This agent no longer holds a resource lease: `reason` is released, revoked (taken over
    /// or forced free) or unprovable (not renewed before its local deadline). Stop acting on
    /// it at once.
    ResourceLost {
        name: String,
        shard: Option<(String, u32)>,
        token: i64,
        reason: &'static str,
    },
}

/// Receives lifecycle events.
pub trait LifecycleListener: Send + Sync + 'static {
    fn on_event(&self, event: &LifecycleEvent);
}

impl<F> LifecycleListener for F
where
    F: Fn(&LifecycleEvent) + Send + Sync + 'static,
{
    fn on_event(&self, event: &LifecycleEvent) {
        self(event)
    }
}

/// The registered listeners.
#[derive(Clone, Default)]
pub(crate) struct Listeners(Vec<Arc<dyn LifecycleListener>>);

impl Listeners {
    pub(crate) fn push(&mut self, listener: Arc<dyn LifecycleListener>) {
        self.0.push(listener);
    }

    /// Builds the event only when someone listens (hot paths: one per task).
    pub(crate) fn emit_with(&self, event: impl FnOnce() -> LifecycleEvent) {
        if !self.0.is_empty() {
            self.emit(event());
        }
    }

    pub(crate) fn emit(&self, event: LifecycleEvent) {
        for listener in &self.0 {
            if catch_unwind(AssertUnwindSafe(|| listener.on_event(&event))).is_err() {
                tracing::error!(event = ?event, "a lifecycle listener panicked; the task is not affected");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[test]
    fn a_panicking_listener_does_not_stop_the_others() {
        let seen = Arc::new(AtomicU32::new(0));
        let mut listeners = Listeners::default();
        #[allow(clippy::panic)]
        listeners.push(Arc::new(|_: &LifecycleEvent| panic!("listener bug")));
        let s = Arc::clone(&seen);
        listeners.push(Arc::new(move |_: &LifecycleEvent| {
            s.fetch_add(1, Ordering::Relaxed);
        }));
        listeners.emit(LifecycleEvent::RecoveryBatch { tasks: vec![] });
        assert_eq!(seen.load(Ordering::Relaxed), 1);
    }
}
