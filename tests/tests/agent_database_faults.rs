#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Database and network faults against real agents (TESTING.md T09, T11, T12, T16, T17,
//! T19): PostgreSQL restarted under load, backends terminated at random, a pool exhausted by
//! handlers, connections reset or blackholed between an agent and PostgreSQL, the LISTEN
//! connection lost. Every scenario proves its fault fired (a positive control) and ends with
//! the ledger check.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use leasehold_tests::fleet::{GRACE, POLL, TTL, spawn_agent, spawn_test_agent};
use leasehold_tests::proxy::addr_of_url;
use leasehold_tests::scenario::{
    DATABASE_FAILURE_LOGS, RENEWAL_FAILED_LOG, db_now, leases_held, shorten_tasks,
};
use leasehold_tests::{AgentHandle, PgCluster, ProxyMode, TcpProxy, TestDb, ledger, wait_until};
use serde_json::json;
use sqlx::PgPool;

const SLACK: Duration = Duration::from_secs(3);
/// A lease whose heartbeat is older than this is suspect (DESIGN §4: 3 × heartbeat).
const REVOKE_THRESHOLD: Duration = Duration::from_millis(1200);

// ---------------------------------------------------------------------------------------------
// Reading the database

async fn tasks_with_status(pool: &PgPool, status: &str) -> anyhow::Result<i64> {
    Ok(
        sqlx::query_scalar("SELECT count(*) FROM tasks WHERE status = $1")
            .bind(status)
            .fetch_one(pool)
            .await?,
    )
}

/// Succeeded tasks, or -1 while the database cannot answer (it is being restarted).
async fn succeeded_or_unknown(pool: &PgPool) -> i64 {
    tasks_with_status(pool, "succeeded").await.unwrap_or(-1)
}

async fn executions(pool: &PgPool) -> anyhow::Result<i64> {
    Ok(sqlx::query_scalar("SELECT count(*) FROM test_executions")
        .fetch_one(pool)
        .await?)
}

/// Waits until `n` tasks are `succeeded` (tolerating a database that does not answer for a
/// while).
async fn wait_succeeded(pool: &PgPool, n: i64, timeout: Duration) {
    wait_until(&format!("{n} tasks succeeded"), timeout, || {
        let pool = pool.clone();
        async move { Ok(succeeded_or_unknown(&pool).await >= n) }
    })
    .await
    .unwrap();
}

/// An agent's backend, from `pg_stat_activity`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Backend {
    pid: i32,
    application_name: String,
    query: String,
}

impl Backend {
    fn is_heartbeat(&self) -> bool {
        self.application_name.ends_with(" heartbeat")
    }

    /// The notifier's connection: its last statement is the `LISTEN` or, once it has been
    /// quiet for a probe interval, the notifier's `SELECT 1` probe.
    fn is_listen(&self) -> bool {
        !self.is_heartbeat()
            && (self
                .query
                .trim_start()
                .to_ascii_uppercase()
                .starts_with("LISTEN")
                || self.query.trim() == "SELECT 1")
    }
}

/// Every backend of database `datname` whose application name starts with `app_prefix`.
async fn backends(pool: &PgPool, datname: &str, app_prefix: &str) -> anyhow::Result<Vec<Backend>> {
    let rows: Vec<(i32, String, String)> = sqlx::query_as(
        "SELECT pid, application_name, coalesce(query, '') FROM pg_stat_activity \
         WHERE datname = $1 AND starts_with(application_name, $2) ORDER BY pid",
    )
    .bind(datname)
    .bind(app_prefix)
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(pid, application_name, query)| Backend {
            pid,
            application_name,
            query,
        })
        .collect())
}

/// The LISTEN backends of the agent named `name`.
async fn listen_backends(pool: &PgPool, datname: &str, name: &str) -> anyhow::Result<Vec<i32>> {
    let app = format!("leasehold-agent {name}");
    Ok(backends(pool, datname, &app)
        .await?
        .into_iter()
        .filter(|b| b.application_name == app && b.is_listen())
        .map(|b| b.pid)
        .collect())
}

async fn terminate(pool: &PgPool, pid: i32) -> anyhow::Result<bool> {
    Ok(sqlx::query_scalar("SELECT pg_terminate_backend($1)")
        .bind(pid)
        .fetch_one(pool)
        .await?)
}

/// User plus system CPU time the process has used so far.
fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name (which may hold spaces), from field 3 (state) on.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    let per_second: u64 = std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100);
    Duration::from_millis(ticks * 1000 / per_second)
}

/// Lines of the agent's stderr containing any of `needles`.
fn log_lines(agent: &AgentHandle, needles: &[&str]) -> Vec<String> {
    agent
        .stderr_text()
        .unwrap()
        .lines()
        .filter(|line| needles.iter().any(|n| line.contains(n)))
        .map(str::to_string)
        .collect()
}

const CLAIM_FAILED: &str = "claim failed";
const CLAIM_TIMED_OUT: &str = "claim timed out";
const LOCAL_DEADLINE: &str = "local safety deadline";

// ---------------------------------------------------------------------------------------------
// T09

