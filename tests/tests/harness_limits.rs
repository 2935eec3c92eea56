#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The ledger's limit check ([`leasehold_tests::limits`]) catches what it claims to: leases of
//! a limited type, or of all types under the global limit, held at once above the limit — from
//! attempt rows written by hand with chosen database times — and not leases that merely touch.

use leasehold_tests::limits::{self, LimitPeak};
use leasehold_tests::{TaskSpec, TestDb, insert_task};
use sqlx::PgPool;

async fn limit(pool: &PgPool, scope: &str, n: i32) {
    sqlx::query(
        "WITH set AS (UPDATE policies SET max_concurrency = $2 WHERE scope = $1 RETURNING 1) \
         INSERT INTO policies (scope, max_concurrency) SELECT $1, $2 \
         WHERE NOT EXISTS (SELECT 1 FROM set)",
    )
    .bind(scope)
    .bind(n)
    .execute(pool)
    .await
    .unwrap();
}

/// A succeeded task of `task_type` whose one attempt held its lease from `from` to `to`
/// seconds after midnight, 1 January 2000.
async fn lease(pool: &PgPool, task_type: &str, from: f64, to: f64) {
    let id = insert_task(pool, TaskSpec::new(task_type, "succeeded"))
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO task_attempt_rows (task_id, epoch, attempt, agent, started_at, finished_at, outcome) \
         VALUES ($1, 1, 1, 'a#1', timestamptz '2000-01-01 00:00:00+00' + $2 * interval '1 second', \
                 timestamptz '2000-01-01 00:00:00+00' + $3 * interval '1 second', 'succeeded')",
    )
    .bind(id)
    .bind(from)
    .bind(to)
    .execute(pool)
    .await
    .unwrap();
}

fn peak(peaks: &[LimitPeak], scope: &str) -> (i64, i64) {
    let p = peaks.iter().find(|p| p.scope == scope).unwrap();
    (p.peak, p.limit)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_above_a_type_limit_at_one_instant_are_caught() {
    let db = TestDb::new().await.unwrap();
    limit(&db.pool, "mail", 2).await;
    // Two at once, then a third overlapping both for a second: three at once.
    lease(&db.pool, "mail", 0.0, 10.0).await;
    lease(&db.pool, "mail", 1.0, 5.0).await;
    lease(&db.pool, "mail", 4.0, 6.0).await;
    // Another type is not counted against this one.
    lease(&db.pool, "other", 0.0, 10.0).await;
    let error = limits::check(&db.pool).await.unwrap_err().to_string();
    assert!(error.contains("mail 3/2 (3 leases)"), "{error}");
    db.drop_db().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_that_only_touch_stay_within_the_limit() {
    let db = TestDb::new().await.unwrap();
    limit(&db.pool, "mail", 2).await;
    // Each new lease starts the instant another ends: never more than two at once.
    lease(&db.pool, "mail", 0.0, 10.0).await;
    lease(&db.pool, "mail", 0.0, 3.0).await;
    lease(&db.pool, "mail", 3.0, 6.0).await;
    lease(&db.pool, "mail", 6.0, 10.0).await;
    let peaks = limits::check(&db.pool).await.unwrap();
    assert_eq!(peak(&peaks, "mail"), (2, 2));
    // The global row has no limit by default: it is not swept.
    assert!(peaks.iter().all(|p| p.scope != "*"), "{peaks:?}");
    db.drop_db().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_global_limit_counts_every_type_and_leases_still_held() {
    let db = TestDb::new().await.unwrap();
    limit(&db.pool, "*", 2).await;
    lease(&db.pool, "mail", 0.0, 10.0).await;
    lease(&db.pool, "report", 2.0, 4.0).await;
    assert_eq!(peak(&limits::check(&db.pool).await.unwrap(), "*"), (2, 2));
    // A lease still held counts from its start (now) on, with no end: one alone overlaps
    // neither attempt, which ended long ago …
    insert_task(&db.pool, TaskSpec::new("mail", "running"))
        .await
        .unwrap();
    assert_eq!(peak(&limits::check(&db.pool).await.unwrap(), "*"), (2, 2));
    // … but three held at once are above the limit.
    insert_task(&db.pool, TaskSpec::new("report", "cancel_requested"))
        .await
        .unwrap();
    insert_task(&db.pool, TaskSpec::new("mail", "running"))
        .await
        .unwrap();
    let error = limits::check(&db.pool).await.unwrap_err().to_string();
    assert!(error.contains("* 3/2"), "{error}");
    db.drop_db().await.unwrap();
}
