//! The Store layer over a fake driver that logs what it was asked: validation before any
//! driver call, the wake-up rules, and the operations derived from others.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Mutex;

use crate::domain::{
    Actor, AgentId, InputLimits, LeaseEpoch, Policy, PolicyScope, TaskId, TaskStatus, TaskType,
};
use crate::store::{
    ReleaseOutcome, ReleaseParams, RequeueOutcome, RequeueParams, Result, Store, StoreError,
    TaskListParams, TaskPage,
};

/// What the fake driver was asked, in order.
#[derive(Default)]
struct Log(Mutex<Vec<&'static str>>);

impl Log {
    fn push(&self, call: &'static str) {
        self.0.lock().unwrap().push(call);
    }

    fn take(&self) -> Vec<&'static str> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

/// A driver whose "pool" is the log (the shape `impl_driver!` expects).
struct Fake {
    pool: Log,
    limits: InputLimits,
    key_cursors: crate::store::KeyCursors,
}

fn fake() -> Fake {
    Fake {
        pool: Log::default(),
        limits: InputLimits::default(),
        key_cursors: Default::default(),
    }
}

super::impl_driver!(Fake);

/// The fake's operations: those the tests call log themselves; the others are never called.
mod ops {
    use super::*;

    pub(super) async fn wake(log: &Log) {
        log.push("wake");
    }

    pub(super) async fn lease_release_many(log: &Log, p: &ReleaseParams) -> Result<ReleaseOutcome> {
        log.push("lease_release_many");
        Ok(ReleaseOutcome {
            released: p.leases.iter().map(|(id, _)| *id).collect(),
            repeated: Vec::new(),
            fenced: Vec::new(),
        })
    }

    pub(super) async fn task_requeue(log: &Log, p: &RequeueParams) -> Result<RequeueOutcome> {
        log.push("task_requeue");
        Ok(RequeueOutcome {
            id: p.id,
            previous: TaskStatus::Dead,
        })
    }

    pub(super) async fn policy_list(log: &Log) -> Result<Vec<Policy>> {
        log.push("policy_list");
        Ok(vec![Policy {
            paused: true,
            ..Policy::inherit(PolicyScope::Type(TaskType::new("mail").unwrap()))
        }])
    }

    pub(super) async fn task_list(log: &Log, _: &TaskListParams) -> Result<TaskPage> {
        log.push("task_list");
        Ok(TaskPage {
            tasks: Vec::new(),
            next_before: None,
        })
    }

    /// Operations no test calls, by how many arguments follow the pool; the result type is
    /// whatever the driver method returns.
    macro_rules! never {
        ($($name:ident),* $(,)?) => {
            $(pub(super) async fn $name<T>(_: &Log) -> Result<T> {
                unreachable!(stringify!($name))
            })*
        };
        ($($name:ident($a:ident)),* $(,)?) => {
            $(pub(super) async fn $name<A, T>(_: &Log, _: A) -> Result<T> {
                unreachable!(stringify!($name))
            })*
        };
        ($($name:ident($a:ident, $b:ident)),* $(,)?) => {
            $(pub(super) async fn $name<A, B, T>(_: &Log, _: A, _: B) -> Result<T> {
                unreachable!(stringify!($name))
            })*
        };
    }
    never!(
        db_now,
        agent_list,
        leader_get,
        schedule_list,
        lock_list,
        task_overview,
        migrations_applied,
        task_stats,
    );
    never!(
        lease_renew_many(p),
        task_progress(p),
        task_checkpoint(p),
        task_complete_many(p),
        task_cancel(p),
        task_requeue_dead(p),
        task_purge_dead(p),
        task_run_now(p),
        task_delete(p),
        task_count_states(p),
        lease_recover_expired(p),
        task_expire_deadlines(p),
        task_shed(p),
        breaker_tick(p),
        task_purge_finished(p),
        task_dead_letter_unserved(p),
        task_count_claimable(p),
        task_recent_runs(p),
        task_idle_report(p),
        lease_list_suspect(p),
        policy_change(p),
        agent_register(p),
        agent_heartbeat(p),
        agent_mark_stopped(p),
        leader_attempt_elect(p),
        leader_renew(p),
        schedule_add(p),
        schedule_remove(p),
        schedule_set_enabled(p),
        lock_acquire(p),
        resource_renew(p),
        resource_release(p),
        lock_force_release(p),
        resource_renew_many(p),
        shard_group_create(p),
        shard_group_list(p),
        shard_join(p),
        shard_acquire(p),
        resource_history_prune(p),
        audit_record(p),
        audit_record_denied(p),
        audit_list(p),
        task_get(p),
        task_explain(p),
        task_delete_of_type(p),
        queue_history_sample(p),
        queue_history_read(p),
        queue_history_prune(p),
    );
    never!(
        task_enqueue(p, l),
        task_claim(p, c),
        task_enqueue_audited(p, l),
        task_enqueue_many(p, l),
        leader_resign(p, t),
        schedule_trigger(p, l),
        schedule_fire_due(p, l),
        shard_group_get(p, g),
        shard_leave(p, m),
    );
}

fn lease(id: i64) -> (TaskId, LeaseEpoch) {
    (TaskId(id), LeaseEpoch(1))
}

#[tokio::test]
async fn invalid_input_never_reaches_the_driver() {
    let store = fake();
    let bad = TaskListParams {
        limit: 0,
        ..TaskListParams::default()
    };
    let error = store.task_list(bad).await.unwrap_err();
    assert!(matches!(error, StoreError::Invalid(_)), "{error:?}");
    assert!(store.pool.take().is_empty());

    let good = TaskListParams {
        limit: 10,
        ..TaskListParams::default()
    };
    store.task_list(good).await.unwrap();
    assert_eq!(store.pool.take(), ["task_list"]);
}

#[tokio::test]
async fn agents_are_woken_after_writes_that_make_work_claimable() {
    let store = fake();
    let owner = AgentId::new("a#1").unwrap();

    let nothing = ReleaseParams {
        owner: owner.clone(),
        leases: Vec::new(),
    };
    store.lease_release_many(nothing).await.unwrap();
    assert_eq!(store.pool.take(), ["lease_release_many"]);

    let two = ReleaseParams {
        owner,
        leases: vec![lease(1), lease(2)],
    };
    store.lease_release_many(two).await.unwrap();
    assert_eq!(store.pool.take(), ["lease_release_many", "wake"]);

    let requeue = RequeueParams {
        id: TaskId(1),
        actor: Actor::operator("ops"),
    };
    store.task_requeue(requeue).await.unwrap();
    assert_eq!(store.pool.take(), ["task_requeue", "wake"]);
}

#[tokio::test]
async fn a_policy_is_its_row_or_inherits_everything() {
    let store = fake();
    let mail = PolicyScope::Type(TaskType::new("mail").unwrap());
    assert!(store.policy_get(mail).await.unwrap().paused);
    let other = PolicyScope::Type(TaskType::new("other").unwrap());
    assert_eq!(
        store.policy_get(other.clone()).await.unwrap(),
        Policy::inherit(other)
    );
    assert_eq!(store.pool.take(), ["policy_list", "policy_list"]);
}
