//! The completer alone, on paused time, against the in-memory queue: batches that fail are
//! retried until they land, fenced completions are counted and dropped, releases are written.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::Ordering;

use leasehold_shared::store::ClaimParams;
use leasehold_shared::{LeaseKey, TaskType};

use super::*;
use crate::handler::HandlerRegistry;
use crate::runtime::memory::{self, Cue, MemoryQueue};
use crate::runtime::queue::{ClaimQueue, MaintenanceQueue};
use crate::runtime::settings::RuntimeSettings;

const COMPLETE: &str = "task_complete_many";
const RELEASE: &str = "lease_release_many";
const TTL: Duration = Duration::from_secs(20);

#[test]
fn batch_retries_double_to_the_cap_and_never_end() {
    let ms: Vec<u128> = RETRY_BACKOFF
        .build()
        .take(8)
        .map(|d| d.as_millis())
        .collect();
    assert_eq!(ms, [50, 100, 200, 400, 800, 1600, 2000, 2000]);
}

/// A running completer over `queue`, and its core.
fn start(queue: &Arc<MemoryQueue>) -> (Arc<Core>, CancellationToken, tokio::task::JoinHandle<()>) {
    let (core, rx) = memory::core(RuntimeSettings::default(), HandlerRegistry::new());
    let completer = Completer {
        core: Arc::clone(&core),
        rx,
        queue: Arc::clone(queue) as Arc<dyn CompleteQueue>,
    };
    let stop = CancellationToken::new();
    let run = tokio::spawn(completer.run(stop.clone()));
    (core, stop, run)
}

/// Claims `n` tasks of `work` as `owner`: their lease keys.
async fn leases(queue: &MemoryQueue, owner: &leasehold_shared::AgentId, n: u32) -> Vec<LeaseKey> {
    let claimed = queue
        .task_claim(ClaimParams {
            owner: owner.clone(),
            task_types: vec![TaskType::new("work").unwrap()],
            batch: n,
            lease_ttl: TTL,
        })
        .await
        .unwrap();
    claimed
        .tasks
        .into_iter()
        .map(|t| LeaseKey {
            id: t.id,
            owner: owner.clone(),
            epoch: t.lease_epoch,
        })
        .collect()
}

fn finished(key: LeaseKey, action: FinishAction) -> Finished {
    Finished {
        key,
        task_type: TaskType::new("work").unwrap(),
        attempt: 1,
        run_time: Duration::from_millis(5),
        action,
    }
}

fn succeeded() -> FinishAction {
    FinishAction::Complete(Completion::Succeeded { result: None })
}

#[tokio::test(start_paused = true)]
async fn a_failed_batch_is_retried_with_backoff_and_lands_once_the_queue_answers() {
    let queue = MemoryQueue::new();
    queue.enqueue("work", 5, 3, None);
    let keys = leases(&queue, &memory::agent_id(), 5).await;
    for _ in 0..3 {
        queue.cue(COMPLETE, Cue::Fail);
    }
    let (core, stop, run) = start(&queue);
    for key in keys {
        core.finished.send(finished(key, succeeded())).unwrap();
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let calls = queue.calls(COMPLETE);
    let gaps: Vec<u128> = calls
        .windows(2)
        .map(|w| (w[1].at - w[0].at).as_millis())
        .collect();
    // Three failures, each retried after 50, 100, 200 ms (timers round up to the next ms).
    assert_eq!(gaps.len(), 3, "{gaps:?}");
    for (gap, pause) in gaps.iter().zip([50u128, 100, 200]) {
        assert!((pause..=pause + 2).contains(gap), "{gaps:?}");
    }
    assert!(calls.iter().all(|c| c.size == 5), "one batch, kept whole");
    assert_eq!(queue.count(TaskStatus::Succeeded), 5, "nothing lost");
    assert_eq!(core.stats.succeeded.load(Ordering::Relaxed), 5);
    assert_eq!(core.stats.fenced.load(Ordering::Relaxed), 0);
    stop.cancel();
    run.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_hanging_batch_is_given_up_after_the_ttl_and_written_again() {
    let queue = MemoryQueue::new();
    queue.enqueue("work", 1, 3, None);
    let keys = leases(&queue, &memory::agent_id(), 1).await;
    queue.cue(COMPLETE, Cue::Hang);
    let (core, stop, run) = start(&queue);
    core.finished
        .send(finished(keys[0].clone(), succeeded()))
        .unwrap();
    tokio::time::sleep(TTL + Duration::from_secs(1)).await;
    let calls = queue.calls(COMPLETE);
    assert_eq!(calls.len(), 2, "{calls:?}");
    let gap = calls[1].at - calls[0].at;
    assert_eq!(
        gap,
        TTL + RETRY_MIN,
        "timed out after the TTL, then retried"
    );
    assert_eq!(queue.count(TaskStatus::Succeeded), 1);
    stop.cancel();
    run.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_fenced_completion_is_counted_as_fenced_and_not_retried() {
    let queue = MemoryQueue::new();
    queue.enqueue("work", 1, 3, None);
    // Our lease expires unrenewed; recovery takes it and another agent claims the task.
    let ours = leases(&queue, &memory::agent_id(), 1).await.remove(0);
    tokio::time::sleep(TTL + Duration::from_secs(6)).await;
    let recovered = queue
        .lease_recover_expired(leasehold_shared::store::RecoverParams {
            grace: Duration::from_secs(5),
            limit: 10,
            clock_bound: None,
        })
        .await
        .unwrap();
    assert_eq!(recovered.len(), 1);
    let other = leasehold_shared::AgentId::new("other").unwrap();
    let theirs = leases(&queue, &other, 1).await.remove(0);
    let (core, stop, run) = start(&queue);
    core.finished.send(finished(ours, succeeded())).unwrap();
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(queue.calls(COMPLETE).len(), 1, "written once, not retried");
    assert_eq!(core.stats.fenced.load(Ordering::Relaxed), 1);
    assert_eq!(core.stats.succeeded.load(Ordering::Relaxed), 0);
    let row = queue.row(theirs.id);
    assert_eq!(row.status, TaskStatus::Running, "the new holder's lease");
    assert_eq!(row.epoch, theirs.epoch);
    stop.cancel();
    run.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_release_gives_the_lease_back_retrying_until_it_lands() {
    let queue = MemoryQueue::new();
    queue.enqueue("work", 2, 3, None);
    let keys = leases(&queue, &memory::agent_id(), 2).await;
    queue.cue(RELEASE, Cue::Fail);
    let (core, stop, run) = start(&queue);
    core.finished
        .send(finished(keys[0].clone(), FinishAction::Release))
        .unwrap();
    core.finished
        .send(finished(keys[1].clone(), succeeded()))
        .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(queue.row(keys[0].id).status, TaskStatus::Queued, "released");
    assert_eq!(queue.row(keys[1].id).status, TaskStatus::Succeeded);
    assert_eq!(queue.calls(RELEASE).len(), 2, "failed once, then landed");
    assert_eq!(
        queue.calls(COMPLETE).len(),
        1,
        "the completion that landed is not written again"
    );
    assert_eq!(core.stats.released.load(Ordering::Relaxed), 1);
    assert_eq!(core.stats.succeeded.load(Ordering::Relaxed), 1);
    stop.cancel();
    run.await.unwrap();
}
