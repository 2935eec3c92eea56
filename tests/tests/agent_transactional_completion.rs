#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Transactional completion on real agents (issue 24): a handler writes its business row and
//! completes its task in one transaction of `TaskContext::begin`. The agent holding the first
//! attempt is SIGSTOPped inside that transaction, past its lease's TTL; another agent recovers
//! the task and runs it: its business row and its completion land together. When the stale
//! agent resumes, its transaction — business row and completion — is rolled back: exactly one
//! business row exists, the new holder's. The fence that refuses a stale transaction's
//! completion is shown on its own in the second test.

use std::time::Duration;

use leasehold_shared::Store;
use leasehold_shared::store::postgres::{PgStore, task_complete_in};
use leasehold_shared::store::{
    CompleteOutcome, CompleteParams, Completion, NewTask, ReleaseParams,
};
use leasehold_tests::fleet::spawn_test_agent;
use leasehold_tests::helpers::{agent, claim, tt};
use leasehold_tests::{TaskSpec, TestDb, insert_task, wait_until};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(60);

async fn log(pool: &sqlx::PgPool) -> Vec<(i64, String)> {
    sqlx::query_as("SELECT epoch, event FROM txn_log ORDER BY id")
        .fetch_all(pool)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_holder_rolls_back_its_writes_with_its_completion() {
    let db = TestDb::new().await.unwrap();
    sqlx::raw_sql(
        "CREATE TABLE txn_effects (task_id bigint NOT NULL, epoch bigint NOT NULL, agent text);
         CREATE TABLE txn_log (id bigserial PRIMARY KEY, task_id bigint NOT NULL,
                               epoch bigint NOT NULL, event text NOT NULL);",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let stale = spawn_test_agent(&db.url, "stale", "txn", &[])
        .await
        .unwrap();
    let stale_id = stale
        .wait_registered(&db.pool, "stale", WAIT)
        .await
        .unwrap();
    let id = insert_task(
        &db.pool,
        TaskSpec::new("txn", "queued").payload(json!({"first_ms": 8000})),
    )
    .await
    .unwrap();
    wait_until("the first attempt is inside its transaction", WAIT, || {
        let pool = db.pool.clone();
        async move { Ok(log(&pool).await == [(1, "begun".to_string())]) }
    })
    .await
    .unwrap();
    // Frozen inside the transaction, past the TTL (2 s) and grace (1 s).
    stale.stop().unwrap();

    let fresh = spawn_test_agent(&db.url, "fresh", "txn", &[])
        .await
        .unwrap();
    let fresh_id = fresh
        .wait_registered(&db.pool, "fresh", WAIT)
        .await
        .unwrap();
    wait_until("the second attempt completed", WAIT, || {
        let pool = db.pool.clone();
        async move {
            Ok(log(&pool)
                .await
                .iter()
                .any(|(epoch, event)| *epoch > 1 && event == "completed"))
        }
    })
    .await
    .unwrap_or_else(|e| {
        panic!(
            "{e}; fresh agent's log:\n{}\nstale agent's log:\n{}",
            fresh.log_tail(40),
            stale.log_tail(20)
        )
    });
    // Recovery fenced epoch 1 (→ 2) and the new claim took epoch 3.
    let (status, epoch, owner): (String, i64, String) = sqlx::query_as(
        "SELECT status::text, lease_epoch, lease_owner::text FROM tasks WHERE id = $1",
    )
    .bind(id)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        (status.as_str(), epoch, owner.as_str()),
        ("succeeded", 3, fresh_id.as_str())
    );

    // The stale transaction is still open (its session was not ended by the agent pool's own
    // statement and idle timeouts, which are half the TTL): the frozen handler holds it.
    let open: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity
         WHERE datname = current_database() AND backend_xid IS NOT NULL
           AND state = 'idle in transaction'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(open, 1, "the frozen handler's transaction is still open");
    // The stale agent resumes: its transaction must not land. The runtime drops the execution
    // (its lease is gone), which rolls the transaction back; had the handler reached its
    // completion first, the fence would have refused it (the test below).
    stale.cont().unwrap();
    wait_until("the stale transaction ended", WAIT, || {
        let pool = db.pool.clone();
        async move {
            // Its connection is gone or idle outside a transaction, and no session of the
            // database is still inside one that wrote.
            let open: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_stat_activity
                 WHERE datname = current_database() AND backend_xid IS NOT NULL
                   AND pid <> pg_backend_pid()",
            )
            .fetch_one(&pool)
            .await?;
            Ok(open == 0)
        }
    })
    .await
    .unwrap();
    let effects: Vec<(i64, String)> =
        sqlx::query_as("SELECT epoch, agent FROM txn_effects WHERE task_id = $1 ORDER BY epoch")
            .bind(id)
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(
        effects,
        vec![(3, fresh_id.clone())],
        "only the current holder's business row landed; log: {:?}",
        log(&db.pool).await
    );
    // Positive control: the stale attempt did write inside its transaction, and never
    // completed.
    let events = log(&db.pool).await;
    assert!(events.contains(&(1, "begun".to_string())), "{events:?}");
    assert!(
        !events.contains(&(1, "completed".to_string())),
        "{events:?}"
    );
    // The first attempt ended by recovery, not by its own (rolled back) completion.
    let first: String =
        sqlx::query_scalar("SELECT outcome FROM task_attempts WHERE task_id = $1 AND epoch = 1")
            .bind(id)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(first, "lease_expired");
    let agent: String =
        sqlx::query_scalar("SELECT agent FROM task_attempts WHERE task_id = $1 AND epoch = 1")
            .bind(id)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(agent, stale_id);
    drop(stale);
    drop(fresh);
    db.drop_db().await.unwrap();
}

