//! The heartbeat alone, on paused time: real executions held in the book, renewed by the one
//! renewal loop through the in-memory queue's store rules, with renewals that land, fail or
//! hang on cue and leases taken or cancelled in the queue behind the agent's back.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use leasehold_shared::store::{ClaimParams, Completion};
use leasehold_shared::{AgentId, TaskType};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::runtime::core::{BatchTimings, FinishAction, Finished, Stats};
use crate::runtime::executor;
use crate::runtime::memory::{self, Cue, MemoryQueue, Stops};
use crate::runtime::queue::ClaimQueue;
use crate::runtime::renewal::now;
use crate::runtime::settings::RuntimeSettings;

/// The renewal statement, as the queue logs it.
const RENEW: &str = "lease_renew_many";

/// The default settings: a lease TTL of 20 s, a beat every 4 s, a renewal timeout of 2 s and a
/// safety margin of 2 s, so a lease renewed at `t` is safe locally until `t + 18 s`.
fn settings() -> RuntimeSettings {
    RuntimeSettings::default()
}

/// A heartbeat running over `n` executions of `work` tasks claimed at the start.
struct Rig {
    queue: Arc<MemoryQueue>,
    core: Arc<Core>,
    rx: mpsc::UnboundedReceiver<Finished>,
    stops: Arc<Stops>,
    ids: Vec<TaskId>,
    /// Connections opened, the one at start included.
    connects: Arc<AtomicUsize>,
    start: Instant,
    stop: CancellationToken,
    task: JoinHandle<()>,
}

impl Rig {
    /// Starts `n` executions (handlers that work until stopped) and the heartbeat; the
    /// queue's `cues` for the renewal are set before its first beat.
    async fn start(n: usize, cues: &[Cue]) -> Rig {
        let queue = MemoryQueue::new();
        let ids = queue.enqueue("work", n, 3, None);
        let (handlers, stops) = memory::sleepers(None, false);
        let (core, rx) = memory::core(settings(), handlers);
        let start = Instant::now();
        if n > 0 {
            let claimed = queue
                .task_claim(ClaimParams {
                    owner: core.id.clone(),
                    task_types: vec![TaskType::new("work").unwrap()],
                    batch: u32::try_from(n).unwrap(),
                    lease_ttl: core.settings.lease_ttl,
                })
                .await
                .unwrap();
            for task in claimed.tasks {
                executor::start(
                    &core,
                    task,
                    now(),
                    claimed.now,
                    &mut BatchTimings::default(),
                    &mut Vec::new(),
                );
            }
        }
        for cue in cues {
            queue.cue(RENEW, *cue);
        }
        let connects = Arc::new(AtomicUsize::new(0));
        let connect: Connect<Arc<dyn RenewQueue>> = {
            let queue = Arc::clone(&queue);
            let connects = Arc::clone(&connects);
            Arc::new(move || {
                connects.fetch_add(1, Ordering::SeqCst);
                let conn = Arc::clone(&queue) as Arc<dyn RenewQueue>;
                Box::pin(async move { Ok(conn) })
            })
        };
        let conn = connect().await.unwrap();
        let stop = CancellationToken::new();
        let service = Heartbeat::service(Arc::clone(&core), connect, conn);
        let task = tokio::spawn(service.run(stop.clone()));
        Rig {
            queue,
            core,
            rx,
            stops,
            ids,
            connects,
            start,
            stop,
            task,
        }
    }

