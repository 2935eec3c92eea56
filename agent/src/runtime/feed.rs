//! The lease feed: what the runtime tells the Watch aggregator about its leases.
//!
//! What changes a lease pushes a [`FeedEvent`] after the change: the claimer (acquired), the
//! heartbeat (renewed, cancel seen, lost), the completer (ended), the progress sink, the
//! resource keeper (locks and shards), `Core`'s shared helpers (fenced, released) and the gRPC
//! service (an operator's cancel served by the holder). The feed is a bounded channel read by one aggregator task
//! (`crate::grpc::hub`), which owns the streamed view of the lease book. Pushing never blocks
//! and never fails the runtime: with no aggregator running it is a no-op, and when the channel
//! is full the event is dropped and counted (`dropped_events` on every Watch update); the
//! aggregator then reconciles its view with the lease book.
//!
//! ```text
//!   executor ─┐
//!   heartbeat ├─ try_send ─▶ [bounded feed] ─▶ aggregator (view of leases) ─▶ watchers
//!   completer ┘    full: drop + count              ▲ reconcile with the book after drops
//! ```

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use chrono::{DateTime, Utc};
use leasehold_shared::domain::LeaseOutcome;
use leasehold_shared::{LeaseEpoch, Progress, TaskId, TaskType};
use tokio::sync::mpsc;

use super::events::SlowRule;

/// Events the feed holds before it drops new ones.
pub const FEED_CAPACITY: usize = 65_536;

/// A lease as claimed.
#[derive(Debug, Clone)]
pub(crate) struct AcquiredLease {
    pub(crate) id: TaskId,
    pub(crate) epoch: LeaseEpoch,
    pub(crate) task_type: TaskType,
    pub(crate) attempt: i32,
    pub(crate) priority: i16,
    pub(crate) started_at: DateTime<Utc>,
    pub(crate) lease_until: DateTime<Utc>,
    pub(crate) timeout: Duration,
}

/// A resource lease (a lock, or a shard of a group) this agent holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HeldResource {
    pub(crate) name: String,
    pub(crate) group: Option<(String, u32)>,
    pub(crate) token: i64,
}

/// One change to this agent's leases.
#[derive(Debug, Clone)]
pub(crate) enum FeedEvent {
    /// A claim took these leases at database time `now`.
    Acquired {
        now: DateTime<Utc>,
        leases: Vec<AcquiredLease>,
    },
    /// A heartbeat renewed these leases at database time `now`.
    Renewed {
        now: DateTime<Utc>,
        leases: Vec<(TaskId, LeaseEpoch, DateTime<Utc>)>,
    },
    /// A heartbeat failed for these leases.
    RenewalFailed {
        reason: Arc<str>,
        leases: Vec<(TaskId, LeaseEpoch)>,
    },
    /// The lease ended; `outcome` says how (the status its task ended in, released or lost).
    Ended {
        id: TaskId,
        epoch: LeaseEpoch,
        outcome: LeaseOutcome,
    },
    /// A holder write was refused.
    Fenced {
        id: TaskId,
        epoch: LeaseEpoch,
        write: &'static str,
    },
    /// Progress was written.
    Progress {
        id: TaskId,
        epoch: LeaseEpoch,
        progress: Progress,
    },
    /// The execution passed its slow threshold or its type's p95 (`rule`).
    Slow {
        id: TaskId,
        epoch: LeaseEpoch,
        running_for: Duration,
        rule: SlowRule,
    },
    /// An operator asked to cancel the task.
    CancelRequested { id: TaskId, epoch: LeaseEpoch },
    /// A resource lease was taken (`held`) or ended; `at` is when the holding began, or the
    /// last instant it was provably held.
    Resource {
        resource: HeldResource,
        held: bool,
        reason: &'static str,
        at: std::time::SystemTime,
    },
}

/// The producer side of the feed, shared by the runtime's services.
#[derive(Debug)]
pub(crate) struct Feed {
    tx: mpsc::Sender<FeedEvent>,
    rx: Mutex<Option<mpsc::Receiver<FeedEvent>>>,
    enabled: AtomicBool,
    dropped: AtomicU64,
}

impl Default for Feed {
    fn default() -> Self {
        let (tx, rx) = mpsc::channel(FEED_CAPACITY);
        Self {
            tx,
            rx: Mutex::new(Some(rx)),
            enabled: AtomicBool::new(false),
            dropped: AtomicU64::new(0),
        }
    }
}

impl Feed {
    /// Hands the receiving side to the aggregator (once) and starts feeding it.
    pub(crate) fn take_receiver(&self) -> Option<mpsc::Receiver<FeedEvent>> {
        let rx = self.rx.lock().unwrap_or_else(|p| p.into_inner()).take();
        if rx.is_some() {
            self.enabled.store(true, Ordering::Release);
        }
        rx
    }

    /// True while an aggregator reads the feed: producers skip building events otherwise.
    pub(crate) fn is_enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    /// Events dropped because the feed was full, since the agent started.
    pub(crate) fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Pushes an event without waiting; a full feed drops and counts it.
    pub(crate) fn push(&self, event: FeedEvent) {
        if !self.is_enabled() {
            return;
        }
        if self.tx.try_send(event).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Pushes the event `make` builds, only when an aggregator reads the feed.
    pub(crate) fn push_with(&self, make: impl FnOnce() -> FeedEvent) {
        if self.is_enabled() {
            self.push(make());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_feed_without_an_aggregator_is_a_no_op_and_a_full_one_counts_drops() {
        let feed = Feed::default();
        feed.push(FeedEvent::CancelRequested {
            id: TaskId(1),
            epoch: LeaseEpoch(1),
        });
        assert_eq!(
            feed.dropped(),
            0,
            "nobody reads: nothing is queued or counted"
        );
        let mut rx = feed.take_receiver().unwrap_or_else(|| panic!("receiver"));
        assert!(feed.take_receiver().is_none(), "handed out once");
        for i in 0..FEED_CAPACITY as i64 + 10 {
            feed.push(FeedEvent::CancelRequested {
                id: TaskId(i),
                epoch: LeaseEpoch(1),
            });
        }
        assert_eq!(feed.dropped(), 10);
        assert!(rx.try_recv().is_ok());
    }
}
