#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Maintenance statements added with the agent runtime: retention of finished tasks, and the
//! count of claimable tasks behind `--exit-when-idle`.

use std::time::Duration;

use leasehold_shared::store::PurgeParams;
use leasehold_shared::{Store, StoreError, TaskStatus};
use leasehold_tests::helpers::tt;
use leasehold_tests::{TaskSpec, TestDb, count, insert_task};

async fn age(db: &TestDb, id: i64, days: i64) {
    sqlx::query("UPDATE tasks SET finished_at = now() - make_interval(days => $2) WHERE id = $1")
        .bind(id)
        .bind(days as i32)
        .execute(&db.pool)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_deletes_only_old_finished_tasks_of_the_given_statuses() {
    let db = TestDb::new().await.unwrap();
    let store = db.store();
    let old_ok = insert_task(&db.pool, TaskSpec::new("keep.me", "succeeded"))
        .await
        .unwrap();
    let new_ok = insert_task(&db.pool, TaskSpec::new("keep.me", "succeeded"))
        .await
        .unwrap();
    let old_dead = insert_task(&db.pool, TaskSpec::new("keep.me", "dead"))
        .await
        .unwrap();
    let running = insert_task(&db.pool, TaskSpec::new("keep.me", "running"))
        .await
        .unwrap();
    let queued = insert_task(&db.pool, TaskSpec::new("keep.me", "queued"))
        .await
        .unwrap();
    age(&db, old_ok, 10).await;
    age(&db, old_dead, 10).await;
    sqlx::query("INSERT INTO task_attempts (task_id, epoch, attempt, agent, started_at, outcome) VALUES ($1, 1, 1, 'a#1', now(), 'succeeded')")
        .bind(old_ok)
        .execute(&db.pool)
        .await
        .unwrap();

    let deleted = store
        .task_purge_finished(PurgeParams {
            statuses: vec![
                TaskStatus::Succeeded,
                TaskStatus::PartiallySucceeded,
                TaskStatus::Cancelled,
            ],
            older_than: Duration::from_secs(7 * 24 * 3600),
            limit: 100,
        })
        .await
        .unwrap();
    assert_eq!(deleted, 1, "only the old succeeded task");
    let left: Vec<i64> = sqlx::query_scalar("SELECT id FROM tasks ORDER BY id")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(left, vec![new_ok, old_dead, running, queued]);
    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM task_attempts")
            .await
            .unwrap(),
        0,
        "its attempts went with it"
    );

    // Dead letters have their own (longer) retention.
    let deleted = store
        .task_purge_finished(PurgeParams {
            statuses: vec![TaskStatus::Dead],
            older_than: Duration::from_secs(30 * 24 * 3600),
            limit: 100,
        })
        .await
        .unwrap();
    assert_eq!(deleted, 0, "10 days is within 30");

    // Bad input changes nothing.
    for bad in [
        PurgeParams {
            statuses: vec![TaskStatus::Running],
            older_than: Duration::ZERO,
            limit: 10,
        },
        PurgeParams {
            statuses: vec![TaskStatus::Dead],
            older_than: Duration::ZERO,
            limit: 0,
        },
    ] {
        let err = store.task_purge_finished(bad).await.unwrap_err();
        assert!(matches!(err, StoreError::Invalid(_)), "{err}");
    }
    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM tasks").await.unwrap(),
        4
    );
    db.drop_db().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claimable_counts_due_waiting_tasks_of_unpaused_types_only() {
    let db = TestDb::new().await.unwrap();
    let store = db.store();
    insert_task(&db.pool, TaskSpec::new("a", "queued"))
        .await
        .unwrap();
    insert_task(&db.pool, TaskSpec::new("a", "retry_wait"))
        .await
        .unwrap();
    insert_task(&db.pool, TaskSpec::new("a", "running"))
        .await
        .unwrap();
    insert_task(&db.pool, TaskSpec::new("a", "succeeded"))
        .await
        .unwrap();
    let later = insert_task(&db.pool, TaskSpec::new("a", "queued"))
        .await
        .unwrap();
    sqlx::query("UPDATE tasks SET available_at = now() + interval '1 hour' WHERE id = $1")
        .bind(later)
        .execute(&db.pool)
        .await
        .unwrap();
    insert_task(&db.pool, TaskSpec::new("b", "queued"))
        .await
        .unwrap();
    assert_eq!(store.task_count_claimable(vec![tt("a")]).await.unwrap(), 2);
    assert_eq!(
        store
            .task_count_claimable(vec![tt("a"), tt("b")])
            .await
            .unwrap(),
        3
    );
    sqlx::query("INSERT INTO policies (scope, paused) VALUES ('b', true)")
        .execute(&db.pool)
        .await
        .unwrap();
    assert_eq!(
        store
            .task_count_claimable(vec![tt("a"), tt("b")])
            .await
            .unwrap(),
        2,
        "paused types wait"
    );
    db.drop_db().await.unwrap();
}
