//! Store conformance: operator writes and their audit rows. An audited enqueue commits its task
//! and exactly one audit row together (or neither), an idempotent repeat is a `noop`, a viewer
//! is denied with a `denied` row and nothing enqueued, and invalid input writes nothing; a
//! policy change that changes nothing is audited as `noop`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use leasehold_shared::domain::{PolicyPatch, PolicyScope, Role};
use leasehold_shared::store::postgres::{NOTIFY_CHANNEL, PgStore};
use leasehold_shared::store::{EnqueueAuditedParams, NewTask, PolicySetParams};
use leasehold_shared::{Actor, InputLimits, Store, StoreError};
use leasehold_tests::helpers::tt;
use leasehold_tests::{TestDb, audit_rows, count, task_row};
use serde_json::{Value, json};
use sqlx::{PgPool, Row};

fn audited(task: NewTask, actor: Actor) -> EnqueueAuditedParams {
    EnqueueAuditedParams { task, actor }
}

fn viewer(name: &str) -> Actor {
    Actor {
        name: name.into(),
        role: Role::Viewer,
    }
}

/// `(target, result, params, detail)` of every audit row, oldest first.
async fn audit_details(pool: &PgPool) -> Vec<(String, String, Option<Value>, Option<String>)> {
    sqlx::query("SELECT target, result, params, detail FROM audit_log ORDER BY id")
        .fetch_all(pool)
        .await
        .unwrap()
        .iter()
        .map(|r| {
            let params: Option<sqlx::types::Json<Value>> = r.get("params");
            (
                r.get("target"),
                r.get("result"),
                params.map(|p| p.0),
                r.get("detail"),
            )
        })
        .collect()
}

async fn tasks(pool: &PgPool) -> i64 {
    count(pool, "SELECT count(*) FROM tasks").await.unwrap()
}

#[tokio::test]
async fn an_audited_enqueue_commits_its_task_with_one_audit_row_and_wakes_agents() {
    let db = TestDb::new().await.unwrap();
    let store = db.store();
    let mut listener = sqlx::postgres::PgListener::connect_with(&db.pool)
        .await
        .unwrap();
    listener.listen(NOTIFY_CHANNEL).await.unwrap();

    let task = NewTask::new(tt("mail"), json!({"to": "a@example.com"}))
        .with_priority(3)
        .with_idempotency_key("order-7");
    let done = store
        .task_enqueue_audited(audited(task, Actor::operator("alice")))
        .await
        .unwrap();
    assert!(done.created);
    let row = task_row(&db.pool, done.id.0).await.unwrap();
    assert_eq!(
        (&row["task_type"], &row["priority"], &row["status"]),
        (&json!("mail"), &json!(3), &json!("queued"))
    );
    let notified = tokio::time::timeout(Duration::from_secs(5), listener.recv())
        .await
        .expect("an audited enqueue notifies like any other")
        .unwrap();
    assert_eq!(notified.channel(), NOTIFY_CHANNEL);

    let target = format!("task:{}", done.id);
    assert_eq!(
        audit_rows(&db.pool).await.unwrap(),
        [(
            "alice".to_string(),
            "operator".to_string(),
            "enqueue".to_string(),
            target.clone(),
            "applied".to_string()
        )]
    );
    let details = audit_details(&db.pool).await;
    assert_eq!(
        details[0].2,
        Some(json!({"task_type": "mail", "priority": 3, "idempotency_key": "order-7"}))
    );
    drop(listener);
    db.drop_db().await.unwrap();
}

#[tokio::test]
async fn an_idempotent_repeat_returns_the_task_and_is_audited_as_noop() {
    let db = TestDb::new().await.unwrap();
    let store = db.store();
    let task = NewTask::new(tt("mail"), json!({})).with_idempotency_key("k1");
    let first = store
        .task_enqueue_audited(audited(task.clone(), Actor::operator("alice")))
        .await
        .unwrap();
    // The same key through the plain enqueue and again audited: one task.
    let plain = store.task_enqueue(task.clone()).await.unwrap();
    let again = store
        .task_enqueue_audited(audited(task.with_priority(9), Actor::operator("bob")))
        .await
        .unwrap();
    assert_eq!((plain.id, plain.created), (first.id, false));
    assert_eq!((again.id, again.created), (first.id, false));
    assert_eq!(tasks(&db.pool).await, 1);
    assert_eq!(task_row(&db.pool, first.id.0).await.unwrap()["priority"], 0);

    let target = format!("task:{}", first.id);
    let details = audit_details(&db.pool).await;
    assert_eq!(details.len(), 2, "{details:?}");
    assert_eq!((&details[0].0, details[0].1.as_str()), (&target, "applied"));
    assert_eq!((&details[1].0, details[1].1.as_str()), (&target, "noop"));
    assert_eq!(
        details[1].2,
        Some(json!({"task_type": "mail", "priority": 9, "idempotency_key": "k1"}))
    );
    assert_eq!(
        details[1].3.as_deref(),
        Some(
            format!(
                "idempotency key already used by task {}; nothing enqueued",
                first.id
            )
            .as_str()
        )
    );
    db.drop_db().await.unwrap();
}

