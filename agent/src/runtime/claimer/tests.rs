//! The claimer alone, on paused time, against the in-memory queue: how much it claims, how it
//! pauses while claims fail or hang, and how promptly it stops.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use leasehold_shared::TaskStatus;
use tokio::time::Instant;

use super::*;
use crate::runtime::memory::{self, Cue, MemoryQueue};
use crate::runtime::settings::RuntimeSettings;

const CLAIM: &str = "task_claim";

/// One claim worker, `concurrency` slots, handlers that work for `run_for`.
fn claimer(
    queue: &Arc<MemoryQueue>,
    concurrency: u32,
    run_for: Option<Duration>,
) -> (Claimer, Arc<Core>) {
    let settings = RuntimeSettings {
        concurrency,
        claim_workers: 1,
        ..RuntimeSettings::default()
    };
    let (handlers, _) = memory::sleepers(run_for, false);
    let (core, _rx) = memory::core(settings, handlers);
    let claimer = Claimer {
        core: Arc::clone(&core),
        queue: Arc::clone(queue) as Arc<dyn ClaimQueue>,
        idle_check: None,
    };
    (claimer, core)
}

/// The time between consecutive calls, in milliseconds.
fn gaps(queue: &MemoryQueue) -> Vec<u128> {
    let calls = queue.calls(CLAIM);
    calls
        .windows(2)
        .map(|w| (w[1].at - w[0].at).as_millis())
        .collect()
}

#[test]
fn claim_pauses_double_to_the_cap_and_never_end() {
    let ms: Vec<u128> = CLAIM_BACKOFF
        .build()
        .take(9)
        .map(|d| d.as_millis())
        .collect();
    assert_eq!(ms, [100, 200, 400, 800, 1600, 3200, 5000, 5000, 5000]);
}

