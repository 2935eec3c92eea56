#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Process faults against real agents (TESTING.md T01, T03, T04, T07, T08): kill -9, SIGSTOP
//! past and within the TTL, SIGTERM drain (and a second, forcing signal), handlers that ignore
//! cancellation. Every scenario ends with the ledger check and a positive control proving its
//! fault path fired.

use std::time::{Duration, Instant};

use leasehold_tests::fleet::{GRACE, POLL, TTL, spawn_test_agent};
use leasehold_tests::scenario::{leases_held, shorten_tasks, start_rescuer, wait_succeeded};
use leasehold_tests::{TestDb, count, ledger, wait_registered, wait_until};
use serde_json::json;

const SLACK: Duration = Duration::from_secs(3);

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
            async move { Ok(leases_held(&pool, &id).await? == 50) }
        },
    )
    .await
    .unwrap();
    // Short tasks from now on: the rescuer finishes them quickly.
    shorten_tasks(&db.pool).await.unwrap();
    let (rescuer, rescuer_id) = start_rescuer(&db, 50).await.unwrap();
    victim.kill9().unwrap();
    let killed = Instant::now();
    victim.wait_exit(Duration::from_secs(5)).await.unwrap();
    wait_succeeded(
        &db.pool,
        "every task succeeded",
        50,
        TTL + GRACE + POLL * 2 + SLACK + Duration::from_secs(5),
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

// ---------------------------------------------------------------------------------------------
// Shared by T03, T04, T07 and T08.

/// Time to wait for an agent to register.
const REGISTER: Duration = Duration::from_secs(20);

type DbTime = chrono::DateTime<chrono::Utc>;

/// The database's clock (lease times are database times, DESIGN §4).
async fn db_now(pool: &sqlx::PgPool) -> DbTime {
    sqlx::query_scalar("SELECT clock_timestamp()")
        .fetch_one(pool)
        .await
        .unwrap()
}

/// Runs a one-bigint query binding `$1` = an agent id, `$2` = task ids and `$3` = a database
/// time (each query uses what it needs).
async fn count_with(
    pool: &sqlx::PgPool,
    sql: &'static str,
    agent: &str,
    ids: &[i64],
    at: DbTime,
) -> anyhow::Result<i64> {
    Ok(sqlx::query_scalar(sql)
        .bind(agent)
        .bind(ids)
        .bind(at)
        .fetch_one(pool)
        .await?)
}

/// [`count_with`] without a time.
async fn count_of(pool: &sqlx::PgPool, sql: &'static str, agent: &str, ids: &[i64]) -> i64 {
    count_with(pool, sql, agent, ids, chrono::Utc::now())
        .await
        .unwrap()
}

/// Waits until the [`count_with`] query returns `want`.
#[allow(clippy::too_many_arguments)]
async fn wait_count(
    pool: &sqlx::PgPool,
    what: &str,
    timeout: Duration,
    sql: &'static str,
    agent: &str,
    ids: &[i64],
    at: DbTime,
    want: i64,
) {
    wait_until(what, timeout, || async move {
        Ok(count_with(pool, sql, agent, ids, at).await? == want)
    })
    .await
    .unwrap();
}

/// Tasks among `$2` leased (running) by `$1`.
const HELD: &str =
    "SELECT count(*) FROM tasks WHERE lease_owner = $1 AND id = ANY($2) AND status = 'running'";
/// Tasks among `$2` that succeeded with `$1` as their final holder.
const SUCCEEDED_BY: &str =
    "SELECT count(*) FROM tasks WHERE lease_owner = $1 AND id = ANY($2) AND status = 'succeeded'";
/// Executions of tasks among `$2` that `$1` started (logged by the ledger handler).
const EXECUTIONS_BY: &str =
    "SELECT count(*) FROM test_executions WHERE agent = $1 AND task_id = ANY($2)";

/// Waits until `agent` holds every task of `ids` and its handler logged an execution of each:
/// the handlers are running, not just claimed.
async fn wait_running(pool: &sqlx::PgPool, agent: &str, ids: &[i64]) {
    let n = i64::try_from(ids.len()).unwrap();
    let now = chrono::Utc::now();
    wait_count(
        pool,
        &format!("{agent} holds {n} leases"),
        Duration::from_secs(20),
        HELD,
        agent,
        ids,
        now,
        n,
    )
    .await;
    wait_count(
        pool,
        &format!("{agent} runs {n} executions"),
        Duration::from_secs(20),
        EXECUTIONS_BY,
        agent,
        ids,
        now,
        n,
    )
    .await;
}

/// Sets the `ms` of the payload of `ids`: what whoever claims them next will run (a running
/// execution already read its payload).
async fn set_ms(pool: &sqlx::PgPool, ids: &[i64], ms: u64) {
    sqlx::query("UPDATE tasks SET payload = payload || jsonb_build_object('ms', $2::bigint) WHERE id = ANY($1)")
        .bind(ids)
        .bind(i64::try_from(ms).unwrap())
        .execute(pool)
        .await
        .unwrap();
}

/// The scheduler state of a process (`R`, `S`, `T` for stopped, …) from `/proc/<pid>/stat`.
fn proc_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state …`; comm may itself hold parentheses.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.trim_start().chars().next()
}

/// Waits until the agent's process is stopped (`T`): `kill -STOP` returns before the target
/// has stopped, which on a busy machine can take a while.
async fn wait_stopped(agent: &leasehold_tests::AgentHandle) {
    let pid = agent.pid();
    wait_until(
        &format!("agent {} is stopped", agent.label()),
        Duration::from_secs(5),
        || async move { Ok(proc_state(pid) == Some('T')) },
    )
    .await
    .unwrap();
}

/// The JSON run summary an agent started with `--output json` printed on stdout.
fn json_summary(agent: &leasehold_tests::AgentHandle) -> serde_json::Value {
    let stdout = agent.stdout_text().unwrap();
    stdout
        .lines()
        .rev()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line.trim()).ok())
        .find(|v| v.get("agent_id").is_some())
        .unwrap_or_else(|| {
            panic!(
                "agent {} printed no JSON summary; stdout:\n{stdout}\nend of stderr:\n{}",
                agent.label(),
                agent.log_tail(40)
            )
        })
}

/// A counter of a JSON run summary.
fn counter(summary: &serde_json::Value, key: &str) -> u64 {
    summary[key]
        .as_u64()
        .unwrap_or_else(|| panic!("summary has no counter {key}: {summary}"))
}

/// Lines of the agent's stderr containing `needle`.
fn log_lines(agent: &leasehold_tests::AgentHandle, needle: &str) -> usize {
    agent
        .stderr_text()
        .unwrap()
        .lines()
        .filter(|l| l.contains(needle))
        .count()
}

/// Waits until the agent's stderr has at least `n` lines containing `needle`.
async fn wait_log(agent: &leasehold_tests::AgentHandle, needle: &str, n: usize, timeout: Duration) {
    let what = format!("agent {} logs {needle:?} {n} times", agent.label());
    let found = wait_until(&what, timeout, || async move {
        Ok(log_lines(agent, needle) >= n)
    })
    .await;
    if let Err(error) = found {
        panic!("{error:#}; end of its stderr:\n{}", agent.log_tail(40));
    }
}

/// Attempt rows with outcome `lease_expired` (recoveries), all tasks.
async fn lease_expired_attempts(pool: &sqlx::PgPool) -> i64 {
    count(
        pool,
        "SELECT count(*) FROM task_attempts WHERE outcome = 'lease_expired'",
    )
    .await
    .unwrap()
}

// ---------------------------------------------------------------------------------------------
// T03: SIGSTOP past TTL + grace.

/// T03: an agent frozen with SIGSTOP while it runs 10 tasks, past TTL + grace, loses them to a
/// rescuer that completes them all; continued, its first renewal finds its leases gone (a
/// fenced write, counted) and stops its executions, none of which ever completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t03_sigstop_past_ttl_and_grace_every_late_write_is_fenced() {
    let db = TestDb::new().await.unwrap();
    ledger::install(&db.pool).await.unwrap();
    let mut victim = spawn_test_agent(
        &db.url,
        "victim",
        "ledger",
        &["--concurrency", "10", "--output", "json"],
    )
    .await
    .unwrap();
    let victim_id = victim
        .wait_registered(&db.pool, "victim", REGISTER)
        .await
        .unwrap();
    // Long enough that every execution is still running when the victim wakes: what ends them
    // must be the lost lease, not the work running out while the process was frozen.
    let tasks = ledger::enqueue(&db.pool, "ledger", 10, json!({"ms": 60_000}))
        .await
        .unwrap();
    wait_running(&db.pool, &victim_id, &tasks).await;

    victim.stop().unwrap();
    wait_stopped(&victim).await;
    // Short work for the rescuer; started only now, so only it can take over.
    set_ms(&db.pool, &tasks, 100).await;
    let (rescuer, rescuer_id) = start_rescuer(&db, 10).await.unwrap();
    wait_count(
        &db.pool,
        "the rescuer completed all 10 tasks",
        TTL + GRACE + POLL * 2 + SLACK + Duration::from_secs(10),
        SUCCEEDED_BY,
        &rescuer_id,
        &tasks,
        chrono::Utc::now(),
        10,
    )
    .await;
    assert_eq!(
        proc_state(victim.pid()),
        Some('T'),
        "the victim woke up before the rescuer finished"
    );

    victim.cont().unwrap();
    // Each of the 10 leases is found lost (at the first renewal) and its execution stopped:
    // the handlers end, though their work had a minute left.
    wait_log(
        &victim,
        "execution stopped: lease lost",
        10,
        Duration::from_secs(10),
    )
    .await;
    // Give any late write (a completion, a release) its chance to land — it must be fenced.
    tokio::time::sleep(Duration::from_secs(1)).await;
    victim.sigterm().unwrap();
    let status = victim
        .wait_exit(Duration::from_secs(5 + 1) + SLACK)
        .await
        .unwrap();
    assert!(
        status.success(),
        "victim exited with {status}:\n{}",
        victim.log_tail(40)
    );

    let summary = json_summary(&victim);
    assert_eq!(summary["agent_id"], json!(victim_id), "{summary}");
    assert_eq!(counter(&summary, "claimed"), 10, "{summary}");
    // Positive control: the late renewal was a fenced write.
    assert!(counter(&summary, "fenced") >= 1, "{summary}");
    assert_eq!(counter(&summary, "lease_lost"), 10, "{summary}");
    assert_eq!(counter(&summary, "succeeded"), 0, "{summary}");
    assert_eq!(counter(&summary, "released"), 0, "{summary}");

    let report = ledger::expect_all_succeeded(&db.pool).await.unwrap();
    assert_eq!(report.succeeded, 10, "{report:?}");
    // Every victim attempt ended by recovery; each task has exactly one accepted attempt, by
    // the rescuer, at the task's final epoch.
    let expired = count_of(
        &db.pool,
        "SELECT count(*) FROM task_attempts WHERE agent = $1 AND task_id = ANY($2) AND outcome = 'lease_expired'",
        &victim_id,
        &tasks,
    )
    .await;
    assert_eq!(expired, 10, "{report:?}");
    let victim_other = count_of(
        &db.pool,
        "SELECT count(*) FROM task_attempts WHERE agent = $1 AND outcome <> 'lease_expired'",
        &victim_id,
        &tasks,
    )
    .await;
    assert_eq!(victim_other, 0, "a victim attempt ended otherwise");
    let accepted_once = count_of(
        &db.pool,
        "SELECT count(*) FROM tasks t WHERE t.id = ANY($2) \
           AND (SELECT count(*) FROM task_attempts a \
                WHERE a.task_id = t.id AND a.outcome IN ('succeeded', 'partially_succeeded')) = 1 \
           AND EXISTS (SELECT 1 FROM task_attempts a WHERE a.task_id = t.id \
                AND a.outcome = 'succeeded' AND a.epoch = t.lease_epoch AND a.agent = $1)",
        &rescuer_id,
        &tasks,
    )
    .await;
    assert_eq!(accepted_once, 10, "{report:?}");
    // The victim's executions were stopped: none ran to its end.
    let victim_runs = count_of(&db.pool, EXECUTIONS_BY, &victim_id, &tasks).await;
    assert_eq!(victim_runs, 10);
    let returned = count_of(
        &db.pool,
        "SELECT count(*) FROM test_executions WHERE agent = $1 AND outcome = 'returned'",
        &victim_id,
        &tasks,
    )
    .await;
    assert_eq!(
        returned, 0,
        "a victim execution ran to its end after losing its lease"
    );
    drop(rescuer);
    db.drop_db().await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// T04: SIGSTOP shorter than the TTL.

/// The newest `heartbeat_at` among `$1`'s leases of `ids` (none when it holds none).
async fn last_heartbeat(pool: &sqlx::PgPool, agent: &str, ids: &[i64]) -> Option<DbTime> {
    sqlx::query_scalar(
        "SELECT max(heartbeat_at) FROM tasks WHERE lease_owner = $1 AND id = ANY($2) AND status = 'running'",
    )
    .bind(agent)
    .bind(ids)
    .fetch_one(pool)
    .await
    .unwrap()
}

/// T04: a pause of half the TTL while a leader runs recovery every poll and another agent
/// could take the tasks: no lease is revoked, nothing runs twice (the debounce works).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t04_sigstop_shorter_than_the_ttl_causes_no_takeover() {
    let db = TestDb::new().await.unwrap();
    ledger::install(&db.pool).await.unwrap();
    // The leader, which runs recovery throughout the pause, serves no ledger tasks.
    let bystander = spawn_test_agent(&db.url, "bystander", "noop", &[])
        .await
        .unwrap();
    let bystander_id = bystander
        .wait_registered(&db.pool, "bystander", REGISTER)
        .await
        .unwrap();
    wait_until("the bystander leads", Duration::from_secs(10), || {
        let pool = &db.pool;
        let id = &bystander_id;
        async move { Ok(is_leader(pool, id).await) }
    })
    .await
    .unwrap();
    let victim = spawn_test_agent(&db.url, "victim", "ledger", &["--concurrency", "10"])
        .await
        .unwrap();
    let victim_id = victim
        .wait_registered(&db.pool, "victim", REGISTER)
        .await
        .unwrap();
    let tasks = ledger::enqueue(&db.pool, "ledger", 10, json!({"ms": 5_000}))
        .await
        .unwrap();
    wait_running(&db.pool, &victim_id, &tasks).await;
    // Another agent that would run the tasks at once if their leases were taken.
    let other = spawn_test_agent(&db.url, "other", "ledger", &["--concurrency", "10"])
        .await
        .unwrap();
    let other_id = other
        .wait_registered(&db.pool, "other", REGISTER)
        .await
        .unwrap();
    assert_eq!(count_of(&db.pool, HELD, &victim_id, &tasks).await, 10);

    victim.stop().unwrap();
    // Positive control: the process is stopped and its renewals stopped landing.
    wait_stopped(&victim).await;
    let stopped = Instant::now();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let frozen_beat = last_heartbeat(&db.pool, &victim_id, &tasks).await.unwrap();
    tokio::time::sleep(Duration::from_secs(1).saturating_sub(stopped.elapsed())).await;
    assert_eq!(
        proc_state(victim.pid()),
        Some('T'),
        "the victim is not stopped"
    );
    assert_eq!(
        count_of(&db.pool, HELD, &victim_id, &tasks).await,
        10,
        "a lease was taken during a pause shorter than the TTL"
    );
    assert_eq!(
        last_heartbeat(&db.pool, &victim_id, &tasks).await,
        Some(frozen_beat),
        "a renewal landed while the victim was stopped"
    );
    victim.cont().unwrap();
    let paused_for = stopped.elapsed();

    // The victim renews again, after a gap as long as the pause.
    wait_until("the victim renews again", Duration::from_secs(5), || {
        let pool = &db.pool;
        let (id, tasks) = (&victim_id, &tasks);
        async move { Ok(last_heartbeat(pool, id, tasks).await > Some(frozen_beat)) }
    })
    .await
    .unwrap();
    let resumed_beat = last_heartbeat(&db.pool, &victim_id, &tasks).await.unwrap();
    let gap = (resumed_beat - frozen_beat).to_std().unwrap();
    assert!(
        gap >= Duration::from_millis(900),
        "heartbeat gap {gap:?} is shorter than the pause {paused_for:?}"
    );

    wait_count(
        &db.pool,
        "the victim completed all 10 tasks",
        Duration::from_secs(30),
        SUCCEEDED_BY,
        &victim_id,
        &tasks,
        chrono::Utc::now(),
        10,
    )
    .await;
    let report = ledger::expect_all_succeeded(&db.pool).await.unwrap();
    assert_eq!(report.succeeded, 10, "{report:?}");
    assert_eq!(report.lease_expired_attempts, 0, "{report:?}");
    assert_eq!(report.executions, 10, "{report:?}");
    assert_eq!(lease_expired_attempts(&db.pool).await, 0);
    // One attempt per task, the victim's first and only lease.
    let single = count_of(
        &db.pool,
        "SELECT count(*) FROM tasks t WHERE t.id = ANY($2) AND t.attempt = 1 AND t.lease_epoch = 1 \
           AND (SELECT count(*) FROM task_attempts a WHERE a.task_id = t.id) = 1 \
           AND EXISTS (SELECT 1 FROM task_attempts a WHERE a.task_id = t.id \
                       AND a.agent = $1 AND a.outcome = 'succeeded')",
        &victim_id,
        &tasks,
    )
    .await;
    assert_eq!(single, 10, "{report:?}");
    // The other agent ran none of them.
    let by_other = count_of(
        &db.pool,
        "SELECT (SELECT count(*) FROM task_attempts WHERE agent = $1) \
              + (SELECT count(*) FROM test_executions WHERE agent = $1) \
              + (SELECT count(*) FROM tasks WHERE lease_owner = $1)",
        &other_id,
        &tasks,
    )
    .await;
    assert_eq!(by_other, 0, "the other agent touched the tasks");
    drop(other);
    drop(victim);
    drop(bystander);
    db.drop_db().await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// T07: SIGTERM drain.

/// Short tasks of the drain test: still running when the signal comes, done well within the
/// 1 s shutdown timeout.
const SHORT_MS: u64 = 600;

/// T07: on SIGTERM the victim claims nothing more, drains its short tasks while its heartbeat
/// keeps renewing the long ones, then releases the long ones, which a second agent starts at
/// once (not after TTL + grace); the victim exits 0, bounded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t07_sigterm_drains_then_releases_and_another_agent_starts_at_once() {
    let db = TestDb::new().await.unwrap();
    ledger::install(&db.pool).await.unwrap();
    let mut victim = spawn_test_agent(
        &db.url,
        "victim",
        "ledger,noop",
        &[
            "--concurrency",
            "10",
            "--shutdown-timeout",
            "1s",
            "--stop-grace",
            "300ms",
            "--output",
            "json",
        ],
    )
    .await
    .unwrap();
    let victim_id = victim
        .wait_registered(&db.pool, "victim", REGISTER)
        .await
        .unwrap();
    let long = ledger::enqueue(
        &db.pool,
        "ledger",
        5,
        json!({"ms": 60_000, "ignore_cancel": false}),
    )
    .await
    .unwrap();
    wait_running(&db.pool, &victim_id, &long).await;
    // Short work for whoever runs them after the release.
    set_ms(&db.pool, &long, 100).await;
    let short = ledger::enqueue(&db.pool, "ledger", 5, json!({"ms": SHORT_MS}))
        .await
        .unwrap();
    let all: Vec<i64> = long.iter().chain(&short).copied().collect();
    wait_count(
        &db.pool,
        "the victim holds 10 leases",
        Duration::from_secs(20),
        HELD,
        &victim_id,
        &all,
        chrono::Utc::now(),
        10,
    )
    .await;
    // Work only the victim serves, claimable the moment a slot frees: it must stay queued.
    sqlx::query("INSERT INTO tasks (task_type) SELECT 'noop' FROM generate_series(1, 20)")
        .execute(&db.pool)
        .await
        .unwrap();
    // The second agent (ledger only, lower concurrency) starts before the signal and registers
    // during the drain.
    let rescuer = spawn_test_agent(&db.url, "rescuer", "ledger", &["--concurrency", "5"])
        .await
        .unwrap();
    let before = db_now(&db.pool).await;
    victim.sigterm().unwrap();
    let signalled = Instant::now();
    let after = db_now(&db.pool).await;

    // While draining, the victim's heartbeat renews the long leases it still holds.
    wait_count(
        &db.pool,
        "the victim renews its 5 long leases after the signal, before releasing them",
        Duration::from_secs(5),
        "SELECT count(*) FROM tasks WHERE lease_owner = $1 AND id = ANY($2) \
           AND status = 'running' AND heartbeat_at > $3",
        &victim_id,
        &long,
        after,
        5,
    )
    .await;
    let rescuer_id = rescuer
        .wait_registered(&db.pool, "rescuer", REGISTER)
        .await
        .unwrap();
    // Bounded by shutdown timeout + stop grace (+ slack), counted from the signal.
    let bound = Duration::from_millis(1_000 + 300) + SLACK;
    let status = victim
        .wait_exit(bound.saturating_sub(signalled.elapsed()))
        .await
        .unwrap();
    assert!(
        status.success(),
        "victim exited with {status}:\n{}",
        victim.log_tail(40)
    );
    wait_count(
        &db.pool,
        "the rescuer completed the 5 released tasks",
        Duration::from_secs(20),
        SUCCEEDED_BY,
        &rescuer_id,
        &long,
        after,
        5,
    )
    .await;

    let summary = json_summary(&victim);
    assert_eq!(summary["agent_id"], json!(victim_id), "{summary}");
    assert_eq!(summary["ended_by"], json!("signal"), "{summary}");
    assert_eq!(counter(&summary, "claimed"), 10, "{summary}");
    assert_eq!(counter(&summary, "succeeded"), 5, "{summary}");
    assert_eq!(counter(&summary, "released"), 5, "{summary}");

    // No claim after the signal, though a slot freed and claimable work was waiting.
    let late_claims = count_with(
        &db.pool,
        "SELECT (SELECT count(*) FROM tasks WHERE lease_owner = $1 AND started_at > $3) \
              + (SELECT count(*) FROM task_attempts WHERE agent = $1 AND started_at > $3)",
        &victim_id,
        &[],
        before,
    )
    .await
    .unwrap();
    assert_eq!(late_claims, 0, "the victim claimed after the signal");
    let waiting = count(
        &db.pool,
        "SELECT count(*) FROM tasks WHERE task_type = 'noop' AND status = 'queued'",
    )
    .await
    .unwrap();
    assert_eq!(waiting, 20, "the noop tasks were claimed");
    // The short tasks were drained: they ended after the signal, by the victim.
    let drained = count_with(
        &db.pool,
        "SELECT count(*) FROM test_executions e JOIN task_attempts a \
             ON a.task_id = e.task_id AND a.epoch = e.epoch AND a.agent = e.agent \
         WHERE e.agent = $1 AND e.task_id = ANY($2) AND e.outcome = 'returned' \
           AND e.finished_at > $3 AND a.outcome = 'succeeded'",
        &victim_id,
        &short,
        after,
    )
    .await
    .unwrap();
    assert_eq!(
        drained, 5,
        "the short tasks did not finish during the drain (were they done before the signal?)"
    );
    // The long ones were released after the signal, and the rescuer started each well before
    // a recovery could have happened.
    let released = count_with(
        &db.pool,
        "SELECT count(*) FROM task_attempts WHERE agent = $1 AND task_id = ANY($2) \
           AND outcome = 'released' AND finished_at > $3",
        &victim_id,
        &long,
        after,
    )
    .await
    .unwrap();
    assert_eq!(released, 5);
    let (pairs, max_wait_ms): (i64, Option<f64>) = sqlx::query_as(
        "SELECT count(*), max(extract(epoch FROM s.started_at - r.finished_at) * 1000)::float8 \
         FROM task_attempts r JOIN task_attempts s ON s.task_id = r.task_id \
         WHERE r.agent = $1 AND r.outcome = 'released' AND r.task_id = ANY($3) \
           AND s.agent = $2 AND s.outcome = 'succeeded' AND s.started_at >= r.finished_at",
    )
    .bind(&victim_id)
    .bind(&rescuer_id)
    .bind(&long)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(pairs, 5, "not every released task was run by the rescuer");
    let max_wait = Duration::from_secs_f64(max_wait_ms.unwrap() / 1000.0);
    assert!(
        max_wait < TTL,
        "the rescuer started a released task {max_wait:?} after its release: not at once"
    );
    assert_eq!(lease_expired_attempts(&db.pool).await, 0);
    let report = ledger::expect_all_succeeded(&db.pool).await.unwrap();
    assert_eq!(report.succeeded, 10, "{report:?}");
    assert_eq!(report.released_attempts, 5, "{report:?}");
    assert_eq!(report.lease_expired_attempts, 0, "{report:?}");
    drop(rescuer);
    db.drop_db().await.unwrap();
}

/// Runs `n` ledger tasks that ignore cancellation and last a minute on a fresh victim started
/// with `extra`; returns the victim, its id and the task ids once every handler runs. The
/// payloads are then made short, for whoever runs the tasks after the victim.
async fn victim_ignoring_cancel(
    db: &TestDb,
    n: usize,
    extra: &[&str],
) -> (leasehold_tests::AgentHandle, String, Vec<i64>) {
    let victim = spawn_test_agent(&db.url, "victim", "ledger", extra)
        .await
        .unwrap();
    let victim_id = victim
        .wait_registered(&db.pool, "victim", REGISTER)
        .await
        .unwrap();
    let tasks = ledger::enqueue(
        &db.pool,
        "ledger",
        n,
        json!({"ms": 60_000, "ignore_cancel": true}),
    )
    .await
    .unwrap();
    wait_running(&db.pool, &victim_id, &tasks).await;
    set_ms(&db.pool, &tasks, 50).await;
    (victim, victim_id, tasks)
}

/// T07: a second SIGTERM forces the exit long before the 30 s shutdown timeout, and the
/// leases of the handlers it drops are released, not left to expire.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t07_second_signal_forces_exit() {
    let db = TestDb::new().await.unwrap();
    ledger::install(&db.pool).await.unwrap();
    let (mut victim, victim_id, tasks) = victim_ignoring_cancel(
        &db,
        5,
        &[
            "--concurrency",
            "5",
            "--shutdown-timeout",
            "30s",
            "--output",
            "json",
        ],
    )
    .await;
    victim.sigterm().unwrap();
    wait_log(
        &victim,
        "signal received: draining",
        1,
        Duration::from_secs(5),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(victim.is_running(), "the victim exited on the first signal");
    victim.sigterm().unwrap();
    let forced = Instant::now();
    let status = victim.wait_exit(Duration::from_secs(3) + SLACK).await;
    let status = status.unwrap();
    let took = forced.elapsed();
    assert!(
        status.success(),
        "victim exited with {status}:\n{}",
        victim.log_tail(40)
    );
    // Positive control: the second signal is what ended the drain.
    assert_eq!(
        log_lines(&victim, "second signal: forcing shutdown"),
        1,
        "{}",
        victim.log_tail(40)
    );
    // Released at exit: queued again at once, with a released attempt each.
    let queued = count_of(
        &db.pool,
        "SELECT count(*) FROM tasks WHERE id = ANY($2) AND status = 'queued' AND lease_until IS NULL",
        &victim_id,
        &tasks,
    )
    .await;
    let rows: Vec<(i64, String, Option<String>, i64)> = sqlx::query_as(
        "SELECT id, status::text, lease_owner::text, lease_epoch::bigint FROM tasks WHERE id = ANY($1)",
    )
    .bind(&tasks)
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        queued,
        5,
        "the leases were not released (exit took {took:?}): {rows:?}\n{}",
        victim.log_tail(40)
    );
    let released = count_of(
        &db.pool,
        "SELECT count(*) FROM task_attempts WHERE agent = $1 AND task_id = ANY($2) AND outcome = 'released'",
        &victim_id,
        &tasks,
    )
    .await;
    assert_eq!(released, 5);
    let summary = json_summary(&victim);
    assert_eq!(counter(&summary, "released"), 5, "{summary}");
    assert_eq!(counter(&summary, "succeeded"), 0, "{summary}");

    let (rescuer, rescuer_id) = start_rescuer(&db, 5).await.unwrap();
    wait_count(
        &db.pool,
        "the rescuer completed the 5 released tasks",
        Duration::from_secs(20),
        SUCCEEDED_BY,
        &rescuer_id,
        &tasks,
        chrono::Utc::now(),
        5,
    )
    .await;
    assert_eq!(lease_expired_attempts(&db.pool).await, 0);
    let report = ledger::expect_all_succeeded(&db.pool).await.unwrap();
    assert_eq!(report.released_attempts, 5, "{report:?}");
    drop(rescuer);
    db.drop_db().await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// T08: handlers that ignore cancellation.

/// T08: handlers that ignore the stop request are dropped after the stop grace; the agent
/// exits bounded by shutdown timeout + stop grace, releasing their leases, and another agent
/// runs the tasks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t08_handlers_ignoring_cancellation_still_exit_bounded() {
    let db = TestDb::new().await.unwrap();
    ledger::install(&db.pool).await.unwrap();
    let (mut victim, victim_id, tasks) = victim_ignoring_cancel(
        &db,
        5,
        &[
            "--concurrency",
            "5",
            "--shutdown-timeout",
            "500ms",
            "--stop-grace",
            "500ms",
            "--output",
            "json",
        ],
    )
    .await;
    let (rescuer, rescuer_id) = start_rescuer(&db, 5).await.unwrap();
    victim.sigterm().unwrap();
    let status = victim
        .wait_exit(Duration::from_millis(500 + 500) + SLACK)
        .await
        .unwrap();
    assert!(
        status.success(),
        "victim exited with {status}:\n{}",
        victim.log_tail(40)
    );
    // Positive control: every handler ignored the stop request and was dropped; none wrote
    // an end to its execution.
    assert_eq!(
        log_lines(&victim, "handler ignored the stop request; dropping it"),
        5,
        "{}",
        victim.log_tail(40)
    );
    let ended = count_of(
        &db.pool,
        "SELECT count(*) FROM test_executions WHERE agent = $1 AND task_id = ANY($2) AND finished_at IS NOT NULL",
        &victim_id,
        &tasks,
    )
    .await;
    assert_eq!(
        ended, 0,
        "a handler that ignores cancellation ended by itself"
    );
    let released = count_of(
        &db.pool,
        "SELECT count(*) FROM task_attempts WHERE agent = $1 AND task_id = ANY($2) AND outcome = 'released'",
        &victim_id,
        &tasks,
    )
    .await;
    assert_eq!(released, 5);
    let summary = json_summary(&victim);
    assert_eq!(counter(&summary, "released"), 5, "{summary}");

    wait_count(
        &db.pool,
        "the rescuer completed the 5 released tasks",
        Duration::from_secs(20),
        SUCCEEDED_BY,
        &rescuer_id,
        &tasks,
        chrono::Utc::now(),
        5,
    )
    .await;
    assert_eq!(lease_expired_attempts(&db.pool).await, 0);
    let report = ledger::expect_all_succeeded(&db.pool).await.unwrap();
    assert_eq!(report.succeeded, 5, "{report:?}");
    assert_eq!(report.released_attempts, 5, "{report:?}");
    drop(rescuer);
    db.drop_db().await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// A freeze past a task's stop time.

/// An agent frozen (SIGSTOP, within its TTL) past both the deadline or timeout of its running
/// tasks and the end of their work: on SIGCONT the stop time is due at the same poll as the
/// handler's result, and the attempt ends as it should have — `deadline_exceeded` or `timeout`,
/// dead — not as a success the handler reported after the task's time was up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_freeze_past_the_deadline_and_the_work_ends_the_task_dead_not_succeeded() {
    let db = TestDb::new().await.unwrap();
    ledger::install(&db.pool).await.unwrap();
    // A TTL far longer than the freeze: the leases stay provable, nothing is recovered.
    let victim = spawn_test_agent(
        &db.url,
        "frozen",
        "ledger",
        &[
            "--concurrency",
            "10",
            "--lease-ttl",
            "30s",
            "--heartbeat",
            "3s",
        ],
    )
    .await
    .unwrap();
    let victim_id = victim
        .wait_registered(&db.pool, "frozen", REGISTER)
        .await
        .unwrap();
    let deadline = ledger::Columns {
        deadline_in_ms: Some(2_500),
        ..ledger::Columns::default()
    };
    let timeout = ledger::Columns {
        timeout_ms: Some(2_500),
        max_attempts: Some(1),
        ..ledger::Columns::default()
    };
    let work = json!({"ms": 3_500});
    let mut tasks = ledger::enqueue_with(&db.pool, "ledger", 3, work.clone(), &deadline)
        .await
        .unwrap();
    tasks.extend(
        ledger::enqueue_with(&db.pool, "ledger", 3, work, &timeout)
            .await
            .unwrap(),
    );
    wait_running(&db.pool, &victim_id, &tasks).await;
    victim.stop().unwrap();
    wait_stopped(&victim).await;
    // Positive control: frozen while every task still ran, before any stop time.
    assert_eq!(
        count_of(&db.pool, HELD, &victim_id, &tasks).await,
        6,
        "a task ended before the freeze"
    );
    let frozen_at = db_now(&db.pool).await;
    let first_deadline: DbTime =
        sqlx::query_scalar("SELECT min(deadline_at) FROM tasks WHERE id = ANY($1)")
            .bind(&tasks)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert!(
        frozen_at < first_deadline,
        "frozen at {frozen_at}, after the deadline {first_deadline}: the test proves nothing"
    );
    // Past the deadline, the timeout and the work.
    tokio::time::sleep(Duration::from_secs(5)).await;
    victim.cont().unwrap();

    wait_until("all six tasks ended", Duration::from_secs(30), || {
        let pool = db.pool.clone();
        let tasks = tasks.clone();
        async move {
            let ended: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM tasks WHERE id = ANY($1) AND status IN ('dead', 'succeeded')",
            )
            .bind(&tasks)
            .fetch_one(&pool)
            .await?;
            Ok(ended == 6)
        }
    })
    .await
    .unwrap();
    let endings: Vec<(i64, String, Option<String>)> = sqlx::query_as(
        "SELECT id, status, last_error ->> 'code' FROM tasks WHERE id = ANY($1) ORDER BY id",
    )
    .bind(&tasks)
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let want: Vec<(i64, String, Option<String>)> = tasks
        .iter()
        .enumerate()
        .map(|(i, id)| {
            let code = if i < 3 {
                "deadline_exceeded"
            } else {
                "timeout"
            };
            (*id, "dead".to_string(), Some(code.to_string()))
        })
        .collect();
    assert_eq!(endings, want, "{}", victim.log_tail(40));
    assert_eq!(lease_expired_attempts(&db.pool).await, 0);
    drop(victim);
    db.drop_db().await.unwrap();
}