/// T09: PostgreSQL restarted (`pg_ctl restart -m fast`) twice while two agents drain 1000
/// tasks: every task succeeds exactly once, the agents reconnect by themselves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t09_postgres_fast_restart_during_1000_tasks() {
    const TASKS: i64 = 1000;
    let mut cluster = PgCluster::start().await.unwrap();
    let (url, pool) = cluster
        .migrated_database_pool("leasehold_t09")
        .await
        .unwrap();
    ledger::install(&pool).await.unwrap();
    ledger::enqueue(&pool, "ledger", TASKS as usize, json!({}))
        .await
        .unwrap();
    // 20..50 ms of work, varying from task to task.
    sqlx::query(
        "UPDATE tasks SET payload = payload || jsonb_build_object('ms', 20 + (id * 7) % 31)",
    )
    .execute(&pool)
    .await
    .unwrap();
    // A small concurrency, so the drain lasts long enough to be restarted under.
    let mut agents = Vec::new();
    for name in ["t09-a", "t09-b"] {
        let agent = spawn_test_agent(&url, name, "ledger", &["--concurrency", "4"])
            .await
            .unwrap();
        let id = agent
            .wait_registered(&pool, name, Duration::from_secs(20))
            .await
            .unwrap();
        agents.push((agent, id));
    }

    let mut postmaster_started: Vec<DateTime<Utc>> = vec![
        sqlx::query_scalar("SELECT pg_postmaster_start_time()")
            .fetch_one(&pool)
            .await
            .unwrap(),
    ];
    let mut restarted_at = Vec::new();
    for threshold in [200, 600] {
        wait_succeeded(&pool, threshold, Duration::from_secs(60)).await;
        let done_before = succeeded_or_unknown(&pool).await;
        cluster.restart_fast().await.unwrap();
        let at = Mutex::new(None);
        wait_until(
            "the restarted server answers",
            Duration::from_secs(20),
            || {
                let pool = pool.clone();
                let at = &at;
                async move {
                    let now = db_now(&pool).await.ok();
                    *at.lock().unwrap() = now;
                    Ok(now.is_some())
                }
            },
        )
        .await
        .unwrap();
        let at = at.into_inner().unwrap();
        postmaster_started.push(
            sqlx::query_scalar("SELECT pg_postmaster_start_time()")
                .fetch_one(&pool)
                .await
                .unwrap(),
        );
        assert!(
            done_before < TASKS,
            "the drain ended before restart {} (at {done_before} succeeded)",
            restarted_at.len() + 1
        );
        restarted_at.push(at.unwrap());
    }
    wait_succeeded(&pool, TASKS, Duration::from_secs(120)).await;

    let report = ledger::expect_all_succeeded(&pool).await.unwrap();
    assert_eq!(report.succeeded, TASKS as u64, "{report:?}");
    assert_eq!(report.successes_without_execution, 0, "{report:?}");

    // Positive control: the server really restarted twice…
    assert!(
        postmaster_started.windows(2).all(|w| w[0] < w[1]),
        "postmaster start times {postmaster_started:?}"
    );
    // …and the agents saw it (the sqlx pools replace most dead connections unnoticed, so any
    // failed database call counts).
    let saw_it: Vec<String> = agents
        .iter()
        .flat_map(|(a, _)| log_lines(a, DATABASE_FAILURE_LOGS))
        .collect();
    assert!(
        !saw_it.is_empty(),
        "no agent logged a failed database call across two restarts"
    );
    // Both agents carry on: still running, and after the second restart each one's main
    // pool (its registry row beats), heartbeat connection and LISTEN connection are back.
    // Every backend is new after a restart.
    let last_restart = restarted_at[1];
    for (agent, id) in &mut agents {
        assert!(
            agent.is_running(),
            "agent {} exited; end of its stderr:\n{}",
            agent.label(),
            agent.log_tail(40)
        );
        let app = format!("leasehold-agent {}", id.split('#').next().unwrap());
        wait_until(
            &format!("agent {id} is reconnected after the second restart"),
            Duration::from_secs(10),
            || {
                let pool = pool.clone();
                let id = id.clone();
                let app = app.clone();
                async move {
                    let beat: Option<DateTime<Utc>> =
                        sqlx::query_scalar("SELECT heartbeat_at FROM agents WHERE id = $1")
                            .bind(&id)
                            .fetch_optional(&pool)
                            .await
                            .unwrap_or(None);
                    let mine = backends(&pool, "leasehold_t09", &app)
                        .await
                        .unwrap_or_default();
                    let heartbeat = mine.iter().any(Backend::is_heartbeat);
                    let listen = mine.iter().any(Backend::is_listen);
                    Ok(beat.is_some_and(|b| b > last_restart) && heartbeat && listen)
                }
            },
        )
        .await
        .unwrap_or_else(|e| panic!("{e:#}; end of its stderr:\n{}", agent.log_tail(40)));
    }
    eprintln!(
        "t09: {report:?}; {} agent log lines about the outages",
        saw_it.len()
    );
    drop(agents);
    pool.close().await;
    drop(cluster);
}

// ---------------------------------------------------------------------------------------------
// T11

#[derive(Debug, Default, Clone, Copy)]
struct Kills {
    total: u64,
    heartbeat: u64,
    listen: u64,
}

