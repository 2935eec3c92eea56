#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Process faults against real agents (TESTING.md T01, T03, T04, T07): kill -9, SIGSTOP past
//! and within the TTL, SIGTERM drain. Every scenario ends with the ledger check.

use std::time::{Duration, Instant};

use leasehold_tests::fleet::{GRACE, POLL, TTL, spawn_test_agent};
use leasehold_tests::{TestDb, count, ledger, wait_registered, wait_until};
use serde_json::json;

const SLACK: Duration = Duration::from_secs(3);

async fn leases_of(pool: &sqlx::PgPool, owner: &str) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM tasks WHERE lease_owner = $1 AND status = 'running'")
        .bind(owner)
        .fetch_one(pool)
        .await
        .unwrap()
}

async fn is_leader(pool: &sqlx::PgPool, owner: &str) -> bool {
    sqlx::query_scalar::<_, bool>(
        "SELECT coalesce(owner = $1 AND lease_until > now(), false) FROM leader",
    )
    .bind(owner)
    .fetch_one(pool)
    .await
    .unwrap()
}

/// T01: an agent holding 50 leases is killed with SIGKILL; another agent runs every task to
/// success exactly once, within TTL + grace + polls of the kill.
async fn kill9_scenario(victim_leads: bool) {
    let db = TestDb::new().await.unwrap();
    ledger::install(&db.pool).await.unwrap();
    // The victim starts alone so it holds the leader lease (or not: a bystander leads first).
    let mut bystander = None;
    if !victim_leads {
        let b = spawn_test_agent(&db.url, "bystander", "noop", &[])
            .await
            .unwrap();
        let id = wait_registered(&db.pool, "bystander", Duration::from_secs(20))
            .await
            .unwrap();
        wait_until("the bystander leads", Duration::from_secs(10), || {
            let pool = db.pool.clone();
            let id = id.clone();
            async move { Ok(is_leader(&pool, &id).await) }
        })
        .await
        .unwrap();
        bystander = Some(b);
    }
    let mut victim = spawn_test_agent(&db.url, "victim", "ledger", &["--concurrency", "50"])
        .await
        .unwrap();
    let victim_id = wait_registered(&db.pool, "victim", Duration::from_secs(20))
        .await
        .unwrap();
    if victim_leads {
        wait_until("the victim leads", Duration::from_secs(10), || {
            let pool = db.pool.clone();
            let id = victim_id.clone();
            async move { Ok(is_leader(&pool, &id).await) }
        })
        .await
        .unwrap();
    }
    ledger::enqueue(&db.pool, "ledger", 50, json!({"ms": 60_000}))
        .await
        .unwrap();
    wait_until(
        "the victim holds 50 leases",
        Duration::from_secs(20),
        || {
            let pool = db.pool.clone();
            let id = victim_id.clone();
            async move { Ok(leases_of(&pool, &id).await == 50) }
        },
    )
    .await
    .unwrap();
    // Short tasks from now on: the rescuer finishes them quickly.
    sqlx::query("UPDATE tasks SET payload = payload || '{\"ms\": 10}'")
        .execute(&db.pool)
        .await
        .unwrap();
    let rescuer = spawn_test_agent(&db.url, "rescuer", "ledger", &["--concurrency", "50"])
        .await
        .unwrap();
    let rescuer_id = wait_registered(&db.pool, "rescuer", Duration::from_secs(20))
        .await
        .unwrap();
    victim.kill9().unwrap();
    let killed = Instant::now();
    victim.wait_exit(Duration::from_secs(5)).await.unwrap();
    wait_until(
        "every task succeeded",
        TTL + GRACE + POLL * 2 + SLACK + Duration::from_secs(5),
        || {
            let pool = db.pool.clone();
            async move {
                Ok(count(
                    &pool,
                    "SELECT count(*) FROM tasks WHERE status = 'succeeded'",
                )
                .await?
                    == 50)
            }
        },
    )
    .await
    .unwrap();
    let took = killed.elapsed();
    assert!(
        took <= TTL + GRACE + POLL * 2 + SLACK,
        "recovery took {took:?}, above TTL + grace + polls + slack"
    );
    let report = ledger::expect_all_succeeded(&db.pool).await.unwrap();
    assert_eq!(report.succeeded, 50);
    // Positive control: the victim's 50 attempts were recorded as lease-expired.
    let expired: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM task_attempts WHERE agent = $1 AND outcome = 'lease_expired'",
    )
    .bind(&victim_id)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(expired, 50, "{report:?}");
    let by_rescuer: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM tasks WHERE lease_owner = $1 AND status = 'succeeded'",
    )
    .bind(&rescuer_id)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(by_rescuer, 50);
    drop(rescuer);
    drop(bystander);
    db.drop_db().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t01_kill9_of_the_leader_holding_50_leases() {
    kill9_scenario(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t01_kill9_of_a_follower_holding_50_leases() {
    kill9_scenario(false).await;
}
