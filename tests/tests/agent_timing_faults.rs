#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Timing faults against real agents (TESTING.md T18, T20): latency added on every agent
//! connection to PostgreSQL, and agent host clocks skewed by ±10 minutes (libfaketime). Lease
//! times come from the database clock and heartbeats are sized for the round trip, so neither
//! may cause a false revocation. Each scenario proves its fault was really applied and ends
//! with the ledger check.

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use leasehold_tests::faketime::FakeClock;
use leasehold_tests::fleet::{GRACE, POLL, TTL, spawn_agent};
use leasehold_tests::proxy::addr_of_url;
use leasehold_tests::scenario::{
    FENCED_LOG, Figures, LEASE_LOST_LOG, LOCAL_DEADLINE_LOG, db_now, log_count, log_count_all,
    spawn_proxied, wait_ledger_done,
};
use leasehold_tests::{AgentHandle, ProxyMode, TcpProxy, TestDb, ledger, wait_until};
use serde_json::json;
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;

const REGISTER: Duration = Duration::from_secs(20);
const SLACK: Duration = Duration::from_secs(5);
const LONG_TASKS: usize = 6;
/// Work of a long task: twice the fleet's TTL, so its lease must be renewed several times.
const LONG_MS: u64 = 5000;
const SHORT_TASKS: usize = 60;

/// Enqueues the long and short tasks of a scenario; returns the long ones.
async fn enqueue_mix(pool: &PgPool) -> Vec<i64> {
    let long = ledger::enqueue(pool, "ledger", LONG_TASKS, json!({"ms": LONG_MS}))
        .await
        .unwrap();
    ledger::enqueue(pool, "ledger", SHORT_TASKS, json!({"ms": 20}))
        .await
        .unwrap();
    long
}

/// Asserts what "no false revocation" means once every task is done: one execution per task,
/// every task succeeded in its first lease, no recovery, nothing fenced or stopped, and each
/// long task was renewed later than `renewed_past` after it started. Returns the report and the figures.
async fn assert_no_false_revocation(
    pool: &PgPool,
    agents: &[&AgentHandle],
    long: &[i64],
    renewed_past: Duration,
    scenario: &str,
) -> (ledger::LedgerReport, Figures) {
    let report = ledger::expect_all_succeeded(pool).await.unwrap();
    let tasks = (LONG_TASKS + SHORT_TASKS) as u64;
    assert_eq!(report.succeeded, tasks, "{report:?}");
    assert_eq!(report.executions, tasks, "a task ran twice: {report:?}");
    assert_eq!(report.extra_executions, 0, "{report:?}");
    assert_eq!(
        report.lease_expired_attempts, 0,
        "false revocation: {report:?}"
    );
    let first_lease: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM test_ledger l JOIN tasks t ON t.id = l.task_id WHERE t.lease_epoch = 1",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    assert_eq!(first_lease as u64, tasks, "a task needed a second lease");
    for needle in [FENCED_LOG, LEASE_LOST_LOG, LOCAL_DEADLINE_LOG] {
        let n = log_count_all(agents.iter().copied(), needle);
        assert_eq!(n, 0, "{n} agent log lines say {needle:?}");
    }
    // The long tasks were renewed well after they started: renewals landed.
    let renewed: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM tasks WHERE id = ANY($1) AND heartbeat_at > started_at + $2::interval",
    )
    .bind(long)
    .bind(format!("{} milliseconds", renewed_past.as_millis()))
    .fetch_one(pool)
    .await
    .unwrap();
    assert_eq!(renewed as usize, long.len(), "long leases were not renewed");
    let figures = Figures::collect(pool, scenario, &report, 1, 0)
        .await
        .unwrap();
    assert!(figures.clean(), "{figures:?}");
    (report, figures)
}

// ---------------------------------------------------------------------------------------------
// T18

/// Latency added each way on every agent connection.
const LATENCY: Duration = Duration::from_millis(100);
/// Agent timings sized for that latency: a renewal is four sequential round trips (BEGIN, the
/// planner settings, the renewal, COMMIT; two more to prepare on a new connection) and must
/// fit the renewal timeout, min(heartbeat, TTL / 4, TTL / 5). With the fleet's 400 ms heartbeat
/// a 200 ms round trip cannot.
const HEARTBEAT: Duration = Duration::from_secs(2);
const LATENCY_TIMINGS: [&str; 8] = [
    "--lease-ttl",
    "10s",
    "--heartbeat",
    "2s",
    "--grace",
    "2s",
    "--concurrency",
    "6",
];

