//! One execution alone, on paused time: started on a task the in-memory queue leased, its
//! outcome read from the completer's end of the queue.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::Ordering;

use leasehold_shared::store::ClaimParams;
use leasehold_shared::{TaskId, TaskType};
use tokio::sync::mpsc;

use super::*;
use crate::runtime::heartbeat::Heartbeat;
use crate::runtime::memory::{self, MemoryQueue, Stops};
use crate::runtime::queue::ClaimQueue;
use crate::runtime::renewal::{Renewable, now};
use crate::runtime::settings::RuntimeSettings;

const TIMEOUT: Duration = Duration::from_secs(2);

/// Starts one execution of a `work` task with `timeout` (else the default of 30 min), its
/// handler working for `run_for` (ignoring stops when told to): the core, the completer's
/// queue, what the handler was asked to stop for, and when it started.
async fn execute(
    run_for: Option<Duration>,
    ignores_stop: bool,
    timeout: Option<Duration>,
) -> (
    Arc<Core>,
    mpsc::UnboundedReceiver<Finished>,
    Arc<Stops>,
    tokio::time::Instant,
) {
    let queue = MemoryQueue::new();
    queue.enqueue("work", 1, 3, timeout);
    let settings = RuntimeSettings {
        stop_grace: Duration::from_secs(1),
        ..RuntimeSettings::default()
    };
    let (handlers, stops) = memory::sleepers(run_for, ignores_stop);
    let (core, rx) = memory::core(settings, handlers);
    let claimed = queue
        .task_claim(ClaimParams {
            owner: core.id.clone(),
            task_types: vec![TaskType::new("work").unwrap()],
            batch: 1,
            lease_ttl: core.settings.lease_ttl,
        })
        .await
        .unwrap();
    let started = tokio::time::Instant::now();
    let task = claimed.tasks.into_iter().next().unwrap();
    start(
        &core,
        task,
        now(),
        claimed.now,
        &mut BatchTimings::default(),
        &mut Vec::new(),
    );
    (core, rx, stops, started)
}

fn failure_code(f: &Finished) -> Option<&str> {
    match &f.action {
        FinishAction::Complete(Completion::Failed { error }) => Some(error.code.as_str()),
        _ => None,
    }
}

#[tokio::test(start_paused = true)]
async fn an_attempt_that_returns_in_time_succeeds() {
    let (core, mut rx, stops, _) =
        execute(Some(Duration::from_secs(1)), false, Some(TIMEOUT)).await;
    let f = rx.recv().await.unwrap();
    assert!(matches!(
        f.action,
        FinishAction::Complete(Completion::Succeeded { .. })
    ));
    assert!(stops.returned().is_empty() && stops.dropped().is_empty());
    assert_eq!(core.book.executing(), 0, "its slot is free");
}

#[tokio::test(start_paused = true)]
async fn an_attempt_past_its_timeout_is_stopped_and_fails_with_the_timeout_reason() {
    let (core, mut rx, stops, started) = execute(None, false, Some(TIMEOUT)).await;
    let f = rx.recv().await.unwrap();
    assert_eq!(started.elapsed(), TIMEOUT, "stopped at its timeout");
    assert_eq!(failure_code(&f), Some("timeout"), "{:?}", f.action);
    assert_eq!(stops.returned(), [(f.key.id, Some(StopReason::Timeout))]);
    assert_eq!(core.book.executing(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_handler_that_ignores_its_timeout_is_dropped_after_stop_grace_and_fails() {
    let (core, mut rx, stops, started) = execute(None, true, Some(TIMEOUT)).await;
    let f = rx.recv().await.unwrap();
    assert_eq!(
        started.elapsed(),
        TIMEOUT + core.settings.stop_grace,
        "dropped after its grace"
    );
    assert_eq!(failure_code(&f), Some("timeout"), "{:?}", f.action);
    assert_eq!(stops.dropped(), [(f.key.id, Some(StopReason::Timeout))]);
}

#[tokio::test(start_paused = true)]
async fn a_lease_lost_mid_run_stops_the_handler_and_writes_nothing() {
    // No renewal ever lands: the lease is lost at its local deadline, found by the
    // heartbeat's check (the task's timeout of 30 min is far off).
    let (core, mut rx, stops, started) = execute(None, false, None).await;
    let safe_in = core.settings.lease_ttl - core.settings.safety_margin();
    let mut heartbeat = Heartbeat {
        core: Arc::clone(&core),
    };
    tokio::time::sleep(safe_in - Duration::from_millis(1)).await;
    heartbeat.check(now());
    assert!(stops.dropped().is_empty(), "still provable");
    tokio::time::sleep(Duration::from_millis(1)).await;
    heartbeat.check(now());
    // The execution drops its handler without waiting for anything.
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    assert_eq!(started.elapsed(), safe_in, "no time passed");
    assert_eq!(
        stops.dropped(),
        [(TaskId(1), Some(StopReason::LeaseLost))],
        "the handler was dropped at once at the local deadline, its lease lost"
    );
    let f = tokio::time::timeout(Duration::from_secs(60), rx.recv()).await;
    assert!(f.is_err(), "nothing is written for a lost lease: {f:?}");
    assert_eq!(core.stats.lease_lost.load(Ordering::Relaxed), 1);
    assert_eq!(core.book.len(), 0, "the lease left the book");
    assert_eq!(core.book.executing(), 0);
}
