//! Store conformance: snoozes and checkpoints (issue 24). A snooze ends the attempt without
//! using it: the task waits again (queued, due after the delay) with its attempt count as
//! before the claim and one more snooze counted, the attempt recorded as `snoozed`; past the
//! type's `max_snoozes` (inherited from the global row, 100 by default) or past the deadline it
//! is dead, and a task whose cancel was requested ends cancelled. A checkpoint is a fenced
//! holder write that the next claim of the task returns — after a failure, a release, a
//! recovered lease or a snooze. On PostgreSQL and SQLite alike.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use leasehold_shared::domain::{AttemptOutcome, PolicyPatch, PolicyScope, Task};
use leasehold_shared::store::{
    CancelParams, CheckpointParams, CompleteOutcome, CompleteParams, Completion, HolderWrite,
    NewTask, PolicySetParams, RecoverParams, ReleaseParams, RequeueParams, StoreError,
};
use leasehold_shared::{Actor, LeaseKey, Store, TaskError, TaskId, TaskStatus};
use leasehold_tests::helpers::{agent, claim, tt};
use leasehold_tests::{StoreDb, Val, conformance};
use serde_json::json;

fn held(t: &Task, owner: &str) -> LeaseKey {
    LeaseKey {
        id: t.id,
        owner: agent(owner),
        epoch: t.lease_epoch,
    }
}

async fn one(store: &dyn Store, owner: &str, task_type: &str) -> Task {
    let mut tasks = store
        .task_claim(claim(owner, &[task_type], 1))
        .await
        .unwrap()
        .tasks;
    assert_eq!(tasks.len(), 1, "one task of {task_type} is due");
    tasks.remove(0)
}

async fn snooze(store: &dyn Store, key: LeaseKey, delay: Duration) -> CompleteOutcome {
    store
        .task_complete(CompleteParams {
            key,
            completion: Completion::Snooze { delay },
        })
        .await
        .unwrap()
}

async fn set_max_snoozes(store: &dyn Store, scope: PolicyScope, n: Option<u32>) {
    store
        .policy_set(PolicySetParams {
            scope,
            patch: PolicyPatch {
                max_snoozes: Some(n),
                ..Default::default()
            },
            actor: Actor::operator("test"),
        })
        .await
        .unwrap();
}

async fn enqueue(store: &dyn Store, task: NewTask) -> TaskId {
    store.task_enqueue(task).await.unwrap().id
}

conformance!(a_task_snoozed_three_times_succeeds_on_its_first_attempt);
async fn a_task_snoozed_three_times_succeeds_on_its_first_attempt(db: StoreDb) {
    let store = db.store();
    let id = enqueue(&*store, NewTask::new(tt("sz.a"), json!({}))).await;
    for round in 1..=3 {
        let t = one(&*store, "w#1", "sz.a").await;
        assert_eq!((t.id, t.attempt, t.snoozes), (id, 1, round - 1));
        let outcome = snooze(&*store, held(&t, "w#1"), Duration::ZERO).await;
        let CompleteOutcome::Applied { status, retry_at } = outcome else {
            panic!("snooze {round} did not apply: {outcome:?}");
        };
        assert_eq!(status, TaskStatus::Queued);
        assert!(retry_at.is_some(), "a snooze says when the task is due");
        // The same snooze again is a repeat, not a second snooze.
        assert!(matches!(
            snooze(&*store, held(&t, "w#1"), Duration::ZERO).await,
            CompleteOutcome::Repeated { .. }
        ));
        let task = store.task_get(id).await.unwrap().unwrap().task;
        assert_eq!(
            (task.status, task.attempt, task.snoozes, task.finished_at),
            (TaskStatus::Queued, 0, round, None)
        );
    }
    let t = one(&*store, "w#2", "sz.a").await;
    assert_eq!((t.attempt, t.snoozes), (1, 3));
    store
        .task_complete(CompleteParams {
            key: held(&t, "w#2"),
            completion: Completion::Succeeded {
                result: Some(json!({"ok": true})),
            },
        })
        .await
        .unwrap();
    let detail = store.task_get(id).await.unwrap().unwrap();
    assert_eq!(
        (detail.task.status, detail.task.attempt, detail.task.snoozes),
        (TaskStatus::Succeeded, 1, 3)
    );
    let outcomes: Vec<(i32, AttemptOutcome)> = detail
        .attempts
        .iter()
        .map(|a| (a.attempt, a.outcome))
        .collect();
    assert_eq!(
        outcomes,
        vec![
            (1, AttemptOutcome::Snoozed),
            (1, AttemptOutcome::Snoozed),
            (1, AttemptOutcome::Snoozed),
            (1, AttemptOutcome::Succeeded)
        ],
        "every run is in the history, each under its own epoch"
    );
    let epochs: Vec<i64> = detail.attempts.iter().map(|a| a.epoch.0).collect();
    assert_eq!(epochs, vec![1, 2, 3, 4]);
    db.drop_db().await.unwrap();
}

