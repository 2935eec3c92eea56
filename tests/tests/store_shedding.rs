//! Store conformance: load shedding (issue 23). A type's `shed_after` cancels, with reason
//! `shed`, exactly its waiting tasks (queued and retry_wait, at every priority) that became due
//! longer ago than that — not fresh ones, not later ones, not running ones, not other types'
//! — at most `limit` a call; the overview counts them and GetTask says why; only task types
//! shed and bad durations are refused — on PostgreSQL and SQLite alike.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;
use std::time::Duration;

use leasehold_shared::domain::{PolicyPatch, PolicyScope};
use leasehold_shared::store::{BlockerKind, ExplainParams, PolicySetParams, ShedParams};
use leasehold_shared::{Actor, Store, TaskId};
use leasehold_tests::helpers::tt;
use leasehold_tests::{StoreDb, TaskSpec, conformance};

async fn set_shed(store: &dyn Store, task_type: &str, after: Option<Duration>) {
    store
        .policy_set(PolicySetParams {
            scope: PolicyScope::Type(tt(task_type)),
            patch: PolicyPatch {
                shed_after: Some(after),
                ..Default::default()
            },
            actor: Actor::operator("test"),
        })
        .await
        .unwrap();
}

/// A waiting task of `task_type` due `due_secs_ago` seconds ago (negative: in the future).
fn waiting(task_type: &str, status: &'static str, due_secs_ago: f64, priority: i16) -> TaskSpec {
    TaskSpec {
        priority,
        available_in_secs: -due_secs_ago,
        ..TaskSpec::new(task_type, status)
    }
}

conformance!(overdue_waiting_tasks_of_a_shedding_type_are_cancelled_and_nothing_else);
async fn overdue_waiting_tasks_of_a_shedding_type_are_cancelled_and_nothing_else(db: StoreDb) {
    let store = db.store();
    set_shed(&*store, "sh.a", Some(Duration::from_secs(30))).await;
    // Another shedding type with a longer shed_after: its task two minutes overdue stays.
    set_shed(&*store, "sh.slow", Some(Duration::from_secs(600))).await;
    let mut overdue = BTreeSet::new();
    for (status, priority) in [
        ("queued", 5),
        ("queued", 0),
        ("queued", -3),
        ("retry_wait", 0),
    ] {
        overdue.insert(
            db.insert_task(waiting("sh.a", status, 120.0, priority))
                .await
                .unwrap(),
        );
    }
    let kept = [
        db.insert_task(waiting("sh.a", "queued", 5.0, 0))
            .await
            .unwrap(), // not yet 30 s late
        db.insert_task(waiting("sh.a", "queued", -600.0, 5))
            .await
            .unwrap(), // not yet due
        db.insert_task(waiting("sh.b", "queued", 120.0, 0))
            .await
            .unwrap(), // sh.b does not shed
        db.insert_task(waiting("sh.slow", "queued", 120.0, 0))
            .await
            .unwrap(), // sh.slow sheds after 10 minutes
        db.insert_task(TaskSpec {
            lease_ttl_secs: Some(3600.0),
            ..waiting("sh.a", "running", 120.0, 0)
        })
        .await
        .unwrap(),
    ];
    let kept_before: Vec<String> = {
        let mut v = Vec::new();
        for id in kept {
            v.push(db.task_status(id).await.unwrap());
        }
        v
    };

    let shed = store.task_shed(ShedParams { limit: 100 }).await.unwrap();
    let got: BTreeSet<i64> = shed.iter().map(|(id, _)| id.0).collect();
    assert_eq!(got, overdue, "exactly the overdue waiting tasks of sh.a");
    assert!(shed.iter().all(|(_, t)| t.as_str() == "sh.a"));
    for id in &overdue {
        assert_eq!(db.task_status(*id).await.unwrap(), "cancelled");
    }
    for (id, before) in kept.iter().zip(&kept_before) {
        assert_eq!(
            &db.task_status(*id).await.unwrap(),
            before,
            "task {id} changed"
        );
    }
    // Once shed, nothing is left to shed.
    assert!(
        store
            .task_shed(ShedParams { limit: 100 })
            .await
            .unwrap()
            .is_empty()
    );

    let first = *overdue.iter().next().unwrap();
    let blockers = store
        .task_explain(ExplainParams {
            id: TaskId(first),
            agent_stale_after: Duration::from_secs(30),
        })
        .await
        .unwrap();
    assert_eq!(blockers.len(), 1);
    assert_eq!(blockers[0].kind, BlockerKind::Finished);
    let message = &blockers[0].message;
    assert!(
        message.contains("by load shedding (waited 12")
            && message.contains("; type sh.a sheds after 30 s)"),
        "{message}"
    );

    let overview = store.task_overview().await.unwrap();
    let a = overview
        .types
        .iter()
        .find(|t| t.task_type.as_str() == "sh.a")
        .unwrap();
    assert_eq!(a.shed_after, Some(Duration::from_secs(30)));
    assert_eq!(a.shed_last_minute, 4);
    let b = overview
        .types
        .iter()
        .find(|t| t.task_type.as_str() == "sh.b")
        .unwrap();
    assert_eq!((b.shed_after, b.shed_last_minute), (None, 0));
    db.drop_db().await.unwrap();
}

