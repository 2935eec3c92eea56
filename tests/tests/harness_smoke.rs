#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Smoke test of the harness itself: a per-test database, the factory in every status, waits.

use std::time::Duration;

use leasehold_tests::factory::STATUSES;
use leasehold_tests::{TaskSpec, TestDb, backdate_lease, insert_task, wait_until};

#[tokio::test]
async fn factory_inserts_every_status() {
    let db = TestDb::new().await.unwrap();
    // The copy carries the template's migration history: migrating again is a no-op.
    db.store().migrate().await.unwrap();
    for status in STATUSES {
        insert_task(&db.pool, TaskSpec::new("smoke.test", status))
            .await
            .unwrap();
    }
    let counts: Vec<(String, i64)> =
        sqlx::query_as("SELECT status, count(*) FROM tasks GROUP BY status ORDER BY status")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(counts.len(), STATUSES.len());
    assert!(counts.iter().all(|(_, n)| *n == 1), "{counts:?}");

    let running = insert_task(&db.pool, TaskSpec::new("smoke.test", "running"))
        .await
        .unwrap();
    backdate_lease(&db.pool, running, 5.0).await.unwrap();
    let expired: bool = sqlx::query_scalar(
        "SELECT lease_until < now() AND heartbeat_at < lease_until FROM tasks WHERE id = $1",
    )
    .bind(running)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert!(expired);
    db.drop_db().await.unwrap();
}

#[tokio::test]
async fn databases_are_separate_and_waits_work() {
    let (a, b) = tokio::join!(TestDb::new(), TestDb::new());
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_ne!(a.name(), b.name());
    insert_task(&a.pool, TaskSpec::new("smoke.test", "queued"))
        .await
        .unwrap();
    let pool = b.pool_with(2).await.unwrap();
    let in_b: i64 = sqlx::query_scalar("SELECT count(*) FROM tasks")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(in_b, 0);

    let mut polls = 0;
    wait_until("the third poll", Duration::from_secs(5), || {
        polls += 1;
        let done = polls >= 3;
        async move { Ok(done) }
    })
    .await
    .unwrap();
    let timed_out = wait_until("never", Duration::from_millis(50), || async { Ok(false) }).await;
    assert!(timed_out.unwrap_err().to_string().contains("never"));

    a.drop_db().await.unwrap();
    b.drop_db().await.unwrap();
}
