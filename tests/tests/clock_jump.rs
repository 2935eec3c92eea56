#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! T21: the database clock jumps forward by ten minutes while two agents run 40 ledger tasks.
//! The jump makes every lease look expired (lease_until + grace is far behind now()), and the
//! leader lease too. The maintenance loop sees the database clock run ahead of monotonic time
//! and holds recovery for one TTL, in which the holders' heartbeats renew every lease at the
//! new time: no live lease is revoked, nothing runs twice, every task succeeds once.
//!
//! The clock is stepped with libfaketime preloaded into a private PostgreSQL server
//! ([`leasehold_tests::faketime`]); the agents' own clocks are untouched.

use std::time::Duration;

use chrono::{DateTime, Utc};
use leasehold_tests::faketime::FakeClock;
use leasehold_tests::fleet::spawn_test_agent;
use leasehold_tests::{AgentHandle, PgCluster, count, ledger, wait_until};
use serde_json::json;
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;

const TASKS: usize = 40;
/// Long enough for the tasks to be running before the jump and through the hold after it.
const TASK_MS: u64 = 6_000;
/// Ten minutes: far beyond TTL + grace (2 s + 1 s).
const JUMP_SECS: i64 = 600;
const REGISTER: Duration = Duration::from_secs(20);
const JUMP_SEEN: &str = "database clock jumped forward";

async fn db_now(pool: &PgPool) -> DateTime<Utc> {
    sqlx::query_scalar("SELECT clock_timestamp()")
        .fetch_one(pool)
        .await
        .unwrap()
}

fn logged(agent: &AgentHandle, needle: &str) -> usize {
    agent
        .stderr_text()
        .unwrap()
        .lines()
        .filter(|l| l.contains(needle))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t21_a_database_clock_jump_revokes_no_live_lease() {
    let clock = FakeClock::new().unwrap();
    let cluster = PgCluster::start_with_env(&[], clock.env()).await.unwrap();
    let url = cluster
        .create_migrated_database("leasehold_t21")
        .await
        .unwrap();
    let pool = PgPoolOptions::new()
        .max_connections(4)
        .connect(&url)
        .await
        .unwrap();
    ledger::install(&pool).await.unwrap();
    let skew = (db_now(&pool).await - Utc::now()).abs();
    assert!(
        skew < chrono::Duration::seconds(30),
        "the faked clock starts at real time, not {skew}"
    );

    let alpha = spawn_test_agent(&url, "alpha", "ledger", &["--concurrency", "20"])
        .await
        .unwrap();
    let beta = spawn_test_agent(&url, "beta", "ledger", &["--concurrency", "20"])
        .await
        .unwrap();
    alpha
        .wait_registered(&pool, "alpha", REGISTER)
        .await
        .unwrap();
    beta.wait_registered(&pool, "beta", REGISTER).await.unwrap();
    wait_until("an agent leads", Duration::from_secs(10), || {
        let pool = pool.clone();
        async move {
            Ok(count(
                &pool,
                "SELECT count(*) FROM leader WHERE owner IS NOT NULL AND lease_until > now()",
            )
            .await?
                == 1)
        }
    })
    .await
    .unwrap();
    ledger::enqueue(&pool, "ledger", TASKS, json!({"ms": TASK_MS}))
        .await
        .unwrap();
    wait_until("every task is running", Duration::from_secs(20), || {
        let pool = pool.clone();
        async move {
            Ok(
                count(&pool, "SELECT count(*) FROM tasks WHERE status = 'running'").await?
                    == TASKS as i64,
            )
        }
    })
    .await
    .unwrap();

    clock.set_offset(JUMP_SECS).unwrap();
    // Positive control: the database clock really is ten minutes ahead, so every lease not
    // renewed since looks long expired to it.
    let ahead = db_now(&pool).await - Utc::now();
    assert!(
        ahead > chrono::Duration::seconds(JUMP_SECS - 30),
        "the database clock did not jump (ahead by {ahead})"
    );
    wait_until("every task succeeded", Duration::from_secs(60), || {
        let pool = pool.clone();
        async move {
            Ok(count(
                &pool,
                "SELECT count(*) FROM tasks WHERE status = 'succeeded'",
            )
            .await?
                == TASKS as i64)
        }
    })
    .await
    .unwrap();

    let report = ledger::expect_all_succeeded(&pool).await.unwrap();
    let revoked = count(
        &pool,
        "SELECT count(*) FROM task_attempts WHERE outcome = 'lease_expired'",
    )
    .await
    .unwrap();
    let (alpha_log, beta_log) = (alpha.log_tail(30), beta.log_tail(30));
    assert_eq!(
        revoked, 0,
        "live leases were revoked after the clock jump: {report:?}\nalpha:\n{alpha_log}\nbeta:\n{beta_log}"
    );
    assert_eq!(report.succeeded, TASKS as u64, "{report:?}");
    assert_eq!(
        report.executions, TASKS as u64,
        "a task ran twice: {report:?}"
    );
    assert_eq!(report.extra_executions, 0, "{report:?}");
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM tasks WHERE attempt <> 1 OR lease_epoch <> 1"
        )
        .await
        .unwrap(),
        0,
        "a task was claimed more than once"
    );
    // Positive control: both agents' maintenance saw the jump (each reads the clock every
    // tick, leader or not), and said so.
    for agent in [&alpha, &beta] {
        assert!(
            logged(agent, JUMP_SEEN) >= 1,
            "{} did not report the clock jump:\n{}",
            agent.label(),
            agent.log_tail(30)
        );
    }
    drop(alpha);
    drop(beta);
    pool.close().await;
    drop(cluster);
}