/// The fence itself, without an agent: a transaction whose completion finds the lease moved on
/// gets `Fenced` and rolls back (its own write with it); one that still holds the lease gets
/// `Applied`, and its commit lands both.
#[tokio::test]
async fn task_complete_in_is_fenced_by_the_epoch() {
    let db = TestDb::new().await.unwrap();
    sqlx::query("CREATE TABLE effects (task_id bigint NOT NULL, owner text NOT NULL)")
        .execute(&db.pool)
        .await
        .unwrap();
    let store = PgStore::from_pool(db.pool.clone(), Default::default());
    let id = store
        .task_enqueue(NewTask::new(tt("txn.fence"), json!({})))
        .await
        .unwrap()
        .id;
    let first = store
        .task_claim(claim("old#1", &["txn.fence"], 1))
        .await
        .unwrap()
        .tasks
        .remove(0);
    let stale_key = leasehold_shared::LeaseKey {
        id,
        owner: agent("old#1"),
        epoch: first.lease_epoch,
    };
    // The old holder opens its transaction; meanwhile its lease moves on.
    let mut stale = db.pool.begin().await.unwrap();
    sqlx::query("INSERT INTO effects VALUES ($1, 'old#1')")
        .bind(id.0)
        .execute(&mut *stale)
        .await
        .unwrap();
    store
        .lease_release_many(ReleaseParams {
            owner: agent("old#1"),
            leases: vec![(id, first.lease_epoch)],
        })
        .await
        .unwrap();
    let second = store
        .task_claim(claim("new#1", &["txn.fence"], 1))
        .await
        .unwrap()
        .tasks
        .remove(0);
    let done = |key| CompleteParams {
        key,
        completion: Completion::Succeeded {
            result: Some(json!({"by": "txn"})),
        },
    };
    let outcome = task_complete_in(&mut stale, &done(stale_key))
        .await
        .unwrap();
    assert_eq!(outcome, CompleteOutcome::Fenced);
    stale.rollback().await.unwrap();

    let mut current = db.pool.begin().await.unwrap();
    sqlx::query("INSERT INTO effects VALUES ($1, 'new#1')")
        .bind(id.0)
        .execute(&mut *current)
        .await
        .unwrap();
    let key = leasehold_shared::LeaseKey {
        id,
        owner: agent("new#1"),
        epoch: second.lease_epoch,
    };
    let outcome = task_complete_in(&mut current, &done(key.clone()))
        .await
        .unwrap();
    assert!(
        matches!(outcome, CompleteOutcome::Applied { .. }),
        "{outcome:?}"
    );
    // Not committed yet: nobody else sees the task finished.
    let task = store.task_get(id).await.unwrap().unwrap().task;
    assert_eq!(task.status, leasehold_shared::TaskStatus::Running);
    current.commit().await.unwrap();
    let task = store.task_get(id).await.unwrap().unwrap().task;
    assert_eq!(
        (task.status, task.result),
        (
            leasehold_shared::TaskStatus::Succeeded,
            Some(json!({"by": "txn"}))
        )
    );
    let owners: Vec<String> = sqlx::query_scalar("SELECT owner FROM effects ORDER BY owner")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(owners, ["new#1"]);
    // The runtime's own completion afterwards is a repeat, not a second end.
    let again = store.task_complete(done(key)).await.unwrap();
    assert!(
        matches!(again, CompleteOutcome::Repeated { .. }),
        "{again:?}"
    );
    db.drop_db().await.unwrap();
}
