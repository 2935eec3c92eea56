#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! T02 at agent level (TESTING.md): an agent that crashes after its handler succeeded but
//! before the completion commit loses nothing (the task runs again elsewhere, the extra
//! execution explained by the revoked epoch), and a completion whose commit reply was lost is
//! retried and reported accepted, not fenced. Each ends with the ledger check and a positive
//! control proving the fault fired.

use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

use leasehold_tests::fleet::{GRACE, POLL, TTL, spawn_agent, spawn_test_agent};
use leasehold_tests::proxy::addr_of_url;
use leasehold_tests::scenario::{
    FENCED_LOG, Figures, log_count, spawn_proxied, unfinished_ledger_tasks, wait_ledger_done,
};
use leasehold_tests::{ProxyMode, TcpProxy, TestDb, ledger, wait_until};
use serde_json::json;
use sqlx::Connection;

const REGISTER: Duration = Duration::from_secs(20);
const SLACK: Duration = Duration::from_secs(10);

/// T02: the victim's handlers finish their work (the ledger logs them `returned`) and the
/// process aborts before any completion is written. Recovery takes the leases after TTL +
/// grace, a rescuer runs every task again and completes it; each victim execution is explained
/// by its revoked epoch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t02_crash_after_success_before_the_completion_commit() {
    const TASKS: usize = 5;
    let db = TestDb::new().await.unwrap();
    ledger::install(&db.pool).await.unwrap();
    let mut victim = spawn_agent(
        "leasehold-test-agent",
        &db.url,
        "t02-victim",
        "ledger",
        &["--concurrency", "5"],
        vec![("LEASEHOLD_TEST_CRASH_AFTER_RETURN".into(), "1".into())],
    )
    .await
    .unwrap();
    let victim_id = victim
        .wait_registered(&db.pool, "t02-victim", REGISTER)
        .await
        .unwrap();
    // Work long enough that the victim claims all five before the first one returns.
    let tasks = ledger::enqueue(&db.pool, "ledger", TASKS, json!({"ms": 1500}))
        .await
        .unwrap();
    let status = victim.wait_exit(Duration::from_secs(30)).await.unwrap();
    assert_eq!(
        status.signal(),
        Some(6),
        "the victim did not abort: {status}; end of its stderr:\n{}",
        victim.log_tail(40)
    );
    // Positive control: the victim finished work whose completion never landed.
    let (returned, started): (i64, i64) = sqlx::query_as(
        "SELECT count(*) FILTER (WHERE outcome = 'returned'), count(*) FROM test_executions WHERE agent = $1",
    )
    .bind(&victim_id)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert!(
        returned >= 1,
        "no victim execution returned before the crash"
    );
    let committed: i64 = sqlx::query_scalar("SELECT count(*) FROM task_attempts WHERE agent = $1")
        .bind(&victim_id)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(committed, 0, "a victim attempt ended before the recovery");
    assert_eq!(
        unfinished_ledger_tasks(&db.pool).await.unwrap(),
        TASKS as i64
    );

    let rescuer = spawn_test_agent(&db.url, "t02-rescuer", "ledger", &["--concurrency", "5"])
        .await
        .unwrap();
    let rescuer_id = rescuer
        .wait_registered(&db.pool, "t02-rescuer", REGISTER)
        .await
        .unwrap();
    wait_ledger_done(&db.pool, TTL * 2 + GRACE + POLL * 2 + SLACK)
        .await
        .unwrap();
    let report = ledger::expect_all_succeeded(&db.pool).await.unwrap();
    assert_eq!(report.succeeded, TASKS as u64, "{report:?}");
    // Every victim execution is extra and explained by its revoked (lease-expired) epoch.
    assert_eq!(report.extra_executions, started as u64, "{report:?}");
    let (expired, by_rescuer): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM task_attempts WHERE agent = $1 AND task_id = ANY($3) \
                   AND outcome = 'lease_expired'), \
                (SELECT count(*) FROM tasks t WHERE t.id = ANY($3) AND t.lease_owner = $2 \
                   AND t.status = 'succeeded' AND t.lease_epoch > \
                   (SELECT a.epoch FROM task_attempts a WHERE a.task_id = t.id AND a.agent = $1))",
    )
    .bind(&victim_id)
    .bind(&rescuer_id)
    .bind(&tasks)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(expired, TASKS as i64, "{report:?}");
    assert_eq!(by_rescuer, TASKS as i64, "{report:?}");
    let crash_logged = log_count(&victim, "crashing after task");
    assert_eq!(crash_logged, 1, "{}", victim.log_tail(20));
    let figures = Figures::collect(
        &db.pool,
        "T02 crash",
        &report,
        1,
        log_count(&rescuer, FENCED_LOG),
    )
    .await
    .unwrap();
    assert!(figures.clean(), "{figures:?}");
    eprintln!(
        "t02 crash: victim started {started} executions, {returned} returned before it aborted; {report:?}"
    );
    eprintln!("{}", figures.line());
    drop(rescuer);
    db.drop_db().await.unwrap();
}

/// Key of the advisory lock [`HOLD_COMMIT`] waits on.
const HOLD_COMMIT_KEY: i64 = 0x7402;

/// A deferred trigger: every transaction that finishes a task (sets its final attempt's
/// outcome) waits in its COMMIT for the advisory lock `HOLD_COMMIT_KEY` (free unless the test
/// holds it). Finishing moves the row to its day's partition of `tasks`, which PostgreSQL does
/// as a delete and an insert: the insert into the finished partition is what fires.
const HOLD_COMMIT: &str = "
CREATE FUNCTION test_hold_commit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(29698);
    RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER test_hold_commit AFTER INSERT ON tasks
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN (NEW.final_outcome IS NOT NULL)
    EXECUTE FUNCTION test_hold_commit();