/// Every ~200 ms terminates one backend of the agents on `datname`: a random one, and in
/// turn a heartbeat and a LISTEN connection on purpose. Runs until `stop`.
async fn terminate_at_random(pool: PgPool, datname: String, stop: Arc<AtomicBool>) -> Kills {
    let mut kills = Kills::default();
    let mut round = 0u64;
    while !stop.load(Ordering::SeqCst) {
        round += 1;
        let all = backends(&pool, &datname, "leasehold-agent")
            .await
            .unwrap_or_default();
        let pick: Vec<&Backend> = match round % 5 {
            1 => all.iter().filter(|b| b.is_heartbeat()).collect(),
            3 => all.iter().filter(|b| b.is_listen()).collect(),
            _ => all.iter().collect(),
        };
        if !pick.is_empty() {
            let victim = pick[fastish_random(round) % pick.len()];
            if terminate(&pool, victim.pid).await.unwrap_or(false) {
                kills.total += 1;
                kills.heartbeat += u64::from(victim.is_heartbeat());
                kills.listen += u64::from(victim.is_listen());
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    kills
}

/// A cheap pseudo-random number (splitmix64 of the round and the clock).
fn fastish_random(seed: u64) -> usize {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let mut z = seed
        .wrapping_add(u64::from(nanos))
        .wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z ^ (z >> 31)) as usize
}

/// T11: backends of two agents (heartbeat and LISTEN connections included) are terminated
/// every ~200 ms while they drain 1000 tasks: everything succeeds exactly once, no lease is
/// lost, and the agents neither get stuck nor spin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t11_backends_terminated_at_random_agents_carry_on() {
    const TASKS: i64 = 1000;
    let db = TestDb::new().await.unwrap();
    ledger::install(&db.pool).await.unwrap();
    let mut agents = Vec::new();
    for name in ["t11-a", "t11-b"] {
        let agent = spawn_test_agent(&db.url, name, "ledger", &["--concurrency", "5"])
            .await
            .unwrap();
        let id = agent
            .wait_registered(&db.pool, name, Duration::from_secs(20))
            .await
            .unwrap();
        // Its LISTEN connection is up (so the killer can find it).
        wait_until("the agent listens", Duration::from_secs(10), || {
            let pool = db.pool.clone();
            let datname = db.name().to_string();
            async move { Ok(!listen_backends(&pool, &datname, name).await?.is_empty()) }
        })
        .await
        .unwrap();
        agents.push((agent, id));
    }

    let stop = Arc::new(AtomicBool::new(false));
    let killer = tokio::spawn(terminate_at_random(
        db.pool.clone(),
        db.name().to_string(),
        Arc::clone(&stop),
    ));
    ledger::enqueue(&db.pool, "ledger", TASKS as usize, json!({"ms": 20}))
        .await
        .unwrap();
    wait_succeeded(&db.pool, TASKS, Duration::from_secs(90)).await;
    // Idle under fire: the agents have nothing to do while their connections keep dying; a
    // reconnect loop without backoff would show as CPU time here.
    let cpu_before: Vec<Duration> = agents.iter().map(|(a, _)| cpu_time(a.pid())).collect();
    let idle_from = Instant::now();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle_for = idle_from.elapsed();
    let cpu_used: Vec<Duration> = agents
        .iter()
        .zip(&cpu_before)
        .map(|((a, _), before)| cpu_time(a.pid()).saturating_sub(*before))
        .collect();
    stop.store(true, Ordering::SeqCst);
    let kills = killer.await.unwrap();

    let report = ledger::expect_all_succeeded(&db.pool).await.unwrap();
    assert_eq!(report.succeeded, TASKS as u64, "{report:?}");
    assert_eq!(report.successes_without_execution, 0, "{report:?}");
    // Outages of single connections are far shorter than the TTL: no lease may be lost.
    assert_eq!(
        report.lease_expired_attempts, 0,
        "leases expired although every outage was shorter than the TTL: {report:?}; kills {kills:?}"
    );
    assert_eq!(report.extra_executions, 0, "{report:?}");
    // Positive control: the fault fired, heartbeat and LISTEN connections included.
    assert!(kills.total >= 10, "only {kills:?} backends terminated");
    assert!(
        kills.heartbeat >= 1,
        "no heartbeat connection terminated: {kills:?}"
    );
    assert!(
        kills.listen >= 1,
        "no LISTEN connection terminated: {kills:?}"
    );
    for ((agent, id), cpu) in agents.iter_mut().zip(&cpu_used) {
        assert!(
            agent.is_running(),
            "agent {} exited; end of its stderr:\n{}",
            agent.label(),
            agent.log_tail(40)
        );
        let done: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM task_attempts WHERE agent = $1 AND outcome = 'succeeded'",
        )
        .bind(&*id)
        .fetch_one(&db.pool)
        .await
        .unwrap();
        assert!(done > 0, "agent {id} completed nothing");
        // No busy spin: well under a quarter of a core while idle.
        assert!(
            *cpu < idle_for / 4,
            "agent {id} used {cpu:?} of CPU in {idle_for:?} of idling under terminations"
        );
    }
    eprintln!("t11: {kills:?}; idle CPU {cpu_used:?} in {idle_for:?}; {report:?}");
    drop(agents);
    db.drop_db().await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// T12

/// `(id, epoch, status, heartbeat_at, database now)` of the tasks `ids`.
async fn heartbeats(
    pool: &PgPool,
    ids: &[i64],
) -> Vec<(i64, i64, String, DateTime<Utc>, DateTime<Utc>)> {
    sqlx::query_as(
        "SELECT id, lease_epoch, status, heartbeat_at, clock_timestamp() FROM tasks \
         WHERE id = ANY($1) ORDER BY id",
    )
    .bind(ids)
    .fetch_all(pool)
    .await
    .unwrap()
}

/// T12: handlers holding every connection of the agent's pool for longer than the TTL do
/// not stop its heartbeats (their own connection): the leases keep being renewed, none is
/// revoked, every task succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t12_handlers_holding_every_pool_connection_do_not_stop_heartbeats() {
    const MAX_CONNECTIONS: i64 = 3;
    let db = TestDb::new().await.unwrap();
    ledger::install(&db.pool).await.unwrap();
    let hogs = ledger::enqueue(&db.pool, "hog", 2, json!({"ms": 5000}))
        .await
        .unwrap();
    ledger::enqueue(&db.pool, "ledger", 4, json!({"ms": 100}))
        .await
        .unwrap();
    let agent = spawn_test_agent(
        &db.url,
        "t12",
        "hog,ledger",
        &[
            "--max-connections",
            &MAX_CONNECTIONS.to_string(),
            "--concurrency",
            "4",
        ],
    )
    .await
    .unwrap();
    let id = agent
        .wait_registered(&db.pool, "t12", Duration::from_secs(20))
        .await
        .unwrap();
    // Both hogs have been running for a while: the pool is theirs.
    wait_until("both hogs run", Duration::from_secs(20), || {
        let pool = db.pool.clone();
        let hogs = hogs.clone();
        async move {
            let running: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM tasks WHERE id = ANY($1) AND status = 'running' \
                 AND clock_timestamp() - started_at > interval '500 milliseconds'",
            )
            .bind(&hogs)
            .fetch_one(&pool)
            .await?;
            Ok(running == 2)
        }
    })
    .await
    .unwrap();
    let first = heartbeats(&db.pool, &hogs).await;
    // Two samples more than a second apart, both within the hog's 5 s.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let second = heartbeats(&db.pool, &hogs).await;
    // Meanwhile the agent's registry row, written through the main pool, has gone stale.
    let registry_age: f64 = sqlx::query_scalar(
        "SELECT extract(epoch FROM clock_timestamp() - heartbeat_at)::float8 FROM agents WHERE id = $1",
    )
    .bind(&id)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    // Meanwhile the pool is fully open: every connection it may have, one of them LISTENing.
    let pool_backends: Vec<Backend> = backends(&db.pool, db.name(), "leasehold-agent t12")
        .await
        .unwrap()
        .into_iter()
        .filter(|b| b.application_name == "leasehold-agent t12")
        .collect();
    for (a, b) in first.iter().zip(&second) {
        assert_eq!(b.2, "running", "hog {} ended too soon: {second:?}", b.0);
        assert_eq!(
            a.1, b.1,
            "hog {} changed epoch: {first:?} → {second:?}",
            a.0
        );
        assert!(
            b.3 > a.3,
            "hog {} was not renewed in 1.5 s: {first:?} → {second:?}",
            a.0
        );
        let age = (b.4 - b.3).to_std().unwrap_or(Duration::ZERO);
        assert!(
            age < REVOKE_THRESHOLD,
            "hog {}'s heartbeat is {age:?} old, suspect: {second:?}",
            a.0
        );
    }

    wait_succeeded(&db.pool, 6, Duration::from_secs(20)).await;
    let report = ledger::expect_all_succeeded(&db.pool).await.unwrap();
    assert_eq!(report.succeeded, 6, "{report:?}");
    assert_eq!(report.lease_expired_attempts, 0, "{report:?}");
    assert_eq!(report.extra_executions, 0, "{report:?}");
    let expired: i64 =
        sqlx::query_scalar("SELECT count(*) FROM task_attempts WHERE outcome = 'lease_expired'")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(expired, 0);

    // Positive control: the hogs held the pool. One connection is the notifier's LISTEN,
    // held for good; the hogs together end up holding all the others.
    let results: Vec<(i64, i64)> = sqlx::query_as(
        "SELECT (result ->> 'held')::bigint, (result ->> 'max')::bigint FROM tasks \
         WHERE id = ANY($1) ORDER BY id",
    )
    .bind(&hogs)
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert!(
        results.iter().all(|(_, max)| *max == MAX_CONNECTIONS),
        "{results:?}"
    );
    assert_eq!(
        pool_backends.len() as i64,
        MAX_CONNECTIONS,
        "{pool_backends:?}"
    );
    assert_eq!(
        pool_backends.iter().filter(|b| b.is_listen()).count(),
        1,
        "{pool_backends:?}"
    );
    // Each hog reports what it held when it ended (they end a few ms apart, so the sum may
    // include a connection the first one gave back).
    let held: i64 = results.iter().map(|(held, _)| held).sum();
    assert!(
        held >= MAX_CONNECTIONS - 1,
        "the hogs held {results:?} connections; all but the LISTEN one expected"
    );
    // …and the agent's other pool users starved meanwhile: its registry row went stale while
    // its lease heartbeats kept landing, and claims and completions timed out on the pool.
    assert!(
        registry_age > 1.0,
        "the registry row was {registry_age} s old during the hog: the pool was not exhausted"
    );
    let starved: Vec<String> = log_lines(
        &agent,
        &[CLAIM_FAILED, CLAIM_TIMED_OUT, "completion batch failed"],
    )
    .into_iter()
    .filter(|line| line.contains("pool timed out") || line.contains(CLAIM_TIMED_OUT))
    .collect();
    assert!(
        !starved.is_empty(),
        "nothing in agent {id} waited for a connection; end of its stderr:\n{}",
        agent.log_tail(40)
    );
    eprintln!(
        "t12: hogs {results:?}; registry row {registry_age:.1} s old during the hog; starved pool \
         users logged {} times; {report:?}",
        starved.len()
    );
    drop(agent);
    db.drop_db().await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// T16, T17

