#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Tests of the fault tools themselves: the TCP proxy's modes, a private cluster that
//! restarts and crashes, and a ledger checker that does catch what it claims to.

use std::time::{Duration, Instant};

use std::os::unix::process::ExitStatusExt;
use std::path::Path;

use leasehold_tests::proxy::addr_of_url;
use leasehold_tests::{
    AgentHandle, PgCluster, ProxyMode, TaskSpec, TcpProxy, TestDb, insert_task, ledger,
    wait_registered, wait_until,
};
use serde_json::json;
use sqlx::postgres::PgConnection;
use sqlx::{Connection, PgPool};

async fn select_one(conn: &mut PgConnection) -> Result<i32, sqlx::Error> {
    sqlx::query_scalar("SELECT 1").fetch_one(conn).await
}

/// A stand-in for an agent: a shell that reports on stdout and stderr, ticks a counter file,
/// and exits 3 on SIGTERM.
fn spawn_shell(script: &str) -> AgentHandle {
    AgentHandle::spawn(
        Path::new("/bin/sh"),
        vec![
            "-c".into(),
            script.into(),
            "sh".into(),
            "--name".into(),
            "stand-in".into(),
        ],
        vec![("RUST_LOG".into(), "debug".into())],
    )
    .unwrap()
}

fn process_state(pid: u32) -> char {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // pid (comm) S ...: the state follows the last ')'.
    stat[stat.rfind(')').unwrap() + 2..].chars().next().unwrap()
}

#[tokio::test]
async fn agent_handle_signals_waits_and_cleans_up() {
    let script = "echo \"hello $RUST_LOG\"; echo oops >&2; trap 'echo bye; exit 3' TERM; \
                  while true; do sleep 0.02; done";
    let mut agent = spawn_shell(script);
    let dir = agent.log_dir().to_path_buf();
    assert!(agent.label().contains("\"stand-in\""), "{}", agent.label());
    wait_until(
        "the stand-in wrote its greeting",
        Duration::from_secs(10),
        || {
            let text = agent.stdout_text().unwrap();
            async move { Ok(text.contains("hello debug")) }
        },
    )
    .await
    .unwrap();
    assert_eq!(agent.stderr_text().unwrap(), "oops\n");
    assert_eq!(agent.log_tail(1), "oops");

    // STOP freezes it, CONT resumes it.
    agent.stop().unwrap();
    wait_until("the stand-in is stopped", Duration::from_secs(10), || {
        let state = process_state(agent.pid());
        async move { Ok(state == 'T') }
    })
    .await
    .unwrap();
    assert!(agent.is_running());
    agent.cont().unwrap();
    wait_until("the stand-in runs again", Duration::from_secs(10), || {
        let state = process_state(agent.pid());
        async move { Ok(state != 'T') }
    })
    .await
    .unwrap();

    // A timed-out wait names the agent and quotes its stderr.
    let error = agent
        .wait_exit(Duration::from_millis(100))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("stand-in") && error.contains("oops"),
        "{error}"
    );

    // TERM runs its trap.
    agent.sigterm().unwrap();
    let status = agent.wait_exit(Duration::from_secs(10)).await.unwrap();
    assert_eq!(status.code(), Some(3));
    assert!(agent.stdout_text().unwrap().contains("bye"));
    assert!(!agent.is_running());
    assert!(agent.sigterm().is_err(), "signalled a reaped pid");
    drop(agent);
    assert!(!dir.exists(), "log directory left behind");

    // KILL.
    let mut agent = spawn_shell("while true; do sleep 0.02; done");
    agent.kill9().unwrap();
    let status = agent.wait_exit(Duration::from_secs(10)).await.unwrap();
    assert_eq!(status.signal(), Some(9));
    drop(agent);

    // Dropping a stopped agent kills and reaps it.
    let agent = spawn_shell("while true; do sleep 0.02; done");
    let pid = agent.pid();
    agent.stop().unwrap();
    drop(agent);
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "{pid} survived the drop"
    );
}

