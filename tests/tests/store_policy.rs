//! Store conformance: per-type max attempts (issue 24). A task enqueued without its own
//! `max_attempts` takes its type's policy value, else the global row's, else 25 — one by one,
//! in a bulk (every type of a mixed batch resolved on its own), and on the keyed paths (a
//! replace takes the type's value too); an explicit value always wins; values out of range
//! change nothing — on PostgreSQL and SQLite alike.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use leasehold_shared::domain::policy::DEFAULT_MAX_ATTEMPTS;
use leasehold_shared::domain::{OnConflict, PolicyPatch, PolicyScope, TaskId};
use leasehold_shared::store::{NewTask, PolicySetParams};
use leasehold_shared::{Actor, Store};
use leasehold_tests::helpers::tt;
use leasehold_tests::{StoreDb, conformance};
use serde_json::json;

async fn set_max_attempts(store: &dyn Store, scope: PolicyScope, n: Option<u32>) {
    store
        .policy_set(PolicySetParams {
            scope,
            patch: PolicyPatch {
                max_attempts: Some(n),
                ..Default::default()
            },
            actor: Actor::operator("test"),
        })
        .await
        .unwrap();
}

fn of(task_type: &str) -> PolicyScope {
    PolicyScope::Type(tt(task_type))
}

async fn max_attempts(store: &dyn Store, id: TaskId) -> i32 {
    store.task_get(id).await.unwrap().unwrap().task.max_attempts
}

async fn one(store: &dyn Store, task: NewTask) -> i32 {
    let id = store.task_enqueue(task).await.unwrap().id;
    max_attempts(store, id).await
}

async fn bulk(store: &dyn Store, tasks: Vec<NewTask>) -> Vec<i32> {
    let done = store.task_enqueue_many(tasks).await.unwrap();
    let mut out = Vec::new();
    for e in done {
        out.push(max_attempts(store, e.id).await);
    }
    out
}

fn task(task_type: &str) -> NewTask {
    NewTask::new(tt(task_type), json!({}))
}

conformance!(max_attempts_come_from_the_type_then_the_global_row_then_the_default);
async fn max_attempts_come_from_the_type_then_the_global_row_then_the_default(db: StoreDb) {
    let store = db.store();
    // Nothing set: the default.
    assert_eq!(one(&*store, task("ma.a")).await, DEFAULT_MAX_ATTEMPTS);
    assert_eq!(
        bulk(&*store, vec![task("ma.a"), task("ma.b")]).await,
        [DEFAULT_MAX_ATTEMPTS; 2]
    );
    // The global row: every type without its own value.
    set_max_attempts(&*store, PolicyScope::Global, Some(7)).await;
    assert_eq!(one(&*store, task("ma.a")).await, 7);
    // The type's own value wins over the global row's.
    set_max_attempts(&*store, of("ma.a"), Some(3)).await;
    assert_eq!(one(&*store, task("ma.a")).await, 3);
    assert_eq!(one(&*store, task("ma.b")).await, 7);
    // A mixed bulk: each type resolved on its own, in input order; explicit values win.
    let mixed = vec![
        task("ma.a"),
        task("ma.b"),
        task("ma.a").with_max_attempts(9),
        task("ma.c"),
        task("ma.a"),
        task("ma.b").with_max_attempts(1),
    ];
    assert_eq!(bulk(&*store, mixed).await, [3, 7, 9, 7, 3, 1]);
    // An explicit value wins one by one too.
    assert_eq!(one(&*store, task("ma.a").with_max_attempts(12)).await, 12);
    // Cleared: back to the global row, then to the default.
    set_max_attempts(&*store, of("ma.a"), None).await;
    assert_eq!(one(&*store, task("ma.a")).await, 7);
    set_max_attempts(&*store, PolicyScope::Global, None).await;
    assert_eq!(one(&*store, task("ma.a")).await, DEFAULT_MAX_ATTEMPTS);
    // Tasks already enqueued keep what they got.
    let policies = store.policy_list().await.unwrap();
    assert!(policies.iter().all(|p| p.max_attempts.is_none()));
    db.drop_db().await.unwrap();
}

conformance!(keyed_enqueues_take_the_types_max_attempts_too);
async fn keyed_enqueues_take_the_types_max_attempts_too(db: StoreDb) {
    let store = db.store();
    set_max_attempts(&*store, of("mk.a"), Some(4)).await;
    // A keyed bulk goes task by task.
    let keyed = vec![
        task("mk.a").with_idempotency_key("k1"),
        task("mk.b").with_idempotency_key("k2"),
        task("mk.a").with_idempotency_key("k3").with_max_attempts(2),
    ];
    assert_eq!(bulk(&*store, keyed).await, [4, DEFAULT_MAX_ATTEMPTS, 2]);
    // A replace takes every setting of the new enqueue: its type's value when it gives none.
    let first = store
        .task_enqueue(
            task("mk.a")
                .with_idempotency_key("r1")
                .with_max_attempts(11)
                .with_delay(std::time::Duration::from_secs(3600)),
        )
        .await
        .unwrap()
        .id;
    assert_eq!(max_attempts(&*store, first).await, 11);
    let replaced = store
        .task_enqueue(
            task("mk.a")
                .with_idempotency_key("r1")
                .with_on_conflict(OnConflict::Replace),
        )
        .await
        .unwrap();
    assert_eq!(replaced.id, first);
    assert_eq!(max_attempts(&*store, first).await, 4);
    db.drop_db().await.unwrap();
}

conformance!(max_attempts_out_of_range_change_nothing);
async fn max_attempts_out_of_range_change_nothing(db: StoreDb) {
    let store = db.store();
    set_max_attempts(&*store, of("mb.a"), Some(6)).await;
    for bad in [0, 1001, u32::MAX] {
        for scope in [PolicyScope::Global, of("mb.a"), of("mb.b")] {
            let refused = store
                .policy_set(PolicySetParams {
                    scope: scope.clone(),
                    patch: PolicyPatch {
                        max_attempts: Some(Some(bad)),
                        // Riding along: must not be written either.
                        max_snoozes: Some(Some(3)),
                        ..Default::default()
                    },
                    actor: Actor::operator("test"),
                })
                .await;
            assert!(refused.is_err(), "{bad} accepted for {scope}");
        }
    }
    let policies = store.policy_list().await.unwrap();
    let a = policies.iter().find(|p| p.scope == of("mb.a")).unwrap();
    assert_eq!((a.max_attempts, a.max_snoozes), (Some(6), None));
    assert!(
        policies
            .iter()
            .filter(|p| p.scope != of("mb.a"))
            .all(|p| p.max_attempts.is_none() && p.max_snoozes.is_none())
    );
    assert_eq!(one(&*store, task("mb.a")).await, 6);
    db.drop_db().await.unwrap();
}