/// Starts agent `name` whose database connections go through `proxy` (its ledger log goes
/// straight to the database).
async fn spawn_proxied(db: &TestDb, proxy: &TcpProxy, name: &str, extra: &[&str]) -> AgentHandle {
    spawn_agent(
        "leasehold-test-agent",
        &proxy.url_for(&db.url),
        name,
        "ledger",
        extra,
        vec![("LEASEHOLD_TEST_LEDGER_URL".into(), db.url.clone())],
    )
    .await
    .unwrap()
}

/// Waits until `owner` holds `n` running leases and `n` executions are logged.
async fn wait_holding(pool: &PgPool, owner: &str, n: i64) {
    wait_until(
        &format!("{owner} runs {n} tasks"),
        Duration::from_secs(20),
        || {
            let pool = pool.clone();
            let owner = owner.to_string();
            async move { Ok(leases_held(&pool, &owner).await? == n && executions(&pool).await? >= n) }
        },
    )
    .await
    .unwrap();
}

/// `(task id, when)` of every execution the agent stopped at its local safety deadline, from
/// its log.
fn local_deadline_stops(agent: &AgentHandle) -> Vec<(i64, DateTime<Utc>)> {
    log_lines(agent, &[LOCAL_DEADLINE])
        .iter()
        .map(|line| {
            let at = line.split_whitespace().next().unwrap().parse().unwrap();
            let id = line.split("task.id=").nth(1).unwrap();
            let id = id.split_whitespace().next().unwrap().parse().unwrap();
            (id, at)
        })
        .collect()
}

