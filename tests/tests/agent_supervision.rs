#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Supervised services (issue 18): when a service of a real agent dies while the agent runs,
//! the agent stops claiming, stops its executions, releases their leases and exits 1; another
//! agent runs every task at once, exactly once, and the ledger stays clean.
//!
//! The service is made to die by the agent's test failpoint (cargo feature `failpoints`,
//! enabled by this crate): `LEASEHOLD_FAILPOINT=SERVICE:panic|exit:FILE` fires once the test
//! creates `FILE`, while the victim holds its leases.

use std::time::Duration;

use leasehold_tests::fleet::{GRACE, TTL, spawn_agent, spawn_test_agent};
use leasehold_tests::{TestDb, count, ledger, scratch_dir, wait_until};
use serde_json::json;

const TASKS: i64 = 10;
const REGISTER: Duration = Duration::from_secs(20);

async fn owner_count(pool: &sqlx::PgPool, sql: &'static str, owner: &str) -> i64 {
    sqlx::query_scalar(sql)
        .bind(owner)
        .fetch_one(pool)
        .await
        .unwrap()
}

/// Runs the scenario: the victim's `service` fails by `action` while it runs [`TASKS`] long
/// executions; returns the victim's stderr and the database for more checks.
async fn service_failure(service: &str, action: &str) -> (String, String, TestDb) {
    let db = TestDb::new().await.unwrap();
    ledger::install(&db.pool).await.unwrap();
    let dir = scratch_dir("leasehold-failpoint").unwrap();
    let trigger = dir.join("fire");
    let failpoint = format!("{service}:{action}:{}", trigger.display());
    let mut victim = spawn_agent(
        "leasehold-test-agent",
        &db.url,
        "victim",
        "ledger",
        &["--concurrency", "10"],
        vec![("LEASEHOLD_FAILPOINT".into(), failpoint)],
    )
    .await
    .unwrap();
    let victim_id = victim
        .wait_registered(&db.pool, "victim", REGISTER)
        .await
        .unwrap();
    ledger::enqueue(&db.pool, "ledger", TASKS as usize, json!({"ms": 60_000}))
        .await
        .unwrap();
    wait_until(
        "the victim runs every task",
        Duration::from_secs(20),
        || {
            let pool = db.pool.clone();
            let id = victim_id.clone();
            async move {
                let held = owner_count(
                    &pool,
                    "SELECT count(*) FROM tasks WHERE lease_owner = $1 AND status = 'running'",
                    &id,
                )
                .await;
                let running = owner_count(
                    &pool,
                    "SELECT count(*) FROM test_executions WHERE agent = $1",
                    &id,
                )
                .await;
                Ok(held == TASKS && running == TASKS)
            }
        },
    )
    .await
    .unwrap();
    // Short tasks from now on, for the rescuer.
    sqlx::query("UPDATE tasks SET payload = payload || '{\"ms\": 10}'")
        .execute(&db.pool)
        .await
        .unwrap();
    let rescuer = spawn_test_agent(&db.url, "rescuer", "ledger", &["--concurrency", "10"])
        .await
        .unwrap();
    rescuer
        .wait_registered(&db.pool, "rescuer", REGISTER)
        .await
        .unwrap();

    std::fs::write(&trigger, b"").unwrap();
    let status = victim.wait_exit(Duration::from_secs(30)).await.unwrap();
    let stderr = victim.stderr_text().unwrap();
    assert_eq!(status.code(), Some(1), "{status}; stderr:\n{stderr}");
    assert!(
        stderr.contains(&format!("the agent's {service} service")),
        "the error names the service; stderr:\n{stderr}"
    );
    // Released, not left to expire: the rescuer finishes well before TTL + grace would allow
    // a recovery (the bound is generous; the positive control below is the proof).
    wait_until(
        "every task succeeded",
        TTL + GRACE + Duration::from_secs(20),
        || {
            let pool = db.pool.clone();
            async move {
                Ok(count(
                    &pool,
                    "SELECT count(*) FROM tasks WHERE status = 'succeeded'",
                )
                .await?
                    == TASKS)
            }
        },
    )
    .await
    .unwrap();
    let report = ledger::expect_all_succeeded(&db.pool).await.unwrap();
    assert_eq!(report.succeeded, TASKS as u64, "{report:?}");
    assert_eq!(report.successes_without_execution, 0, "{report:?}");
    // Positive control: the victim gave every lease back (no recovery was needed).
    let released = owner_count(
        &db.pool,
        "SELECT count(*) FROM task_attempts WHERE agent = $1 AND outcome = 'released'",
        &victim_id,
    )
    .await;
    assert_eq!(released, TASKS, "{report:?}");
    assert_eq!(report.lease_expired_attempts, 0, "{report:?}");
    assert_eq!(report.extra_executions, TASKS as u64, "{report:?}");
    drop(rescuer);
    let _ = std::fs::remove_dir_all(&dir);
    (victim_id, stderr, db)
}