";

/// T02: the reply to a completion's commit is lost. The completion's COMMIT is held (a deferred
/// trigger waiting on an advisory lock) until the agent's connections are blackholed; then it
/// commits in PostgreSQL with its reply stuck in the proxy, and every connection is reset. The agent retries the completion on a
/// new connection: the store reports it repeated, the agent counts it succeeded, not fenced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t02_completion_whose_commit_reply_was_lost_is_accepted_on_retry() {
    let db = TestDb::new().await.unwrap();
    ledger::install(&db.pool).await.unwrap();
    sqlx::raw_sql(HOLD_COMMIT).execute(&db.pool).await.unwrap();
    let proxy = TcpProxy::start(addr_of_url(&db.url).await.unwrap())
        .await
        .unwrap();
    // A 6 s lease: the blackhole and the retry stay well within the local safety deadline, so
    // the only fault is the lost reply.
    let mut agent = spawn_proxied(
        &db.url,
        &proxy,
        "t02-reply",
        "ledger",
        &["--lease-ttl", "6s", "--grace", "2s", "--output", "json"],
        Vec::new(),
    )
    .await
    .unwrap();
    let agent_id = agent
        .wait_registered(&db.pool, "t02-reply", REGISTER)
        .await
        .unwrap();

    let task = ledger::enqueue(&db.pool, "ledger", 1, json!({"ms": 800}))
        .await
        .unwrap()[0];
    wait_until("the agent runs the task", Duration::from_secs(20), || {
        let pool = db.pool.clone();
        async move {
            let n: i64 = sqlx::query_scalar("SELECT count(*) FROM test_executions")
                .fetch_one(&pool)
                .await?;
            Ok(n == 1)
        }
    })
    .await
    .unwrap();
    // The completion's COMMIT waits on the test's advisory lock (a deferred trigger), after its
    // statement ran: the agent has sent COMMIT and waits for the reply.
    let mut blocker = sqlx::PgConnection::connect(&db.url).await.unwrap();
    sqlx::query("SELECT pg_advisory_lock($1)")
        .bind(HOLD_COMMIT_KEY)
        .execute(&mut blocker)
        .await
        .unwrap();
    wait_until(
        "the agent's completion waits in COMMIT",
        Duration::from_secs(20),
        || {
            let pool = db.pool.clone();
            let datname = db.name().to_string();
            async move {
                let waiting: i64 = sqlx::query_scalar(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 \
                     AND application_name = 'leasehold-agent t02-reply' \
                     AND wait_event = 'advisory' AND query = 'COMMIT'",
                )
                .bind(datname)
                .fetch_one(&pool)
                .await?;
                Ok(waiting >= 1)
            }
        },
    )
    .await
    .unwrap();
    proxy.set_mode(ProxyMode::Blackhole);
    sqlx::query("SELECT pg_advisory_unlock($1)")
        .bind(HOLD_COMMIT_KEY)
        .execute(&mut blocker)
        .await
        .unwrap();
    // The completion commits in PostgreSQL; its reply cannot reach the agent.
    wait_until("the completion committed", Duration::from_secs(5), || {
        let pool = db.pool.clone();
        async move { Ok(unfinished_ledger_tasks(&pool).await? == 0) }
    })
    .await
    .unwrap();
    assert_eq!(
        log_count(&agent, "completion repeated"),
        0,
        "the agent heard the reply"
    );
    proxy.set_mode(ProxyMode::Reset);
    proxy.set_mode(ProxyMode::Pass);
    wait_until(
        "the agent retries and hears the completion was repeated",
        Duration::from_secs(20),
        || {
            let n = log_count(&agent, "completion repeated: it had already landed");
            async move { Ok(n >= 1) }
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e:#}; end of its stderr:\n{}", agent.log_tail(40)));
    agent.sigterm().unwrap();
    let status = agent.wait_exit(Duration::from_secs(15)).await.unwrap();
    assert!(status.success(), "{status}:\n{}", agent.log_tail(40));

    // Positive control: the first write failed with the connection, the retry was a repeat.
    assert!(
        log_count(&agent, "completion batch failed; retrying") >= 1,
        "{}",
        agent.log_tail(40)
    );
    let summary = agent
        .stdout_text()
        .unwrap()
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str::<serde_json::Value>(l.trim()).ok())
        .unwrap_or_else(|| panic!("no JSON summary:\n{}", agent.log_tail(40)));
    assert_eq!(summary["agent_id"], json!(agent_id), "{summary}");
    assert_eq!(
        summary["succeeded"],
        json!(1),
        "reported accepted: {summary}"
    );
    assert_eq!(summary["fenced"], json!(0), "not fenced: {summary}");
    assert_eq!(log_count(&agent, FENCED_LOG), 0);

    let report = ledger::expect_all_succeeded(&db.pool).await.unwrap();
    assert_eq!(report.executions, 1, "{report:?}");
    assert_eq!(report.extra_executions, 0, "{report:?}");
    let attempts = leasehold_tests::attempt_rows(&db.pool, task).await.unwrap();
    assert_eq!(
        attempts,
        vec![(1, agent_id.clone(), "succeeded".to_string())],
        "one accepted completion, at epoch 1"
    );
    let figures = Figures::collect(&db.pool, "T02 lost reply", &report, 1, 0)
        .await
        .unwrap();
    assert!(figures.clean(), "{figures:?}");
    eprintln!("t02 lost reply: {summary}; {report:?}");
    eprintln!("{}", figures.line());
    drop(proxy);
    db.drop_db().await.unwrap();
}