/// T18: two agents whose every database connection carries 100 ms of latency each way drain
/// long and short tasks: no lease is revoked, nothing fenced, each task runs once in its first
/// lease, and the long ones were renewed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t18_added_latency_causes_no_false_revocation() {
    let db = TestDb::new().await.unwrap();
    ledger::install(&db.pool).await.unwrap();
    let proxy = TcpProxy::start(addr_of_url(&db.url).await.unwrap())
        .await
        .unwrap();
    proxy.set_mode(ProxyMode::Latency(LATENCY));
    // Positive control: a round trip through the proxy takes at least the latency both ways.
    let probe = PgPoolOptions::new()
        .max_connections(1)
        .connect(&proxy.url_for(&db.url))
        .await
        .unwrap();
    let mut rtts = Vec::new();
    for _ in 0..5 {
        let at = Instant::now();
        sqlx::query("SELECT 1").execute(&probe).await.unwrap();
        rtts.push(at.elapsed());
    }
    probe.close().await;
    let min_rtt = *rtts.iter().min().unwrap();
    assert!(min_rtt >= LATENCY * 2, "round trips {rtts:?}");

    let mut agents = Vec::new();
    for name in ["t18-a", "t18-b"] {
        let agent = spawn_proxied(
            &db.url,
            &proxy,
            name,
            "ledger",
            &LATENCY_TIMINGS,
            Vec::new(),
        )
        .await
        .unwrap();
        agent
            .wait_registered(&db.pool, name, REGISTER)
            .await
            .unwrap();
        agents.push(agent);
    }
    let long = enqueue_mix(&db.pool).await;
    wait_ledger_done(&db.pool, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(proxy.mode(), ProxyMode::Latency(LATENCY));
    let refs: Vec<&AgentHandle> = agents.iter().collect();
    let (report, figures) =
        assert_no_false_revocation(&db.pool, &refs, &long, HEARTBEAT, "T18").await;
    let renewal_failures = log_count_all(refs.iter().copied(), "lease renewal failed");
    eprintln!(
        "t18: {LATENCY:?} each way, measured round trips {rtts:?}; {} connections through the \
         proxy; {renewal_failures} renewal failures logged; {report:?}",
        proxy.accepted()
    );
    eprintln!("{}", figures.line());
    drop(agents);
    drop(proxy);
    db.drop_db().await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// T20

/// How far the agents' host clocks are off.
const SKEW: i64 = 600;

/// Spawns the test agent `name` with its host wall clock `offset` seconds off (libfaketime;
/// the monotonic clock is left alone, as on a host whose clock is wrong); returns it with the
/// clock it follows, its id and the skew its log shows against the database clock, in seconds.
async fn spawn_skewed(
    db: &TestDb,
    name: &str,
    offset: i64,
) -> (AgentHandle, FakeClock, String, f64) {
    let clock = FakeClock::new().unwrap();
    clock.set_offset(offset).unwrap();
    let agent = spawn_agent(
        "leasehold-test-agent",
        &db.url,
        name,
        "ledger",
        &["--concurrency", "6"],
        clock.env(),
    )
    .await
    .unwrap();
    let id = agent
        .wait_registered(&db.pool, name, REGISTER)
        .await
        .unwrap();
    // Positive control: the agent stamps its log with its own, skewed clock. Its "agent
    // registered" line follows the insert that stamped `agents.started_at` with database time.
    let registered: DateTime<Utc> =
        sqlx::query_scalar("SELECT started_at FROM agents WHERE id = $1")
            .bind(&id)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    wait_until("the agent logs its registration", REGISTER, || {
        let logged = log_count(&agent, "agent registered") >= 1;
        async move { Ok(logged) }
    })
    .await
    .unwrap_or_else(|e| panic!("{e:#}:\n{}", agent.log_tail(40)));
    let text = agent.stderr_text().unwrap();
    let line = text
        .lines()
        .find(|l| l.contains("agent registered"))
        .unwrap();
    let stamped: DateTime<Utc> = line
        .split_whitespace()
        .next()
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("no timestamp on the log line of {name}: {line:?}"));
    let skew = (stamped - registered).num_milliseconds() as f64 / 1000.0;
    let want = offset as f64;
    assert!(
        (skew - want).abs() < 30.0,
        "agent {name} with its clock {offset:+} s off logged its registration at {stamped}, registered \
         at {registered} in database time: its clock is {skew} s off, not {want} s"
    );
    (agent, clock, id, skew)
}