#[tokio::test]
async fn registered_agents_are_found_by_name_and_pid() {
    let db = TestDb::new().await.unwrap();
    let agent = spawn_shell("while true; do sleep 0.02; done");
    let pid = i32::try_from(agent.pid()).unwrap();
    let insert = "INSERT INTO agents (id, name, host, pid, version, local_concurrency, state, started_at) \
                  VALUES ($1, 'worker', 'h', $2, 'v', 1, $3, now() + $4 * interval '1 second')";
    for (id, row_pid, state, offset) in [
        ("worker#1", 1, "stopped", 0.0),
        ("worker#2", 2, "running", 0.0),
        ("worker#3", pid, "running", -5.0),
        ("worker#4", 4, "draining", 10.0),
    ] {
        sqlx::query(insert)
            .bind(id)
            .bind(row_pid)
            .bind(state)
            .bind(offset)
            .execute(&db.pool)
            .await
            .unwrap();
    }
    let newest = wait_registered(&db.pool, "worker", Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(newest, "worker#2");
    let own = agent
        .wait_registered(&db.pool, "worker", Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(own, "worker#3");
    let error = wait_registered(&db.pool, "nobody", Duration::from_millis(100))
        .await
        .unwrap_err();
    assert!(format!("{error:#}").contains("nobody"), "{error:#}");
    drop(agent);
    db.drop_db().await.unwrap();
}

#[tokio::test]
async fn proxy_passes_blackholes_resets_and_recovers() {
    let db = TestDb::new().await.unwrap();
    let proxy = TcpProxy::start(addr_of_url(&db.url).await.unwrap())
        .await
        .unwrap();
    let url = proxy.url_for(&db.url);
    assert!(url.contains(&proxy.addr().to_string()), "{url}");

    // Pass: queries go through.
    let mut a = PgConnection::connect(&url).await.unwrap();
    let mut b = PgConnection::connect(&url).await.unwrap();
    assert_eq!(select_one(&mut a).await.unwrap(), 1);
    assert_eq!(select_one(&mut b).await.unwrap(), 1);
    assert_eq!(proxy.connections(), 2);

    // Blackhole: a query on an open connection hangs...
    proxy.set_mode(ProxyMode::Blackhole);
    let mut held = tokio::spawn(async move {
        let n = select_one(&mut a).await;
        (a, n)
    });
    assert!(
        tokio::time::timeout(Duration::from_millis(500), &mut held)
            .await
            .is_err(),
        "a query went through a blackhole"
    );
    // ...and so does a new connection (accepted, never forwarded).
    assert!(
        tokio::time::timeout(Duration::from_millis(500), PgConnection::connect(&url))
            .await
            .is_err(),
        "a connection was made through a blackhole"
    );
    // Back to Pass: the held query resumes where it stopped.
    proxy.set_mode(ProxyMode::Pass);
    let (mut a, n) = tokio::time::timeout(Duration::from_secs(10), held)
        .await
        .expect("the held query did not resume")
        .unwrap();
    assert_eq!(n.unwrap(), 1);
    assert_eq!(select_one(&mut a).await.unwrap(), 1);

    // Reset: open connections fail (rather than hang), and so do new ones.
    proxy.set_mode(ProxyMode::Reset);
    for conn in [&mut a, &mut b] {
        let result = tokio::time::timeout(Duration::from_secs(10), select_one(conn))
            .await
            .expect("a query hung through a reset");
        assert!(result.is_err(), "a query went through a reset");
    }
    let refused = tokio::time::timeout(Duration::from_secs(10), PgConnection::connect(&url))
        .await
        .expect("a connection hung through a reset");
    assert!(refused.is_err(), "a connection was made through a reset");
    wait_until(
        "the proxy dropped every connection",
        Duration::from_secs(10),
        || {
            let n = proxy.connections();
            async move { Ok(n == 0) }
        },
    )
    .await
    .unwrap();

    // Pass again: a new connection works.
    proxy.set_mode(ProxyMode::Pass);
    let mut c = PgConnection::connect(&url).await.unwrap();
    assert_eq!(select_one(&mut c).await.unwrap(), 1);

    // Latency: each direction is delayed, so a round trip takes at least the delay.
    let delay = Duration::from_millis(150);
    proxy.set_mode(ProxyMode::Latency(delay));
    let start = Instant::now();
    assert_eq!(select_one(&mut c).await.unwrap(), 1);
    assert!(start.elapsed() >= delay, "{:?}", start.elapsed());
    proxy.set_mode(ProxyMode::Pass);
    c.close().await.unwrap();

    // Dropping the proxy closes what is left.
    let mut d = PgConnection::connect(&url).await.unwrap();
    drop(proxy);
    let result = tokio::time::timeout(Duration::from_secs(10), select_one(&mut d))
        .await
        .expect("a query hung after the proxy was dropped");
    assert!(result.is_err());
    drop((a, b, d));

    db.drop_db().await.unwrap();
}

#[tokio::test]
async fn private_cluster_restarts_and_recovers_from_a_crash() {
    let mut cluster = PgCluster::start().await.unwrap();
    cluster.create_database("faults").await.unwrap();
    let url = cluster.url("faults");
    let mut conn = PgConnection::connect(&url).await.unwrap();
    sqlx::raw_sql("CREATE TABLE t (v int); INSERT INTO t VALUES (1)")
        .execute(&mut conn)
        .await
        .unwrap();

    cluster.restart_fast().await.unwrap();
    // The old session was terminated by the restart.
    assert!(select_one(&mut conn).await.is_err());
    let mut conn = PgConnection::connect(&url).await.unwrap();
    assert_eq!(select_one(&mut conn).await.unwrap(), 1);

    // A crash (immediate stop) keeps every acknowledged commit.
    sqlx::query("INSERT INTO t VALUES (2)")
        .execute(&mut conn)
        .await
        .unwrap();
    cluster.stop_immediate().await.unwrap();
    assert!(PgConnection::connect(&url).await.is_err());
    cluster.start_again().await.unwrap();
    let mut conn = PgConnection::connect(&url).await.unwrap();
    let sum: i64 = sqlx::query_scalar("SELECT sum(v) FROM t")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(sum, 3);
    conn.close().await.unwrap();

    // A migrated database for agents.
    let migrated = cluster.create_migrated_database("leasehold").await.unwrap();
    let pool = PgPool::connect(&migrated).await.unwrap();
    let tasks: i64 = sqlx::query_scalar("SELECT count(*) FROM tasks")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(tasks, 0);
    pool.close().await;

    let dir = cluster.dir().to_path_buf();
    drop(cluster);
    assert!(!dir.exists());
}

/// Marks every ledger task succeeded at epoch 1 by `agent`, with an attempt row (as the store
/// wrote it before a task's final attempt moved into its own row; the `task_attempts` view reads
/// both) and one logged execution.
async fn succeed_all(pool: &PgPool, agent: &str) {
    sqlx::query(
        "UPDATE tasks SET status = 'succeeded', attempt = 1, lease_owner = $1, lease_epoch = 1, \
             started_at = now() - interval '2 seconds', finished_at = now() \
         WHERE id IN (SELECT task_id FROM test_ledger)",
    )
    .bind(agent)
    .execute(pool)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO task_attempt_rows (task_id, epoch, attempt, agent, started_at, finished_at, outcome) \
         SELECT task_id, 1, 1, $1, now() - interval '2 seconds', now(), 'succeeded' FROM test_ledger",
    )
    .bind(agent)
    .execute(pool)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO test_executions (ledger_id, task_id, epoch, agent, started_at, finished_at, outcome) \
         SELECT ledger_id, task_id, 1, $1, now() - interval '1 second', now(), 'returned' FROM test_ledger",
    )
    .bind(agent)
    .execute(pool)
    .await
    .unwrap();
}