/// T16: the network between an agent and PostgreSQL resets every connection for ~500 ms,
/// far less than the TTL: the agent reconnects, no lease is revoked, every task finishes on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t16_reset_connections_shorter_than_the_ttl_cause_no_false_revocation() {
    let db = TestDb::new().await.unwrap();
    ledger::install(&db.pool).await.unwrap();
    let proxy = TcpProxy::start(addr_of_url(&db.url).await.unwrap())
        .await
        .unwrap();
    let agent = spawn_proxied(&db, &proxy, "t16", &["--concurrency", "5"]).await;
    let id = agent
        .wait_registered(&db.pool, "t16", Duration::from_secs(20))
        .await
        .unwrap();
    ledger::enqueue(&db.pool, "ledger", 5, json!({"ms": 3000}))
        .await
        .unwrap();
    wait_holding(&db.pool, &id, 5).await;

    let before: Vec<i32> = backends(&db.pool, db.name(), "leasehold-agent t16")
        .await
        .unwrap()
        .iter()
        .map(|b| b.pid)
        .collect();
    assert!(!before.is_empty() && proxy.connections() > 0);
    let accepted_before = proxy.accepted();
    proxy.set_mode(ProxyMode::Reset);
    tokio::time::sleep(Duration::from_millis(500)).await;
    proxy.set_mode(ProxyMode::Pass);

    wait_succeeded(
        &db.pool,
        5,
        Duration::from_secs(3) + TTL + GRACE + SLACK * 2,
    )
    .await;
    let report = ledger::expect_all_succeeded(&db.pool).await.unwrap();
    assert_eq!(report.succeeded, 5, "{report:?}");
    assert_eq!(report.lease_expired_attempts, 0, "{report:?}");
    assert_eq!(report.executions, 5, "a task ran twice: {report:?}");
    assert_eq!(report.extra_executions, 0, "{report:?}");
    let on_agent: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM tasks WHERE status = 'succeeded' AND lease_owner = $1 AND lease_epoch = 1",
    )
    .bind(&id)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        on_agent, 5,
        "every task completes on the agent, in its first lease"
    );
    let stopped: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM test_executions WHERE outcome IS DISTINCT FROM 'returned'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(stopped, 0, "an execution was stopped");

    // Positive control: every connection the agent had was cut, and it reconnected.
    assert!(
        proxy.accepted() > accepted_before,
        "the agent opened no new connection after the reset"
    );
    wait_until(
        "the agent's pre-reset backends are gone",
        Duration::from_secs(10),
        || {
            let pool = db.pool.clone();
            let datname = db.name().to_string();
            let before = before.clone();
            async move {
                let now = backends(&pool, &datname, "leasehold-agent t16").await?;
                Ok(!now.iter().any(|b| before.contains(&b.pid)))
            }
        },
    )
    .await
    .unwrap();
    let failures = log_lines(&agent, &[RENEWAL_FAILED_LOG]);
    eprintln!(
        "t16: {} new connections after the reset, {} failed renewals logged; {report:?}",
        proxy.accepted() - accepted_before,
        failures.len()
    );
    drop(agent);
    drop(proxy);
    db.drop_db().await.unwrap();
}