    /// Lets paused time run to `at` from the start.
    async fn until(&self, at: Duration) {
        tokio::time::sleep_until(self.start + at).await;
        // Let the executions act on what the heartbeat told them.
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    /// The std instant `at` after the start, as the book keeps deadlines.
    fn at(&self, at: Duration) -> std::time::Instant {
        (self.start + at).into_std()
    }

    /// When each renewal statement was sent, from the queue's start.
    fn sent(&self) -> Vec<Duration> {
        self.queue.calls(RENEW).iter().map(|c| c.at).collect()
    }

    /// Every stop a handler saw, returned or dropped.
    fn stopped(&self) -> Vec<(TaskId, Option<StopReason>)> {
        let mut all = self.stops.returned();
        all.extend(self.stops.dropped());
        all
    }

    fn stat(&self, pick: fn(&Stats) -> &AtomicU64) -> u64 {
        pick(&self.core.stats).load(Ordering::Relaxed)
    }

    async fn stop(self) {
        self.stop.cancel();
        self.task.await.unwrap();
    }
}

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

#[tokio::test(start_paused = true)]
async fn renewals_raise_the_lease_in_the_queue_and_its_local_deadline() {
    let rig = Rig::start(1, &[]).await;
    let id = rig.ids[0];
    assert_eq!(rig.core.book.safe_until(id), Some(rig.at(secs(18.0))));
    rig.until(secs(8.5)).await;
    // Beats at once and every 4 s, one connection.
    assert_eq!(rig.sent(), [secs(0.0), secs(4.0), secs(8.0)]);
    assert!(rig.queue.calls(RENEW).iter().all(|c| c.size == 1));
    assert_eq!(rig.connects.load(Ordering::SeqCst), 1);
    // The queue holds the lease until the last renewal + TTL; locally it is safe until that
    // renewal + TTL − margin.
    assert_eq!(rig.queue.row(id).lease_until, Some(rig.start + secs(28.0)));
    assert_eq!(rig.core.book.safe_until(id), Some(rig.at(secs(26.0))));
    // The agent's liveness deadline went with it: last beat + TTL + grace.
    assert_eq!(
        rig.queue.alive_until(&rig.core.id),
        Some(rig.start + secs(8.0 + 25.0))
    );
    // Far past the first local deadline, the execution still runs.
    rig.until(secs(40.0)).await;
    assert_eq!(rig.core.book.executing(), 1);
    assert!(rig.stopped().is_empty(), "{:?}", rig.stopped());
    assert_eq!(rig.stat(|s| &s.renewal_failures), 0);
    assert_eq!(rig.stat(|s| &s.lease_lost), 0);
    rig.stop().await;
}

#[tokio::test(start_paused = true)]
async fn an_idle_agent_still_pushes_its_liveness() {
    let rig = Rig::start(0, &[]).await;
    rig.until(secs(4.5)).await;
    let calls = rig.queue.calls(RENEW);
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert!(calls.iter().all(|c| c.size == 0), "no leases: {calls:?}");
    assert_eq!(
        rig.queue.alive_until(&rig.core.id),
        Some(rig.start + secs(4.0 + 25.0))
    );
    rig.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_lease_taken_by_another_is_lost_at_the_next_beat_and_counted_fenced() {
    let rig = Rig::start(3, &[]).await;
    let (taken, reclaimed, kept) = (rig.ids[0], rig.ids[1], rig.ids[2]);
    rig.until(secs(1.0)).await;
    // One goes to another agent; one is claimed again under a new epoch by this very agent
    // id (the epoch alone fences the old execution).
    let other = AgentId::new("another-agent").unwrap();
    rig.queue.take_over(taken, other.clone());
    rig.queue.take_over(reclaimed, rig.core.id.clone());
    rig.until(secs(3.9)).await;
    assert!(rig.stopped().is_empty(), "nothing is known before the beat");
    rig.until(secs(4.0)).await;
    let mut stopped = rig.stopped();
    stopped.sort_by_key(|(id, _)| *id);
    assert_eq!(
        stopped,
        [
            (taken, Some(StopReason::LeaseLost)),
            (reclaimed, Some(StopReason::LeaseLost))
        ]
    );
    assert_eq!(
        rig.stat(|s| &s.fenced),
        2,
        "each renewal was a fenced write"
    );
    assert_eq!(rig.stat(|s| &s.lease_lost), 2);
    assert_eq!(rig.core.book.len(), 1, "the lost leases left the book");
    assert!(rig.core.book.safe_until(kept).is_some());
    // The new holders' leases are untouched, and never renewed by us again.
    rig.until(secs(12.5)).await;
    let row = rig.queue.row(taken);
    assert_eq!(row.owner, Some(other));
    assert_eq!(row.lease_until, Some(rig.start + secs(20.0)));
    assert_eq!(
        rig.queue.row(reclaimed).lease_until,
        Some(rig.start + secs(20.0))
    );
    assert_eq!(
        rig.queue.row(kept).lease_until,
        Some(rig.start + secs(32.0))
    );
    assert_eq!(rig.stat(|s| &s.fenced), 2);
    rig.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_cancel_requested_in_the_queue_reaches_the_handler_at_the_next_beat() {
    let mut rig = Rig::start(1, &[]).await;
    let id = rig.ids[0];
    rig.until(secs(1.0)).await;
    rig.queue.request_cancel(id);
    rig.until(secs(3.9)).await;
    assert!(rig.stopped().is_empty(), "nothing is known before the beat");
    rig.until(secs(4.0)).await;
    assert_eq!(rig.stops.returned(), [(id, Some(StopReason::Cancelled))]);
    // The handler returned: its attempt ends as cancelled, not lost.
    let finished = rig.rx.recv().await.unwrap();
    assert!(
        matches!(
            finished.action,
            FinishAction::Complete(Completion::Cancelled)
        ),
        "{:?}",
        finished.action
    );
    assert_eq!(rig.stat(|s| &s.lease_lost), 0);
    assert_eq!(rig.stat(|s| &s.fenced), 0);
    rig.stop().await;
}

#[tokio::test(start_paused = true)]
async fn failing_renewals_keep_the_deadline_and_the_execution_is_dropped_at_it() {
    let rig = Rig::start(1, &[]).await;
    let id = rig.ids[0];
    // The beats at 0 s and 4 s land; every renewal after fails.
    rig.until(secs(4.5)).await;
    for _ in 0..20 {
        rig.queue.cue(RENEW, Cue::Fail);
    }
    let deadline = secs(4.0 + 18.0);
    rig.until(deadline - Duration::from_millis(1)).await;
    assert_eq!(rig.stat(|s| &s.renewal_failures), 4, "8, 12, 16, 20 s");
    assert_eq!(rig.core.book.safe_until(id), Some(rig.at(deadline)));
    assert_eq!(rig.core.book.executing(), 1, "still provable");
    assert!(rig.stopped().is_empty(), "{:?}", rig.stopped());
    rig.until(deadline + Duration::from_millis(1)).await;
    assert_eq!(rig.stops.dropped(), [(id, Some(StopReason::LeaseLost))]);
    assert_eq!(rig.core.book.len(), 0);
    assert_eq!(rig.stat(|s| &s.lease_lost), 1);
    assert_eq!(
        rig.stat(|s| &s.fenced),
        0,
        "nothing was fenced: it was unprovable"
    );
    // Dropped before the queue's lease ran out, so before anyone could recover it.
    assert_eq!(rig.queue.row(id).lease_until, Some(rig.start + secs(24.0)));
    // Each failure abandoned the connection; each retry opened another.
    assert!(rig.connects.load(Ordering::SeqCst) >= 5);
    rig.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_hanging_renewal_is_abandoned_at_the_timeout_and_the_next_beat_connects_again() {
    let rig = Rig::start(1, &[Cue::Hang]).await;
    let id = rig.ids[0];
    let timeout = rig.core.settings.renew_timeout();
    assert_eq!(timeout, secs(2.0));
    rig.until(timeout - Duration::from_millis(1)).await;
    assert_eq!(rig.stat(|s| &s.renewal_failures), 0, "still waiting");
    rig.until(timeout).await;
    assert_eq!(
        rig.stat(|s| &s.renewal_failures),
        1,
        "cut off at the timeout"
    );
    assert_eq!(
        rig.connects.load(Ordering::SeqCst),
        1,
        "no reconnect before a beat"
    );
    rig.until(secs(4.0)).await;
    assert_eq!(rig.connects.load(Ordering::SeqCst), 2, "a fresh connection");
    assert_eq!(rig.sent(), [secs(0.0), secs(4.0)]);
    assert_eq!(rig.queue.row(id).lease_until, Some(rig.start + secs(24.0)));
    assert_eq!(rig.core.book.safe_until(id), Some(rig.at(secs(22.0))));
    assert_eq!(rig.core.book.executing(), 1);
    assert_eq!(rig.stat(|s| &s.renewal_failures), 1);
    rig.stop().await;
}