#[tokio::test(start_paused = true)]
async fn claims_no_more_than_the_free_slots() {
    let queue = MemoryQueue::new();
    queue.enqueue("work", 10, 3, None);
    let (claimer, core) = claimer(&queue, 3, None);
    let stop = CancellationToken::new();
    let run = tokio::spawn(claimer.run(stop.clone()));
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(queue.count(TaskStatus::Running), 3, "only the free slots");
    assert_eq!(core.book.executing(), 3);
    assert!(
        queue.calls(CLAIM).iter().all(|c| c.size <= 3),
        "no claim asked for more than the slots: {:?}",
        queue.calls(CLAIM)
    );
    stop.cancel();
    run.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_freed_slot_is_claimed_again() {
    let queue = MemoryQueue::new();
    queue.enqueue("work", 4, 3, None);
    // Each task works for 2 s: two slots take the four tasks in two rounds.
    let (claimer, core) = claimer(&queue, 2, Some(Duration::from_secs(2)));
    let stop = CancellationToken::new();
    let run = tokio::spawn(claimer.run(stop.clone()));
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(queue.count(TaskStatus::Queued), 0, "the second round began");
    assert_eq!(core.book.executing(), 2);
    stop.cancel();
    run.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn failed_claims_pause_with_backoff_and_resume_when_the_queue_answers() {
    let queue = MemoryQueue::new();
    queue.enqueue("work", 2, 3, None);
    for _ in 0..4 {
        queue.cue(CLAIM, Cue::Fail);
    }
    let (claimer, _core) = claimer(&queue, 10, None);
    let stop = CancellationToken::new();
    let run = tokio::spawn(claimer.run(stop.clone()));
    tokio::time::sleep(Duration::from_secs(3)).await;
    let gaps = gaps(&queue);
    // Four failures: paused 100, 200, 400, 800 ms (each ±10 %), then the fifth claim lands.
    for (gap, pause) in gaps.iter().zip([100u128, 200, 400, 800]) {
        assert!(
            (pause * 9 / 10..=pause * 11 / 10).contains(gap),
            "pauses {gaps:?} should be 100, 200, 400, 800 ms ±10 %"
        );
    }
    assert!(gaps.len() >= 4, "claims resumed: {gaps:?}");
    assert_eq!(
        queue.count(TaskStatus::Running),
        2,
        "the claim after the failures took the tasks"
    );
    // After the queue answered again, claims follow the poll interval, not the backoff.
    if let Some(after) = gaps.get(4) {
        assert!(*after <= 1100, "back to polling: {gaps:?}");
    }
    stop.cancel();
    run.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_hanging_claim_is_given_up_after_its_timeout_and_its_slots_unreserved() {
    let queue = MemoryQueue::new();
    queue.cue(CLAIM, Cue::Hang);
    let (claimer, core) = claimer(&queue, 4, None);
    // The default TTL of 20 s: the claim is given up after 10 s + 1 s.
    let timeout = Duration::from_secs(11);
    let stop = CancellationToken::new();
    let run = tokio::spawn(claimer.run(stop.clone()));
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(core.book.reserved(), 4, "the hanging claim holds its slots");
    tokio::time::sleep(timeout - Duration::from_secs(5) + Duration::from_millis(50)).await;
    assert_eq!(
        core.book.reserved(),
        0,
        "given up: its slots are free again"
    );
    assert_eq!(queue.calls(CLAIM).len(), 1, "paused before the next claim");
    tokio::time::sleep(Duration::from_millis(100)).await;
    let calls = queue.calls(CLAIM);
    assert_eq!(calls.len(), 2, "claims again after the first pause");
    let next = calls[1].at - calls[0].at;
    assert!(
        (timeout + Duration::from_millis(90)..=timeout + Duration::from_millis(110))
            .contains(&next),
        "the next claim {next:?} after the timeout and a 100 ms pause"
    );
    assert_eq!(calls[1].size, 4, "with every slot again");
    stop.cancel();
    run.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn stop_ends_it_promptly_while_polling_and_while_paused() {
    for cue in [None, Some(Cue::Fail)] {
        let queue = MemoryQueue::new();
        if let Some(cue) = cue {
            queue.cue(CLAIM, cue);
        }
        let (claimer, _core) = claimer(&queue, 4, None);
        let stop = CancellationToken::new();
        let run = tokio::spawn(claimer.run(stop.clone()));
        // Inside the poll wait (1 s), or inside the first backoff pause (100 ms).
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(queue.calls(CLAIM).len(), 1);
        let asked = Instant::now();
        stop.cancel();
        run.await.unwrap();
        assert_eq!(
            Instant::now() - asked,
            Duration::ZERO,
            "stopped at once ({cue:?})"
        );
    }
}

/// A task enqueued while the only slot is reserved by a claim in flight (whose snapshot is
/// older than the task): the NOTIFY's wake-up goes to the other worker, which has no slot to
/// claim with. The worker whose claim came back empty must look again at once, not after the
/// poll interval.
#[tokio::test(start_paused = true)]
async fn a_wake_up_during_a_claim_is_not_lost_to_a_worker_without_slots() {
    let queue = MemoryQueue::new();
    let settings = RuntimeSettings {
        concurrency: 1,
        claim_workers: 2,
        poll_interval: Duration::from_secs(5),
        ..RuntimeSettings::default()
    };
    let (handlers, _) = memory::sleepers(Some(Duration::from_secs(60)), false);
    let (core, _rx) = memory::core(settings, handlers);
    let claimer = Claimer {
        core: Arc::clone(&core),
        queue: Arc::clone(&queue) as Arc<dyn ClaimQueue>,
        idle_check: None,
    };
    // The first claim sees the empty queue and answers 100 ms later.
    queue.cue(CLAIM, Cue::SlowReply(Duration::from_millis(100)));
    let stop = CancellationToken::new();
    let started = Instant::now();
    let run = tokio::spawn(claimer.run(stop.clone()));
    tokio::time::sleep(Duration::from_millis(10)).await;
    queue.enqueue("work", 1, 3, None);
    core.wake_claimers(); // what the NOTIFY of the enqueue does
    while queue.count(TaskStatus::Running) == 0 {
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "never claimed: {:?}",
            queue.calls(CLAIM)
        );
    }
    let waited = started.elapsed();
    assert!(
        waited < Duration::from_millis(500),
        "claimed after {waited:?}, not right after the slow claim answered (poll 5 s): {:?}",
        queue.calls(CLAIM)
    );
    stop.cancel();
    run.await.unwrap();
}