#[tokio::test]
async fn a_viewer_is_denied_with_a_denied_row_and_nothing_enqueued() {
    let db = TestDb::new().await.unwrap();
    let store = db.store();
    let denied = store
        .task_enqueue_audited(audited(
            NewTask::new(tt("mail"), json!({})),
            viewer("dashboard"),
        ))
        .await;
    assert!(
        matches!(&denied, Err(StoreError::PermissionDenied { action, actor })
            if action == "enqueue" && actor == "dashboard"),
        "{denied:?}"
    );
    assert_eq!(tasks(&db.pool).await, 0);
    assert_eq!(
        audit_rows(&db.pool).await.unwrap(),
        [(
            "dashboard".to_string(),
            "viewer".to_string(),
            "enqueue".to_string(),
            "type:mail".to_string(),
            "denied".to_string()
        )]
    );
    assert_eq!(
        audit_details(&db.pool).await[0].2,
        Some(json!({"task_type": "mail", "priority": 0, "idempotency_key": null}))
    );
    db.drop_db().await.unwrap();
}

#[tokio::test]
async fn invalid_input_or_a_refused_audit_row_writes_nothing() {
    let db = TestDb::new().await.unwrap();
    let small = PgStore::from_pool(
        db.pool.clone(),
        InputLimits::with_max_payload_bytes(64).unwrap(),
    );
    // Refused by validation: no task and no audit row (bad input changes nothing).
    let too_large = small
        .task_enqueue_audited(audited(
            NewTask::new(tt("mail"), json!({"body": "x".repeat(100)})),
            Actor::operator("alice"),
        ))
        .await;
    assert!(
        matches!(too_large, Err(StoreError::Invalid(_))),
        "{too_large:?}"
    );
    let bad_attempts = small
        .task_enqueue_audited(audited(
            NewTask::new(tt("mail"), json!({})).with_max_attempts(0),
            viewer("dashboard"),
        ))
        .await;
    assert!(
        matches!(bad_attempts, Err(StoreError::Invalid(_))),
        "validation comes before authorization: {bad_attempts:?}"
    );
    assert_eq!(tasks(&db.pool).await, 0);
    assert!(audit_rows(&db.pool).await.unwrap().is_empty());

    // The audit row is refused by the database after the task was inserted (an actor name
    // above 200 bytes): the task goes with it, because both are one transaction.
    let refused = small
        .task_enqueue_audited(audited(
            NewTask::new(tt("mail"), json!({})),
            Actor::operator("a".repeat(201)),
        ))
        .await;
    assert!(
        matches!(&refused, Err(StoreError::Invalid(e)) if e.to_string().contains("audit_log_actor_size")),
        "{refused:?}"
    );
    assert_eq!(
        tasks(&db.pool).await,
        0,
        "the task rolled back with its audit row"
    );
    assert!(audit_rows(&db.pool).await.unwrap().is_empty());
    db.drop_db().await.unwrap();
}

#[tokio::test]
async fn a_policy_change_that_changes_nothing_is_audited_as_noop() {
    let db = TestDb::new().await.unwrap();
    let store = db.store();
    let set = |scope: PolicyScope, patch: PolicyPatch| PolicySetParams {
        scope,
        patch,
        actor: Actor::operator("alice"),
    };
    let pause = PolicyPatch {
        paused: Some(true),
        ..Default::default()
    };
    let ty = PolicyScope::Type(tt("mail"));
    store
        .policy_set(set(ty.clone(), pause.clone()))
        .await
        .unwrap();
    store.policy_set(set(ty.clone(), pause)).await.unwrap();
    // A type without a row, "changed" to what it inherits already.
    store
        .policy_set(set(
            PolicyScope::Type(tt("fresh")),
            PolicyPatch {
                paused: Some(false),
                max_concurrency: Some(None),
                ..Default::default()
            },
        ))
        .await
        .unwrap();
    let results: Vec<(String, String)> = audit_details(&db.pool)
        .await
        .into_iter()
        .map(|(target, result, _, _)| (target, result))
        .collect();
    assert_eq!(
        results,
        [
            ("policy:mail".to_string(), "applied".to_string()),
            ("policy:mail".to_string(), "noop".to_string()),
            ("policy:fresh".to_string(), "noop".to_string()),
        ]
    );
    db.drop_db().await.unwrap();
}