conformance!(a_call_sheds_at_most_its_limit_and_a_cleared_type_sheds_nothing);
async fn a_call_sheds_at_most_its_limit_and_a_cleared_type_sheds_nothing(db: StoreDb) {
    let store = db.store();
    set_shed(&*store, "sh.c", Some(Duration::from_secs(1))).await;
    for _ in 0..5 {
        db.insert_task(waiting("sh.c", "queued", 60.0, 0))
            .await
            .unwrap();
    }
    assert_eq!(
        store
            .task_shed(ShedParams { limit: 2 })
            .await
            .unwrap()
            .len(),
        2
    );
    set_shed(&*store, "sh.c", None).await;
    assert!(
        store
            .task_shed(ShedParams { limit: 100 })
            .await
            .unwrap()
            .is_empty()
    );
    set_shed(&*store, "sh.c", Some(Duration::from_secs(1))).await;
    assert_eq!(
        store
            .task_shed(ShedParams { limit: 100 })
            .await
            .unwrap()
            .len(),
        3
    );
    db.drop_db().await.unwrap();
}

conformance!(only_task_types_shed_and_bad_durations_change_nothing);
async fn only_task_types_shed_and_bad_durations_change_nothing(db: StoreDb) {
    let store = db.store();
    set_shed(&*store, "sh.d", Some(Duration::from_secs(30))).await;
    let refused = |scope: PolicyScope, after: Duration| PolicySetParams {
        scope,
        patch: PolicyPatch {
            shed_after: Some(Some(after)),
            ..Default::default()
        },
        actor: Actor::operator("test"),
    };
    for (scope, after) in [
        (PolicyScope::Global, Duration::from_secs(30)),
        (PolicyScope::Type(tt("sh.d")), Duration::ZERO),
        (
            PolicyScope::Type(tt("sh.d")),
            Duration::from_secs(8 * 24 * 3600),
        ),
        (PolicyScope::Type(tt("sh.d")), Duration::from_micros(1500)),
    ] {
        let e = store.policy_set(refused(scope.clone(), after)).await;
        assert!(e.is_err(), "{scope:?} {after:?} was accepted");
        assert!(e.unwrap_err().to_string().contains("shed_after"));
    }
    assert_eq!(
        store
            .policy_get(PolicyScope::Type(tt("sh.d")))
            .await
            .unwrap()
            .shed_after,
        Some(Duration::from_secs(30))
    );
    assert_eq!(
        store
            .policy_get(PolicyScope::Global)
            .await
            .unwrap()
            .shed_after,
        None
    );
    db.drop_db().await.unwrap();
}