conformance!(a_snooze_waits_its_delay);
async fn a_snooze_waits_its_delay(db: StoreDb) {
    let store = db.store();
    let id = enqueue(&*store, NewTask::new(tt("sz.b"), json!({}))).await;
    let t = one(&*store, "w#1", "sz.b").await;
    let before = store.db_now().await.unwrap();
    let CompleteOutcome::Applied { retry_at, .. } =
        snooze(&*store, held(&t, "w#1"), Duration::from_secs(3600)).await
    else {
        panic!("the snooze did not apply");
    };
    let due = retry_at.unwrap();
    let waited = (due - before).num_seconds();
    assert!((3599..=3601).contains(&waited), "due {waited} s later");
    assert_eq!(
        store.task_get(id).await.unwrap().unwrap().task.available_at,
        due
    );
    assert!(
        store
            .task_claim(claim("w#1", &["sz.b"], 10))
            .await
            .unwrap()
            .tasks
            .is_empty(),
        "a snoozed task is not due before its time"
    );
    db.drop_db().await.unwrap();
}

conformance!(snoozes_past_max_snoozes_dead_letter_the_task);
async fn snoozes_past_max_snoozes_dead_letter_the_task(db: StoreDb) {
    let store = db.store();
    // The type's own cap.
    set_max_snoozes(&*store, PolicyScope::Type(tt("sz.c")), Some(2)).await;
    let id = enqueue(&*store, NewTask::new(tt("sz.c"), json!({}))).await;
    for _ in 0..2 {
        let t = one(&*store, "w#1", "sz.c").await;
        snooze(&*store, held(&t, "w#1"), Duration::ZERO).await;
    }
    let t = one(&*store, "w#1", "sz.c").await;
    let outcome = snooze(&*store, held(&t, "w#1"), Duration::ZERO).await;
    // Sent again (a reply lost), the refused snooze is a repeat, not a fenced write.
    assert!(
        matches!(
            snooze(&*store, held(&t, "w#1"), Duration::ZERO).await,
            CompleteOutcome::Repeated {
                status: TaskStatus::Dead
            }
        ),
        "a repeated refused snooze"
    );
    assert!(
        matches!(
            outcome,
            CompleteOutcome::Applied {
                status: TaskStatus::Dead,
                retry_at: None
            }
        ),
        "{outcome:?}"
    );
    let task = store.task_get(id).await.unwrap().unwrap().task;
    let error = task.last_error.unwrap();
    assert_eq!(error.code, "snooze_limit");
    assert!(
        error.message.contains("after 2 snoozes"),
        "{}",
        error.message
    );
    assert_eq!((task.snoozes, task.attempt), (2, 1));
    assert!(task.finished_at.is_some());
    let attempts = store.task_get(id).await.unwrap().unwrap().attempts;
    let outcomes: Vec<AttemptOutcome> = attempts.iter().map(|a| a.outcome).collect();
    assert_eq!(
        outcomes,
        vec![
            AttemptOutcome::Snoozed,
            AttemptOutcome::Snoozed,
            AttemptOutcome::Failed
        ],
        "the refused snooze is the failed final attempt"
    );

    // A requeue gives the task fresh snoozes as well as fresh attempts.
    store
        .task_requeue(RequeueParams {
            id,
            actor: Actor::operator("test"),
        })
        .await
        .unwrap();
    let task = store.task_get(id).await.unwrap().unwrap().task;
    assert_eq!(
        (task.status, task.attempt, task.snoozes),
        (TaskStatus::Queued, 0, 0)
    );
    let t = one(&*store, "w#1", "sz.c").await;
    snooze(&*store, held(&t, "w#1"), Duration::ZERO).await;
    let task = store.task_get(id).await.unwrap().unwrap().task;
    assert_eq!((task.status, task.snoozes), (TaskStatus::Queued, 1));

    // Inherited from the global row: 0 snoozes allowed.
    set_max_snoozes(&*store, PolicyScope::Global, Some(0)).await;
    let other = enqueue(&*store, NewTask::new(tt("sz.d"), json!({}))).await;
    let t = one(&*store, "w#1", "sz.d").await;
    snooze(&*store, held(&t, "w#1"), Duration::ZERO).await;
    let task = store.task_get(other).await.unwrap().unwrap().task;
    assert_eq!(task.status, TaskStatus::Dead);
    // The type's own row wins over the global one.
    set_max_snoozes(&*store, PolicyScope::Type(tt("sz.e")), Some(5)).await;
    let third = enqueue(&*store, NewTask::new(tt("sz.e"), json!({}))).await;
    let t = one(&*store, "w#1", "sz.e").await;
    snooze(&*store, held(&t, "w#1"), Duration::ZERO).await;
    let task = store.task_get(third).await.unwrap().unwrap().task;
    assert_eq!(task.status, TaskStatus::Queued);
    db.drop_db().await.unwrap();
}