/// Runs `break_sql`, expects the check to fail mentioning `needle`, then runs `undo_sql` and
/// expects it clean again.
async fn expect_caught(pool: &PgPool, break_sql: &str, needle: &str, undo_sql: &str) {
    sqlx::raw_sql(sqlx::AssertSqlSafe(break_sql.to_string()))
        .execute(pool)
        .await
        .unwrap();
    let error = ledger::check(pool)
        .await
        .expect_err(&format!("not caught: {break_sql}"))
        .to_string();
    assert!(error.contains(needle), "{needle:?} not in:\n{error}");
    sqlx::raw_sql(sqlx::AssertSqlSafe(undo_sql.to_string()))
        .execute(pool)
        .await
        .unwrap();
    ledger::check(pool).await.unwrap();
}

#[tokio::test]
async fn ledger_checker_accepts_a_clean_run_and_catches_violations() {
    let db = TestDb::new().await.unwrap();
    let pool = &db.pool;
    ledger::install(pool).await.unwrap();
    ledger::install(pool).await.unwrap(); // idempotent

    let first = ledger::enqueue(pool, "ledger.test", 1500, json!({"sleep_ms": 5}))
        .await
        .unwrap();
    let second = ledger::enqueue(pool, "ledger.test", 3, serde_json::Value::Null)
        .await
        .unwrap();
    assert_eq!((first.len(), second.len()), (1500, 3));
    let payload: serde_json::Value = sqlx::query_scalar("SELECT payload FROM tasks WHERE id = $1")
        .bind(first[1499])
        .fetch_one(pool)
        .await
        .unwrap();
    assert_eq!(payload, json!({"sleep_ms": 5, "ledger_id": 1500}));
    let payload: serde_json::Value = sqlx::query_scalar("SELECT payload FROM tasks WHERE id = $1")
        .bind(second[0])
        .fetch_one(pool)
        .await
        .unwrap();
    assert_eq!(payload, json!({"ledger_id": 1501}));
    let defaults: (String, i32, i64) = sqlx::query_as(
        "SELECT min(status), min(max_attempts), count(*) FROM tasks WHERE task_type = 'ledger.test'",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    assert_eq!(defaults, ("queued".to_string(), 25, 1503));
    assert!(
        ledger::enqueue(pool, "ledger.test", 1, json!([1]))
            .await
            .is_err()
    );

    // Nothing ran yet: every task is a violation, and the list is cut.
    let error = ledger::check(pool).await.unwrap_err().to_string();
    assert!(
        error.starts_with("ledger check failed: 1503 violations (first 20 shown)"),
        "{error}"
    );
    assert!(error.contains("is queued, not terminal"), "{error}");
    assert!(error.contains("and 1483 more"), "{error}");

    succeed_all(pool, "agent-a#1").await;
    let report = ledger::expect_all_succeeded(pool).await.unwrap();
    assert_eq!(report.tasks, 1503);
    assert_eq!(report.succeeded, 1503);
    assert_eq!(report.executions, 1503);
    assert_eq!(report.extra_executions, 0);
    assert_eq!(report.successes_without_execution, 0);

    // A clean history with a recovery: epoch 1 by b expired (its execution never finished),
    // the recovery bumped the epoch to 2, and epoch 3 by a succeeded.
    let t = second[0];
    let l = 1501;
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "DELETE FROM task_attempt_rows WHERE task_id = {t};
         DELETE FROM test_executions WHERE task_id = {t};
         UPDATE tasks SET lease_epoch = 3, lease_owner = 'agent-a#1', attempt = 2 WHERE id = {t};
         INSERT INTO task_attempt_rows (task_id, epoch, attempt, agent, started_at, finished_at, outcome)
         VALUES ({t}, 1, 1, 'agent-b#1', now() - interval '60 s', now() - interval '30 s', 'lease_expired'),
                ({t}, 3, 2, 'agent-a#1', now() - interval '20 s', now() - interval '10 s', 'succeeded');
         INSERT INTO test_executions (ledger_id, task_id, epoch, agent, started_at, finished_at, outcome)
         VALUES ({l}, {t}, 1, 'agent-b#1', now() - interval '59 s', NULL, NULL),
                ({l}, {t}, 3, 'agent-a#1', now() - interval '19 s', now() - interval '11 s', 'returned');"
    )))
    .execute(pool)
    .await
    .unwrap();
    let report = ledger::check(pool).await.unwrap();
    assert_eq!(report.extra_executions, 1);
    assert_eq!(report.lease_expired_attempts, 1);
    assert_eq!(report.executions, 1504);

    // A dead task whose two failures both ran: clean, but not all succeeded.
    let d = second[1];
    let dl = 1502;
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "DELETE FROM task_attempt_rows WHERE task_id = {d};
         DELETE FROM test_executions WHERE task_id = {d};
         UPDATE tasks SET status = 'dead', lease_epoch = 2, attempt = 2 WHERE id = {d};
         INSERT INTO task_attempt_rows (task_id, epoch, attempt, agent, started_at, finished_at, outcome)
         VALUES ({d}, 1, 1, 'agent-a#1', now() - interval '9 s', now() - interval '8 s', 'failed'),
                ({d}, 2, 2, 'agent-a#1', now() - interval '7 s', now() - interval '6 s', 'failed');
         INSERT INTO test_executions (ledger_id, task_id, epoch, agent, started_at, finished_at, outcome)
         VALUES ({dl}, {d}, 1, 'agent-a#1', now() - interval '9 s', now() - interval '8 s', 'returned'),
                ({dl}, {d}, 2, 'agent-a#1', now() - interval '7 s', now() - interval '6 s', 'returned');"
    )))
    .execute(pool)
    .await
    .unwrap();
    let report = ledger::check(pool).await.unwrap();
    assert_eq!(
        (report.succeeded, report.dead, report.failed_attempts),
        (1502, 1, 2)
    );
    assert_eq!(report.extra_executions, 3);
    let error = ledger::expect_all_succeeded(pool)
        .await
        .unwrap_err()
        .to_string();
    assert!(error.contains(&format!("task {d} ended dead")), "{error}");

    // Each violation, one at a time.
    let s = second[2];
    expect_caught(
        pool,
        &format!(
            "INSERT INTO task_attempt_rows (task_id, epoch, attempt, agent, started_at, finished_at, outcome) \
             VALUES ({s}, 0, 1, 'agent-z#1', now() - interval '1 h', now() - interval '59 min', 'succeeded')"
        ),
        &format!("task {s} has 2 accepted completions"),
        &format!("DELETE FROM task_attempt_rows WHERE task_id = {s} AND epoch = 0"),
    )
    .await;
    expect_caught(
        pool,
        &format!("UPDATE tasks SET lease_epoch = 5 WHERE id = {s}"),
        &format!("task {s} was completed by stale epoch 1 (the task is at epoch 5)"),
        &format!("UPDATE tasks SET lease_epoch = 1 WHERE id = {s}"),
    )
    .await;
    expect_caught(
        pool,
        &format!("UPDATE tasks SET lease_owner = 'agent-z#9' WHERE id = {s}"),
        "but its final holder is agent-z#9",
        &format!("UPDATE tasks SET lease_owner = 'agent-a#1' WHERE id = {s}"),
    )
    .await;
    expect_caught(
        pool,
        &format!("UPDATE tasks SET status = 'dead' WHERE id = {s}"),
        &format!("task {s} is dead but epoch 1 by agent-a#1 was accepted"),
        &format!("UPDATE tasks SET status = 'succeeded' WHERE id = {s}"),
    )
    .await;
    expect_caught(
        pool,
        &format!("UPDATE task_attempt_rows SET outcome = 'released' WHERE task_id = {s}"),
        &format!("task {s} is succeeded but has no accepted attempt row"),
        &format!("UPDATE task_attempt_rows SET outcome = 'succeeded' WHERE task_id = {s}"),
    )
    .await;
    expect_caught(
        pool,
        &format!("UPDATE tasks SET status = 'retry_wait' WHERE id = {s}"),
        &format!("task {s} is retry_wait, not terminal"),
        &format!("UPDATE tasks SET status = 'succeeded' WHERE id = {s}"),
    )
    .await;
    expect_caught(
        pool,
        &format!("DELETE FROM tasks WHERE id = {s}"),
        &format!("task {s} does not exist"),
        // The delete took the attempt row with it: put both back.
        &format!(
            "INSERT INTO tasks (id, task_type, payload, status, attempt, lease_owner, lease_epoch, started_at, finished_at) \
             VALUES ({s}, 'ledger.test', '{{\"ledger_id\": 1503}}', 'succeeded', 1, 'agent-a#1', 1, now() - interval '2 s', now()); \
             INSERT INTO task_attempt_rows (task_id, epoch, attempt, agent, started_at, finished_at, outcome) \
             VALUES ({s}, 1, 1, 'agent-a#1', now() - interval '2 s', now(), 'succeeded')"
        ),
    )
    .await;
    expect_caught(
        pool,
        &format!("UPDATE tasks SET payload = '{{\"ledger_id\": 7}}' WHERE id = {s}"),
        &format!("task {s} carries ledger id 7"),
        &format!("UPDATE tasks SET payload = '{{\"ledger_id\": 1503}}' WHERE id = {s}"),
    )
    .await;
    let stray = insert_task(
        pool,
        TaskSpec::new("ledger.test", "succeeded").payload(json!({"ledger_id": 9999})),
    )
    .await
    .unwrap();
    expect_caught(
        pool,
        "SELECT 1",
        &format!(
            "task {stray} (ledger.test, succeeded) carries ledger id 9999 but has no ledger row"
        ),
        &format!("DELETE FROM tasks WHERE id = {stray}"),
    )
    .await;
    // Overlapping attempts: the expired epoch 1 ends after epoch 3 started.
    expect_caught(
        pool,
        &format!(
            "UPDATE task_attempt_rows SET finished_at = now() - interval '15 s' WHERE task_id = {t} AND epoch = 1"
        ),
        &format!("task {t}: attempt at epoch 1 (agent-b#1, lease_expired) ended at"),
        &format!(
            "UPDATE task_attempt_rows SET finished_at = now() - interval '30 s' WHERE task_id = {t} AND epoch = 1"
        ),
    )
    .await;
    expect_caught(
        pool,
        &format!(
            "INSERT INTO task_attempt_rows (task_id, epoch, attempt, agent, started_at, finished_at, outcome) \
             VALUES ({t}, 4, 3, 'agent-c#1', now(), now(), 'released')"
        ),
        "is outside the epochs 1..3 the task reached",
        &format!("DELETE FROM task_attempt_rows WHERE task_id = {t} AND epoch = 4"),
    )
    .await;
    // An execution no attempt explains (epoch 2 was the recovery's fencing bump, never held).
    expect_caught(
        pool,
        &format!(
            "INSERT INTO test_executions (ledger_id, task_id, epoch, agent) VALUES ({l}, {t}, 2, 'agent-c#1')"
        ),
        &format!("of task {t} (ledger id {l}) at epoch 2 by agent-c#1 (unfinished) has no attempt row"),
        &format!("DELETE FROM test_executions WHERE task_id = {t} AND epoch = 2"),
    )
    .await;
    // The accepted epoch executed twice.
    expect_caught(
        pool,
        &format!(
            "INSERT INTO test_executions (ledger_id, task_id, epoch, agent, finished_at, outcome) \
             VALUES ({l}, {t}, 3, 'agent-a#1', now(), 'returned')"
        ),
        &format!("task {t}: epoch 3 was executed 2 times"),
        &format!(
            "DELETE FROM test_executions WHERE id = (SELECT max(id) FROM test_executions WHERE task_id = {t})"
        ),
    )
    .await;
    expect_caught(
        pool,
        &format!(
            "INSERT INTO test_executions (ledger_id, task_id, epoch, agent) VALUES ({l}, {s}, 1, 'agent-a#1')"
        ),
        &format!("(ledger id {l}, task {s}, epoch 1, agent-a#1) matches no ledger row"),
        &format!("DELETE FROM test_executions WHERE task_id = {s} AND ledger_id = {l}"),
    )
    .await;

    db.drop_db().await.unwrap();
}