/// T20: two agents whose host clocks run 10 minutes ahead and 10 minutes behind drain long
/// and short tasks with no false revocation; then one of them, killed while holding leases, has
/// them recovered within TTL + grace as usual — not 10 minutes early or late.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t20_agent_host_clocks_skewed_by_ten_minutes_change_no_timing() {
    let db = TestDb::new().await.unwrap();
    ledger::install(&db.pool).await.unwrap();
    let (mut ahead, _ahead_clock, _, ahead_skew) = spawn_skewed(&db, "t20-ahead", SKEW).await;
    let (behind, _behind_clock, behind_id, behind_skew) =
        spawn_skewed(&db, "t20-behind", -SKEW).await;
    let long = enqueue_mix(&db.pool).await;
    wait_ledger_done(&db.pool, Duration::from_secs(60))
        .await
        .unwrap();
    let (report, figures) =
        assert_no_false_revocation(&db.pool, &[&ahead, &behind], &long, TTL, "T20").await;
    // Both served, and their registry rows carry database time.
    let (served, stale_rows): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(DISTINCT lease_owner) FROM tasks WHERE status = 'succeeded'), \
                (SELECT count(*) FROM agents WHERE state = 'running' \
                   AND abs(extract(epoch FROM clock_timestamp() - heartbeat_at)) > 60)",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(served, 2, "one skewed agent did no work");
    assert_eq!(stale_rows, 0, "a registry row carries a host time");

    // Recovery of a skewed agent's leases by a skewed leader takes TTL + grace, as usual: 12
    // tasks of 5 s fill both agents' 6 slots, then the one running 10 minutes behind is killed.
    let mut behind = behind;
    let doomed = ledger::enqueue(&db.pool, "ledger", 12, json!({"ms": 5000}))
        .await
        .unwrap();
    wait_until(
        "both agents run 6 tasks each",
        Duration::from_secs(20),
        || {
            let pool = db.pool.clone();
            let doomed = doomed.clone();
            async move {
                let n: i64 = sqlx::query_scalar(
                    "SELECT count(*) FROM test_executions WHERE task_id = ANY($1)",
                )
                .bind(&doomed)
                .fetch_one(&pool)
                .await?;
                Ok(n == 12)
            }
        },
    )
    .await
    .unwrap();
    // Short work for whoever runs them again.
    sqlx::query("UPDATE tasks SET payload = payload || '{\"ms\": 20}' WHERE id = ANY($1)")
        .bind(&doomed)
        .execute(&db.pool)
        .await
        .unwrap();
    behind.kill9().unwrap();
    let killed_at = db_now(&db.pool).await.unwrap();
    behind.wait_exit(Duration::from_secs(5)).await.unwrap();
    wait_ledger_done(
        &db.pool,
        Duration::from_secs(5) + TTL + GRACE + POLL * 2 + SLACK * 2,
    )
    .await
    .unwrap();
    let after_kill = ledger::expect_all_succeeded(&db.pool).await.unwrap();
    let (recovered, first_ms, last_ms): (i64, f64, f64) = sqlx::query_as(
        "SELECT count(*), \
                coalesce(extract(epoch FROM min(finished_at) - $2) * 1000, -1)::float8, \
                coalesce(extract(epoch FROM max(finished_at) - $2) * 1000, -1)::float8 \
         FROM task_attempts WHERE agent = $1 AND outcome = 'lease_expired'",
    )
    .bind(&behind_id)
    .bind(killed_at)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(recovered, 6, "{after_kill:?}");
    assert_eq!(after_kill.lease_expired_attempts, 6, "{after_kill:?}");
    let (first, last) = (
        Duration::from_secs_f64(first_ms.max(0.0) / 1000.0),
        Duration::from_secs_f64(last_ms.max(0.0) / 1000.0),
    );
    // Not early: the last renewal was at most a heartbeat before the kill, so the leases ran
    // at least TTL − heartbeat past it, plus the grace. Not late: within TTL + grace + polls.
    assert!(
        first_ms >= (TTL + GRACE - Duration::from_millis(1000)).as_millis() as f64,
        "recovered {first:?} after the kill: too early"
    );
    assert!(
        last <= TTL + GRACE + POLL * 2 + SLACK,
        "recovered {last:?} after the kill: too late"
    );
    assert!(
        ahead.try_wait().unwrap().is_none(),
        "{}",
        ahead.log_tail(40)
    );
    assert_eq!(log_count(&ahead, FENCED_LOG), 0);
    eprintln!(
        "t20: log clocks {ahead_skew:+.1} s and {behind_skew:+.1} s off the database; {report:?}; \
         the 6 leases of the killed agent (clock -10m) recovered {first:?}..{last:?} after the \
         kill (TTL {TTL:?} + grace {GRACE:?}): {after_kill:?}"
    );
    eprintln!("{}", figures.line());
    drop(ahead);
    db.drop_db().await.unwrap();
}
