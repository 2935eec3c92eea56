//! The maintenance service alone, on paused time, against the in-memory queue: it takes the
//! free leader lease, recovers a dead holder's lease on the first tick past
//! `lease_until + grace` (never before), follows while another agent leads, and resigns.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::Ordering;

use leasehold_shared::store::ClaimParams;
use leasehold_shared::{AgentId, TaskType};

use super::*;
use crate::handler::HandlerRegistry;
use crate::runtime::memory::{self, Cue, MemoryQueue};
use crate::runtime::queue::ClaimQueue;
use crate::runtime::settings::RuntimeSettings;

const TTL: Duration = Duration::from_secs(20);
const GRACE: Duration = Duration::from_secs(5);
const TICK: Duration = Duration::from_secs(1);

fn settings() -> RuntimeSettings {
    RuntimeSettings {
        lease_ttl: TTL,
        grace: GRACE,
        poll_interval: TICK,
        ..RuntimeSettings::default()
    }
}

fn start(queue: &Arc<MemoryQueue>) -> (Arc<Core>, CancellationToken, tokio::task::JoinHandle<()>) {
    let (core, _rx) = memory::core(settings(), HandlerRegistry::new());
    let maintenance = Maintenance {
        core: Arc::clone(&core),
        queue: Arc::clone(queue) as Arc<dyn MaintenanceQueue>,
    };
    let stop = CancellationToken::new();
    let run = tokio::spawn(maintenance.run(stop.clone()));
    (core, stop, run)
}

/// A task leased to an agent that then died: it never renews.
async fn dead_holders_lease(queue: &MemoryQueue) -> leasehold_shared::TaskId {
    queue.enqueue("work", 1, 3, None);
    let claimed = queue
        .task_claim(ClaimParams {
            owner: AgentId::new("dead").unwrap(),
            task_types: vec![TaskType::new("work").unwrap()],
            batch: 1,
            lease_ttl: TTL,
        })
        .await
        .unwrap();
    claimed.tasks[0].id
}

#[tokio::test(start_paused = true)]
async fn a_lease_past_lease_until_and_grace_is_recovered_on_the_next_round_not_before() {
    let queue = MemoryQueue::new();
    let id = dead_holders_lease(&queue).await;
    let (core, stop, run) = start(&queue);
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(core.leading.load(Ordering::Relaxed), "took the free lease");
    // Just before lease_until + grace, the lease is left alone.
    tokio::time::sleep(TTL + GRACE - Duration::from_millis(20)).await;
    assert_eq!(queue.row(id).status, TaskStatus::Running);
    assert_eq!(core.stats.recovered.load(Ordering::Relaxed), 0);
    // Recovered within one tick (jittered ±10 %) of it.
    tokio::time::sleep(TICK + TICK / 10 + Duration::from_millis(20)).await;
    let row = queue.row(id);
    assert_eq!(row.status, TaskStatus::RetryWait, "recovered");
    assert_eq!(row.epoch.0, 2, "under a new epoch");
    assert_eq!(core.stats.recovered.load(Ordering::Relaxed), 1);
    let rounds = queue.calls("lease_recover_expired");
    let before = rounds.iter().filter(|c| c.at <= TTL + GRACE).count();
    assert!(before >= 20, "a recovery round every tick: {rounds:?}");
    stop.cancel();
    run.await.unwrap();
    assert_eq!(
        queue.calls("leader_resign").len(),
        1,
        "resigned at the stop"
    );
    assert!(!core.leading.load(Ordering::Relaxed));
}

#[tokio::test(start_paused = true)]
async fn a_follower_recovers_nothing() {
    let queue = MemoryQueue::new();
    let id = dead_holders_lease(&queue).await;
    // Another agent leads, and keeps renewing.
    let leader = AgentId::new("leader").unwrap();
    let LeaderOutcome::Leader { term, .. } = queue
        .leader_attempt_elect(LeaderElectParams {
            owner: leader.clone(),
            ttl: TTL,
            grace: GRACE,
        })
        .await
        .unwrap()
    else {
        panic!("the lease was free");
    };
    let (core, stop, run) = start(&queue);
    for _ in 0..40 {
        tokio::time::sleep(TICK).await;
        let renewed = queue
            .leader_renew(LeaderRenewParams {
                owner: leader.clone(),
                term,
                ttl: TTL,
            })
            .await
            .unwrap();
        assert!(matches!(renewed, LeaderRenewal::Held { .. }));
    }
    assert!(!core.leading.load(Ordering::Relaxed));
    assert!(queue.calls("lease_recover_expired").is_empty());
    assert_eq!(queue.row(id).status, TaskStatus::Running);
    stop.cancel();
    run.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_leader_whose_renewals_fail_steps_down_at_its_safe_until() {
    let queue = MemoryQueue::new();
    let (core, stop, run) = start(&queue);
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(core.leading.load(Ordering::Relaxed));
    // Every renewal from now on fails (and every election, so it cannot lead again).
    for _ in 0..100 {
        queue.cue("leader_renew", Cue::Fail);
        queue.cue("leader_attempt_elect", Cue::Fail);
    }
    let safe = TTL - core.settings.safety_margin();
    tokio::time::sleep(safe - TICK * 2).await;
    assert!(core.leading.load(Ordering::Relaxed), "still provable");
    tokio::time::sleep(TICK * 4).await;
    assert!(
        !core.leading.load(Ordering::Relaxed),
        "stepped down once its leadership could not be proven"
    );
    stop.cancel();
    run.await.unwrap();
}