/// T16/T17: an agent's connections turn half-open (blackhole) past the TTL: its executions
/// stop at its local safety deadline, before their leases are taken; another agent takes the
/// tasks over after TTL + grace and completes them; once the network is back the first agent
/// carries on by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t17_blackholed_connections_past_the_ttl_stop_executions_and_tasks_move() {
    let db = TestDb::new().await.unwrap();
    ledger::install(&db.pool).await.unwrap();
    let proxy = TcpProxy::start(addr_of_url(&db.url).await.unwrap())
        .await
        .unwrap();
    let mut a = spawn_proxied(&db, &proxy, "t17-a", &["--concurrency", "5"]).await;
    let a_id = a
        .wait_registered(&db.pool, "t17-a", Duration::from_secs(20))
        .await
        .unwrap();
    let first = ledger::enqueue(&db.pool, "ledger", 5, json!({"ms": 30_000}))
        .await
        .unwrap();
    wait_holding(&db.pool, &a_id, 5).await;
    // Short tasks from now on: whoever takes them over finishes quickly.
    shorten_tasks(&db.pool).await.unwrap();
    let mut b = spawn_test_agent(&db.url, "t17-b", "ledger", &["--concurrency", "5"])
        .await
        .unwrap();
    let b_id = b
        .wait_registered(&db.pool, "t17-b", Duration::from_secs(20))
        .await
        .unwrap();

    let blackholed_at = db_now(&db.pool).await.unwrap();
    proxy.set_mode(ProxyMode::Blackhole);
    let started = Instant::now();
    // The leases as A last renewed them: no renewal lands once the network is cut (one
    // already inside PostgreSQL ends within its 400 ms statement timeout), and recovery
    // waits for lease_until + grace.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let leased_until: Vec<(i64, DateTime<Utc>)> = sqlx::query_as(
        "SELECT id, lease_until FROM tasks WHERE lease_owner = $1 AND status = 'running' \
         AND lease_epoch = 1 ORDER BY id",
    )
    .bind(&a_id)
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(leased_until.len(), 5, "{leased_until:?}");
    // A stops its executions by itself, within the TTL. A lost lease drops the execution at
    // once (the ledger handler gets no chance to log its end), so A's log says when.
    wait_until("A stops its executions", TTL + SLACK, || {
        let stops = local_deadline_stops(&a).len();
        async move { Ok(stops >= 5) }
    })
    .await
    .unwrap_or_else(|e| panic!("{e:#}; A's stderr:\n{}", a.log_tail(40)));
    let stopped_after = started.elapsed();
    // B takes the tasks over after TTL + grace and completes them.
    wait_succeeded(
        &db.pool,
        5,
        TTL + GRACE + POLL * 2 + SLACK + Duration::from_secs(5),
    )
    .await;
    let moved_after = started.elapsed();

    let report = ledger::expect_all_succeeded(&db.pool).await.unwrap();
    assert_eq!(report.succeeded, 5, "{report:?}");
    assert_eq!(report.lease_expired_attempts, 5, "{report:?}");
    let by_b: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM tasks WHERE id = ANY($1) AND status = 'succeeded' AND lease_owner = $2",
    )
    .bind(&first)
    .bind(&b_id)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(by_b, 5, "B completes every task A lost");
    // Each of A's executions stopped within the TTL of the blackhole, before recovery took
    // its lease (the lease_expired attempt) and before B started the task. Log and database
    // timestamps come from the same host clock.
    let stops = local_deadline_stops(&a);
    let mut stopped_ids: Vec<i64> = stops.iter().map(|(id, _)| *id).collect();
    stopped_ids.sort_unstable();
    assert_eq!(stopped_ids, first, "A's stderr:\n{}", a.log_tail(40));
    for (id, stopped_at) in &stops {
        let (recovered_at, taken_over_at): (DateTime<Utc>, DateTime<Utc>) = sqlx::query_as(
            "SELECT a.finished_at, \
                    (SELECT min(e.started_at) FROM test_executions e \
                     WHERE e.task_id = a.task_id AND e.epoch > a.epoch) \
             FROM task_attempts a \
             WHERE a.task_id = $1 AND a.agent = $2 AND a.outcome = 'lease_expired'",
        )
        .bind(id)
        .bind(&a_id)
        .fetch_one(&db.pool)
        .await
        .unwrap();
        assert!(
            *stopped_at < recovered_at && *stopped_at < taken_over_at,
            "task {id}: A stopped it at {stopped_at}, its lease was recovered at \
             {recovered_at} and B started it at {taken_over_at}"
        );
        // The local safety deadline comes before the lease's expiry in the database.
        let (_, lease_until) = leased_until.iter().find(|(t, _)| t == id).unwrap();
        assert!(
            stopped_at < lease_until,
            "task {id}: A stopped it at {stopped_at}, after its lease expired at {lease_until} \
             (network cut at {blackholed_at})"
        );
    }
    // Positive control: recovery took every one of A's leases.
    let expired_of_a: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM task_attempts WHERE agent = $1 AND outcome = 'lease_expired'",
    )
    .bind(&a_id)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(expired_of_a, 5);

    // The network comes back: A carries on by itself once B is gone.
    let log_len_before_pass = a.stderr_text().unwrap().len();
    let passed_at = db_now(&db.pool).await.unwrap();
    proxy.set_mode(ProxyMode::Pass);
    // A's registry row beats again and shows nothing executing: the 30 s executions it
    // started a few seconds ago really ended.
    wait_until(
        "A reports no execution after the network is back",
        Duration::from_secs(15),
        || {
            let pool = db.pool.clone();
            let a_id = a_id.clone();
            async move {
                let (beat, active): (DateTime<Utc>, i32) =
                    sqlx::query_as("SELECT heartbeat_at, active FROM agents WHERE id = $1")
                        .bind(&a_id)
                        .fetch_one(&pool)
                        .await?;
                Ok(beat > passed_at && active == 0)
            }
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e:#}; A's stderr:\n{}", a.log_tail(40)));
    b.sigterm().unwrap();
    b.wait_exit(Duration::from_secs(15)).await.unwrap();
    let second = ledger::enqueue(&db.pool, "ledger", 5, json!({"ms": 10}))
        .await
        .unwrap();
    wait_until("A completes the new tasks", Duration::from_secs(30), || {
        let pool = db.pool.clone();
        let second = second.clone();
        let a_id = a_id.clone();
        async move {
            let done: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM tasks WHERE id = ANY($1) AND status = 'succeeded' \
                     AND lease_owner = $2",
            )
            .bind(&second)
            .bind(&a_id)
            .fetch_one(&pool)
            .await?;
            Ok(done == 5)
        }
    })
    .await
    .unwrap_or_else(|e| panic!("{e:#}; A's stderr:\n{}", a.log_tail(40)));
    assert!(a.is_running(), "A exited:\n{}", a.log_tail(40));
    let report = ledger::expect_all_succeeded(&db.pool).await.unwrap();
    assert_eq!(report.succeeded, 10, "{report:?}");
    let after_pass = a.stderr_text().unwrap()[log_len_before_pass..].to_string();
    eprintln!(
        "t17: A stopped its executions {stopped_after:?} and B completed them {moved_after:?} \
         after the blackhole; {report:?}; A's log after the network came back:\n{after_pass}"
    );
    drop(a);
    drop(proxy);
    db.drop_db().await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// T19

/// How long after its creation a task's claim started, in database time.
async fn pickup_latency(pool: &PgPool, id: i64) -> Duration {
    let secs: f64 = sqlx::query_scalar(
        "SELECT extract(epoch FROM started_at - created_at)::float8 FROM tasks WHERE id = $1",
    )
    .bind(id)
    .fetch_one(pool)
    .await
    .unwrap();
    Duration::from_secs_f64(secs.max(0.0))
}

/// T19: the agent's LISTEN connection is terminated: an enqueue is still picked up (the
/// notifier re-subscribes and follows up with a claim), the LISTEN comes back on a new
/// backend, and NOTIFY works again.
///
/// The agent polls only every 30 s here, so a pickup within a few seconds can only come from
/// a wake-up (NOTIFY, or the claim that follows a re-subscription), never from the poll.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t19_listen_connection_lost_pickup_falls_back_to_polling_and_resubscribes() {
    const POLL_LONG: Duration = Duration::from_secs(30);
    const QUICK: Duration = Duration::from_secs(5);
    let db = TestDb::new().await.unwrap();
    ledger::install(&db.pool).await.unwrap();
    let agent = spawn_test_agent(&db.url, "t19", "ledger", &["--poll-interval", "30s"])
        .await
        .unwrap();
    agent
        .wait_registered(&db.pool, "t19", Duration::from_secs(20))
        .await
        .unwrap();
    let listen = Mutex::new(Vec::new());
    wait_until("the agent listens", Duration::from_secs(10), || {
        let pool = db.pool.clone();
        let datname = db.name().to_string();
        let listen = &listen;
        async move {
            let found = listen_backends(&pool, &datname, "t19").await?;
            let one = found.len() == 1;
            *listen.lock().unwrap() = found;
            Ok(one)
        }
    })
    .await
    .unwrap();
    let old_pid = listen.into_inner().unwrap()[0];

    // Baseline: with LISTEN up, an enqueue is picked up at once, not at the next poll.
    let t1 = ledger::enqueue(&db.pool, "ledger", 1, json!({"ms": 10}))
        .await
        .unwrap()[0];
    wait_succeeded(&db.pool, 1, QUICK + SLACK).await;
    let baseline = pickup_latency(&db.pool, t1).await;
    assert!(baseline < QUICK, "baseline pickup took {baseline:?}");

    // The LISTEN backend dies; a task enqueued right away is still picked up.
    assert!(terminate(&db.pool, old_pid).await.unwrap());
    let t2 = ledger::enqueue(&db.pool, "ledger", 1, json!({"ms": 10}))
        .await
        .unwrap()[0];
    wait_succeeded(&db.pool, 2, POLL_LONG + SLACK).await;
    let after_loss = pickup_latency(&db.pool, t2).await;
    assert!(
        after_loss < QUICK,
        "pickup after the LISTEN connection was lost took {after_loss:?}"
    );

    // The agent re-subscribes on a new backend…
    let new_pid = Mutex::new(None);
    wait_until("a new LISTEN backend", Duration::from_secs(10), || {
        let pool = db.pool.clone();
        let datname = db.name().to_string();
        let new_pid = &new_pid;
        async move {
            let now = listen_backends(&pool, &datname, "t19").await?;
            let found = now.into_iter().find(|pid| *pid != old_pid);
            *new_pid.lock().unwrap() = found;
            Ok(found.is_some())
        }
    })
    .await
    .unwrap();
    let new_pid = new_pid.into_inner().unwrap();
    // …and NOTIFY works on it: the claimer last claimed when task 2 finished, so its next
    // poll is ~30 s away; only a notification can wake it sooner.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let t3 = ledger::enqueue(&db.pool, "ledger", 1, json!({"ms": 10}))
        .await
        .unwrap()[0];
    wait_succeeded(&db.pool, 3, POLL_LONG + SLACK).await;
    let resubscribed = pickup_latency(&db.pool, t3).await;
    assert!(
        resubscribed < QUICK,
        "pickup after re-subscribing took {resubscribed:?}: no NOTIFY?"
    );

    let report = ledger::expect_all_succeeded(&db.pool).await.unwrap();
    assert_eq!(report.succeeded, 3, "{report:?}");
    assert_eq!(report.executions, 3, "{report:?}");
    // Positive control: the LISTEN backend was replaced, and the agent noticed.
    let new_pid = new_pid.unwrap();
    assert_ne!(new_pid, old_pid);
    let noticed = log_lines(&agent, &["LISTEN connection lost", "LISTEN failed"]);
    assert!(
        !noticed.is_empty(),
        "the agent did not log the lost LISTEN connection:\n{}",
        agent.log_tail(40)
    );
    eprintln!(
        "t19: LISTEN backend {old_pid} → {new_pid}; pickups {baseline:?} (baseline), \
         {after_loss:?} (LISTEN lost), {resubscribed:?} (re-subscribed); {}",
        noticed.join(" | ")
    );
    drop(agent);
    db.drop_db().await.unwrap();
}