/// The heartbeat panics: no lease can be proven any more, so the executions are dropped at
/// once (the ledger handler has no chance to log an end), the leases released, exit 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeat_panic_stops_the_agent_and_releases_its_tasks() {
    let (victim, stderr, db) = service_failure("heartbeat", "panic").await;
    assert!(stderr.contains("panicked"), "{stderr}");
    let ended_normally = owner_count(
        &db.pool,
        "SELECT count(*) FROM test_executions WHERE agent = $1 AND outcome IS NOT NULL",
        &victim,
    )
    .await;
    assert_eq!(ended_normally, 0, "executions were dropped, not drained");
    db.drop_db().await.unwrap();
}

/// The claimer returns on its own: the heartbeat still proves the leases, so the executions
/// are asked to stop (each logs `stopped`), their leases released, exit 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claimer_exit_stops_the_agent_and_its_executions() {
    let (victim, stderr, db) = service_failure("claimer", "exit").await;
    assert!(stderr.contains("returned early"), "{stderr}");
    let stopped = owner_count(
        &db.pool,
        "SELECT count(*) FROM test_executions WHERE agent = $1 AND outcome = 'stopped'",
        &victim,
    )
    .await;
    assert_eq!(stopped, TASKS, "every execution was asked to stop and did");
    db.drop_db().await.unwrap();
}

/// The claimer returns while the victim's handlers, which ignore the stop request, are about
/// to finish, and their completions are held up in the database: the heartbeat still proves
/// the leases, so the victim waits for its completer to write them (within the TTL) instead
/// of throwing the results away and releasing tasks that already ran — nothing runs twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_service_failure_finished_work_is_completed_not_run_again() {
    const WORK: i64 = 4;
    let db = TestDb::new().await.unwrap();
    ledger::install(&db.pool).await.unwrap();
    let dir = scratch_dir("leasehold-failpoint").unwrap();
    let trigger = dir.join("fire");
    let mut victim = spawn_agent(
        "leasehold-test-agent",
        &db.url,
        "victim",
        "ledger",
        &[
            "--concurrency",
            "10",
            "--lease-ttl",
            "8s",
            "--heartbeat",
            "2s",
            "--stop-grace",
            "10s",
        ],
        vec![(
            "LEASEHOLD_FAILPOINT".into(),
            format!("claimer:exit:{}", trigger.display()),
        )],
    )
    .await
    .unwrap();
    let victim_id = victim
        .wait_registered(&db.pool, "victim", REGISTER)
        .await
        .unwrap();
    ledger::enqueue(
        &db.pool,
        "ledger",
        WORK as usize,
        json!({"ms": 2_500, "ignore_cancel": true}),
    )
    .await
    .unwrap();
    wait_until(
        "the victim runs every task",
        Duration::from_secs(20),
        || {
            let pool = db.pool.clone();
            let id = victim_id.clone();
            async move {
                Ok(owner_count(
                    &pool,
                    "SELECT count(*) FROM test_executions WHERE agent = $1",
                    &id,
                )
                .await
                    == WORK)
            }
        },
    )
    .await
    .unwrap();
    // Completions (they write task_attempts) wait behind this lock until it goes.
    let mut hold = db.pool.begin().await.unwrap();
    sqlx::query("LOCK TABLE task_attempts IN EXCLUSIVE MODE")
        .execute(&mut *hold)
        .await
        .unwrap();
    std::fs::write(&trigger, b"").unwrap();
    wait_until("every handler returned", Duration::from_secs(20), || {
        let pool = db.pool.clone();
        let id = victim_id.clone();
        async move {
            Ok(owner_count(
                &pool,
                "SELECT count(*) FROM test_executions WHERE agent = $1 AND outcome = 'returned'",
                &id,
            )
            .await
                == WORK)
        }
    })
    .await
    .unwrap();
    // Past the agent's statement timeout (TTL / 2 = 4 s): the first completion attempt fails,
    // and a victim that does not wait for its completer gives the finished work up.
    tokio::time::sleep(Duration::from_millis(5000)).await;
    hold.rollback().await.unwrap();
    let status = victim.wait_exit(Duration::from_secs(40)).await.unwrap();
    let stderr = victim.stderr_text().unwrap();
    assert_eq!(status.code(), Some(1), "{status}; stderr:\n{stderr}");
    let succeeded = owner_count(
        &db.pool,
        "SELECT count(*) FROM task_attempts WHERE agent = $1 AND outcome = 'succeeded'",
        &victim_id,
    )
    .await;
    let waiting = count(
        &db.pool,
        "SELECT count(*) FROM tasks WHERE status <> 'succeeded'",
    )
    .await
    .unwrap();
    assert_eq!(
        (succeeded, waiting),
        (WORK, 0),
        "work the victim finished was not completed by it (it would run again); stderr:\n{stderr}"
    );
    let report = ledger::expect_all_succeeded(&db.pool).await.unwrap();
    assert_eq!(report.extra_executions, 0, "{report:?}");
    let _ = std::fs::remove_dir_all(&dir);
    db.drop_db().await.unwrap();
}