conformance!(a_snooze_past_the_deadline_or_of_a_cancelled_task_ends_it);
async fn a_snooze_past_the_deadline_or_of_a_cancelled_task_ends_it(db: StoreDb) {
    let store = db.store();
    let now = store.db_now().await.unwrap();
    let late = enqueue(
        &*store,
        NewTask::new(tt("sz.f"), json!({})).with_deadline(now + chrono::Duration::minutes(10)),
    )
    .await;
    let t = one(&*store, "w#1", "sz.f").await;
    snooze(&*store, held(&t, "w#1"), Duration::from_secs(3600)).await;
    let task = store.task_get(late).await.unwrap().unwrap().task;
    assert_eq!(task.status, TaskStatus::Dead);
    assert_eq!(task.last_error.unwrap().code, "deadline_exceeded");

    let cancelled = enqueue(&*store, NewTask::new(tt("sz.g"), json!({}))).await;
    let t = one(&*store, "w#1", "sz.g").await;
    store
        .task_cancel(CancelParams {
            id: cancelled,
            actor: Actor::operator("test"),
        })
        .await
        .unwrap();
    snooze(&*store, held(&t, "w#1"), Duration::ZERO).await;
    let task = store.task_get(cancelled).await.unwrap().unwrap().task;
    assert_eq!((task.status, task.snoozes), (TaskStatus::Cancelled, 0));
    db.drop_db().await.unwrap();
}

conformance!(a_stale_snooze_or_checkpoint_changes_nothing);
async fn a_stale_snooze_or_checkpoint_changes_nothing(db: StoreDb) {
    let store = db.store();
    let id = enqueue(&*store, NewTask::new(tt("sz.h"), json!({}))).await;
    let first = one(&*store, "w#1", "sz.h").await;
    store
        .lease_release_many(ReleaseParams {
            owner: agent("w#1"),
            leases: vec![(first.id, first.lease_epoch)],
        })
        .await
        .unwrap();
    let second = one(&*store, "w#2", "sz.h").await;
    assert_eq!(
        snooze(&*store, held(&first, "w#1"), Duration::ZERO).await,
        CompleteOutcome::Fenced
    );
    let write = store
        .task_checkpoint(CheckpointParams {
            key: held(&first, "w#1"),
            checkpoint: json!({"stale": true}),
        })
        .await
        .unwrap();
    assert_eq!(write, HolderWrite::Fenced);
    let task = store.task_get(id).await.unwrap().unwrap().task;
    assert_eq!(
        (task.status, task.snoozes, task.checkpoint, task.lease_epoch),
        (TaskStatus::Running, 0, None, second.lease_epoch)
    );
    db.drop_db().await.unwrap();
}

