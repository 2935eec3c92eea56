#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Supervised services (issue 18): when a service of a real agent dies while the agent runs,
//! the agent stops claiming, stops its executions, releases their leases and exits 1; another
//! agent runs every task at once, exactly once, and the ledger stays clean.
//!
//! The service is made to die by the agent's test failpoint (cargo feature `failpoints`,
//! enabled by this crate): `LEASEHOLD_FAILPOINT=SERVICE:panic|exit:FILE` fires once the test
//! creates `FILE`, while the victim holds its leases.

use std::path::PathBuf;
use std::time::Duration;

use leasehold_tests::fleet::{GRACE, TTL, spawn_agent};
use leasehold_tests::scenario::{leases_held, shorten_tasks, start_rescuer, wait_succeeded};
use leasehold_tests::{AgentHandle, TestDb, count, ledger, scratch_dir, wait_until};
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

/// Which executions count: a test of an execution's `outcome` (`None` while it runs, or when it
/// was dropped before it could log an end).
type Outcome = fn(Option<&str>) -> bool;

/// Every execution, ended or not.
const ANY: Outcome = |_| true;

/// Executions of `agent` (rows of `test_executions`) whose outcome passes `which`.
async fn executions(pool: &sqlx::PgPool, agent: &str, which: Outcome) -> i64 {
    let outcomes: Vec<Option<String>> =
        sqlx::query_scalar("SELECT outcome FROM test_executions WHERE agent = $1")
            .bind(agent)
            .fetch_all(pool)
            .await
            .unwrap();
    outcomes.iter().filter(|o| which(o.as_deref())).count() as i64
}

/// Waits (`what`) until `agent` has `n` executions passing `which`.
async fn wait_executions(db: &TestDb, what: &str, agent: &str, which: Outcome, n: i64) {
    wait_until(what, Duration::from_secs(20), || async move {
        Ok(executions(&db.pool, agent, which).await == n)
    })
    .await
    .unwrap();
}

/// Spawns the victim with `extra` flags and its failpoint `failpoint` (`SERVICE:ACTION`) armed
/// on a trigger file in a fresh scratch directory: the victim, its agent id, the directory and
/// the trigger file.
async fn spawn_victim(
    db: &TestDb,
    extra: &[&str],
    failpoint: &str,
) -> (AgentHandle, String, PathBuf, PathBuf) {
    let dir = scratch_dir("leasehold-failpoint").unwrap();
    let trigger = dir.join("fire");
    let victim = spawn_agent(
        "leasehold-test-agent",
        &db.url,
        "victim",
        "ledger",
        extra,
        vec![(
            "LEASEHOLD_FAILPOINT".into(),
            format!("{failpoint}:{}", trigger.display()),
        )],
    )
    .await
    .unwrap();
    let victim_id = victim
        .wait_registered(&db.pool, "victim", REGISTER)
        .await
        .unwrap();
    (victim, victim_id, dir, trigger)
}

/// A service failure: the victim's `service` fails by `action`; its stderr then `says` so,
/// and `count` of its executions have an outcome passing `which` (`why`, for the failure).
struct Failure {
    service: &'static str,
    action: &'static str,
    says: &'static str,
    which: Outcome,
    count: i64,
    why: &'static str,
}

/// Runs the scenario: the victim's service fails as `failure` says while it runs [`TASKS`]
/// long executions; checks the rescue and then `failure`'s own outcome.
async fn service_failure(failure: Failure) {
    let Failure {
        service, action, ..
    } = failure;
    let db = TestDb::new().await.unwrap();
    ledger::install(&db.pool).await.unwrap();
    let (mut victim, victim_id, dir, trigger) = spawn_victim(
        &db,
        &["--concurrency", "10"],
        &format!("{service}:{action}"),
    )
    .await;
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
                let held = leases_held(&pool, &id).await?;
                let running = executions(&pool, &id, ANY).await;
                Ok(held == TASKS && running == TASKS)
            }
        },
    )
    .await
    .unwrap();
    // Short tasks from now on, for the rescuer.
    shorten_tasks(&db.pool).await.unwrap();
    let (rescuer, _) = start_rescuer(&db, 10).await.unwrap();

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
    wait_succeeded(
        &db.pool,
        "every task succeeded",
        TASKS,
        TTL + GRACE + Duration::from_secs(20),
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

    assert!(stderr.contains(failure.says), "{stderr}");
    let counted = executions(&db.pool, &victim_id, failure.which).await;
    assert_eq!(counted, failure.count, "{}", failure.why);
    db.drop_db().await.unwrap();
}

/// The heartbeat panics: no lease can be proven any more, so the executions are dropped at
/// once (the ledger handler has no chance to log an end), the leases released, exit 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeat_panic_stops_the_agent_and_releases_its_tasks() {
    service_failure(Failure {
        service: "heartbeat",
        action: "panic",
        says: "panicked",
        which: |outcome| outcome.is_some(),
        count: 0,
        why: "executions were dropped, not drained",
    })
    .await;
}

/// The claimer returns on its own: the heartbeat still proves the leases, so the executions
/// are asked to stop (each logs `stopped`), their leases released, exit 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claimer_exit_stops_the_agent_and_its_executions() {
    service_failure(Failure {
        service: "claimer",
        action: "exit",
        says: "returned early",
        which: |outcome| outcome == Some("stopped"),
        count: TASKS,
        why: "every execution was asked to stop and did",
    })
    .await;
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
    let (mut victim, victim_id, dir, trigger) = spawn_victim(
        &db,
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
        "claimer:exit",
    )
    .await;
    ledger::enqueue(
        &db.pool,
        "ledger",
        WORK as usize,
        json!({"ms": 2_500, "ignore_cancel": true}),
    )
    .await
    .unwrap();
    wait_executions(&db, "the victim runs every task", &victim_id, ANY, WORK).await;
    // Completions (they update the task rows) wait behind this lock until it goes. Only the
    // `tasks` table: `task_attempts` is a view, and locking it takes its two tables one after
    // the other, which deadlocks with a completion that holds `tasks` and writes an attempt row.
    let mut hold = db.pool.begin().await.unwrap();
    sqlx::query("LOCK TABLE tasks IN EXCLUSIVE MODE")
        .execute(&mut *hold)
        .await
        .unwrap();
    std::fs::write(&trigger, b"").unwrap();
    wait_executions(
        &db,
        "every handler returned",
        &victim_id,
        |outcome| outcome == Some("returned"),
        WORK,
    )
    .await;
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