/// T14: an exclusive lock on `tasks` held for less than the TTL. Renewals time out (their own
/// statement timeout) instead of hanging, nothing crashes, and once the lock goes the agent
/// renews and finishes every task itself: no takeover caused by the lock alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t14_an_exclusive_lock_on_tasks_times_out_without_takeover() {
    let db = TestDb::new().await.unwrap();
    ledger::install(&db.pool).await.unwrap();
    // A 4 s lease (not the fleet's 2 s): the lock below outlasts several renewals but ends
    // before the local safety deadline (the last renewal that landed, at most 400 ms before the
    // lock, + TTL − margin 800 ms: at least 2.8 s after the lock starts). A lock past that
    // deadline rightly makes the agent stop the tasks it can no longer prove it holds.
    let mut agent = spawn_test_agent(
        &db.url,
        "locked",
        "ledger",
        &["--concurrency", "5", "--lease-ttl", "4s"],
    )
    .await
    .unwrap();
    let id = leasehold_tests::wait_registered(&db.pool, "locked", Duration::from_secs(20))
        .await
        .unwrap();
    ledger::enqueue(&db.pool, "ledger", 5, json!({"ms": 3500}))
        .await
        .unwrap();
    wait_holding(&db.pool, &id, 5).await;
    // Hold the lock for 2 s: renewals (every 400 ms, each timing out after 400 ms) fail
    // meanwhile.
    let mut tx = db.pool.begin().await.unwrap();
    sqlx::query("LOCK TABLE tasks IN ACCESS EXCLUSIVE MODE")
        .execute(&mut *tx)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(2000)).await;
    tx.commit().await.unwrap();
    wait_succeeded(&db.pool, 5, Duration::from_secs(30)).await;
    let report = ledger::expect_all_succeeded(&db.pool).await.unwrap();
    assert_eq!(report.lease_expired_attempts, 0, "{report:?}");
    assert_eq!(report.executions, 5, "one execution each: {report:?}");
    let owners: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM tasks WHERE lease_owner = $1 AND status = 'succeeded'",
    )
    .bind(&id)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(owners, 5, "the locked agent finished its own tasks");
    // Positive control: the lock really stopped renewals for a while.
    assert!(
        !log_lines(&agent, &[RENEWAL_FAILED_LOG]).is_empty(),
        "no renewal failed during the lock:\n{}",
        agent.log_tail(40)
    );
    assert!(agent.is_running());
    db.drop_db().await.unwrap();
}