conformance!(the_next_attempt_receives_the_last_checkpoint);
async fn the_next_attempt_receives_the_last_checkpoint(db: StoreDb) {
    let store = db.store();
    let id = enqueue(
        &*store,
        NewTask::new(tt("ck.a"), json!({})).with_max_attempts(10),
    )
    .await;
    let save = |t: &Task, owner: &str, value: serde_json::Value| {
        let params = CheckpointParams {
            key: held(t, owner),
            checkpoint: value,
        };
        let store = store.clone();
        async move { store.task_checkpoint(params).await.unwrap() }
    };
    let t = one(&*store, "w#1", "ck.a").await;
    assert_eq!(t.checkpoint, None, "a fresh task has no checkpoint");
    assert_eq!(save(&t, "w#1", json!({"page": 1})).await, HolderWrite::Held);
    assert_eq!(save(&t, "w#1", json!({"page": 2})).await, HolderWrite::Held);
    // After a failure (the retry is made due at once).
    store
        .task_complete(CompleteParams {
            key: held(&t, "w#1"),
            completion: Completion::Failed {
                error: TaskError::retryable("boom", "it broke"),
            },
        })
        .await
        .unwrap();
    db.update_task(id.0, &[("available_at", Val::At(-1.0))])
        .await
        .unwrap();
    let t = one(&*store, "w#2", "ck.a").await;
    assert_eq!(t.checkpoint, Some(json!({"page": 2})));
    assert!(t.checkpoint_at.is_some());
    // After a release.
    save(&t, "w#2", json!({"page": 3})).await;
    store
        .lease_release_many(ReleaseParams {
            owner: agent("w#2"),
            leases: vec![(t.id, t.lease_epoch)],
        })
        .await
        .unwrap();
    let t = one(&*store, "w#3", "ck.a").await;
    assert_eq!(t.checkpoint, Some(json!({"page": 3})));
    // After a lease that expired and was recovered.
    save(&t, "w#3", json!({"page": 4})).await;
    db.backdate_lease(id.0, 60.0).await.unwrap();
    store
        .lease_recover_expired(RecoverParams {
            grace: Duration::from_secs(1),
            limit: 10,
            clock_bound: None,
        })
        .await
        .unwrap();
    let t = one(&*store, "w#4", "ck.a").await;
    assert_eq!(t.checkpoint, Some(json!({"page": 4})));
    // After a snooze.
    save(&t, "w#4", json!({"page": 5})).await;
    snooze(&*store, held(&t, "w#4"), Duration::ZERO).await;
    let t = one(&*store, "w#5", "ck.a").await;
    assert_eq!(t.checkpoint, Some(json!({"page": 5})));
    // It stays on the finished task.
    store
        .task_complete(CompleteParams {
            key: held(&t, "w#5"),
            completion: Completion::Succeeded { result: None },
        })
        .await
        .unwrap();
    let task = store.task_get(id).await.unwrap().unwrap().task;
    assert_eq!(task.checkpoint, Some(json!({"page": 5})));
    db.drop_db().await.unwrap();
}

conformance!(bad_checkpoints_and_snoozes_are_refused_and_change_nothing);
async fn bad_checkpoints_and_snoozes_are_refused_and_change_nothing(db: StoreDb) {
    let store = db.store();
    let id = enqueue(&*store, NewTask::new(tt("ck.b"), json!({}))).await;
    let t = one(&*store, "w#1", "ck.b").await;
    store
        .task_checkpoint(CheckpointParams {
            key: held(&t, "w#1"),
            checkpoint: json!({"ok": 1}),
        })
        .await
        .unwrap();
    let too_big = json!({ "blob": "x".repeat(70_000) });
    let with_nul = json!({ "text": "a\u{0}b" });
    for bad in [too_big, with_nul] {
        let refused = store
            .task_checkpoint(CheckpointParams {
                key: held(&t, "w#1"),
                checkpoint: bad,
            })
            .await;
        assert!(
            matches!(refused, Err(StoreError::Invalid(_))),
            "{refused:?}"
        );
    }
    let refused = store
        .task_complete(CompleteParams {
            key: held(&t, "w#1"),
            completion: Completion::Snooze {
                delay: Duration::from_secs(366 * 24 * 3600),
            },
        })
        .await;
    assert!(
        matches!(refused, Err(StoreError::Invalid(_))),
        "{refused:?}"
    );
    let task = store.task_get(id).await.unwrap().unwrap().task;
    assert_eq!(
        (task.status, task.snoozes, task.checkpoint),
        (TaskStatus::Running, 0, Some(json!({"ok": 1})))
    );
    // A max_snoozes out of range is refused too.
    let refused = store
        .policy_set(PolicySetParams {
            scope: PolicyScope::Type(tt("ck.b")),
            patch: PolicyPatch {
                max_snoozes: Some(Some(2_000_000)),
                ..Default::default()
            },
            actor: Actor::operator("test"),
        })
        .await;
    assert!(
        matches!(refused, Err(StoreError::Invalid(_))),
        "{refused:?}"
    );
    let policies = store.policy_list().await.unwrap();
    assert!(policies.iter().all(|p| p.max_snoozes.is_none()));
    db.drop_db().await.unwrap();
}
