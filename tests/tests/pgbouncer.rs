#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Agents behind PgBouncer in transaction mode (issue 25), end to end: real agent processes,
//! a private PostgreSQL cluster and a private PgBouncer (see `leasehold_tests::pgbouncer`,
//! which sets no `ignore_startup_parameters`, as a stock installation).
//!
//! What is proven:
//! - 10,000 ledger tasks drain through PgBouncer (pool of 8) with three agents: every task ran
//!   once and succeeded, no epoch ran twice (the ledger); each agent says it found the pooler;
//!   the two without `--notify-database-url` say they poll, the one with it does not; and
//!   PgBouncer never held more server connections to the database than its pool size,
//!   counted on the upstream server every 200 ms.
//! - 50 agents (`--concurrency 2`, `--max-connections 2`) share a pool of 20 server
//!   connections: 2,000 tasks of 20–50 ms each ran once, every agent ran some and none more
//!   than three times the mean; the server connections stayed within 20 throughout.
//! - `LEASEHOLD_POOLER=transaction` forces pooler mode on a direct connection (the agent
//!   works and polls), while `auto` on a direct connection finds no pooler.
//! - `migrate` through PgBouncer with a migration pending is refused (exit 2, "direct
//!   connection": migrations hold a session-level advisory lock, which transaction pooling
//!   would hand to other clients) and changes nothing; on an up-to-date database it has
//!   nothing to do and says so (exit 0, schema unchanged).
//!
//! Each test has its own cluster, migrated directly (the cluster's own URL) before any agent
//! starts. The ledger handler's own connection (`LEASEHOLD_TEST_LEDGER_URL`) goes to the cluster
//! directly, over TCP, so it is not counted among PgBouncer's server connections (those come
//! over the cluster's unix socket).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use leasehold_tests::agent::AgentHandle;
use leasehold_tests::fleet::spawn_agent;
use leasehold_tests::pgbouncer::{ConnectionSampler, Samples};
use leasehold_tests::{PgBouncer, PgBouncerOptions, PgCluster, binary, ledger, wait_until};
use serde_json::json;
use sqlx::PgPool;

/// What an agent logs when it finds a connection pooler between it and the database.
const POOLER_SEEN: &str = "connection pooler in use";
/// What an agent behind a pooler without a direct LISTEN connection logs.
const POLLING: &str = "polling for new tasks every";
/// What `migrate` through a pooler says.
const MIGRATE_REFUSED: &str = "direct connection";
/// How often the connections PgBouncer holds are sampled.
const SAMPLE_EVERY: Duration = Duration::from_millis(200);
/// Lease timings of these tests: a pooler's queue must not be mistaken for a dead agent, and
/// the subject here is the pooler, not takeovers.
const LEASE_ARGS: [&str; 6] = ["--lease-ttl", "10s", "--heartbeat", "2s", "--grace", "2s"];

/// A private cluster with database `db` migrated directly and the ledger installed, and
/// PgBouncer in front of it with `options`: the cluster, PgBouncer and a direct pool.
async fn pooled_cluster(
    db: &str,
    settings: &[&str],
    options: PgBouncerOptions,
) -> (PgCluster, PgBouncer, PgPool) {
    let cluster = PgCluster::start_with(settings).await.unwrap();
    let (_, pool) = cluster.migrated_database_pool(db).await.unwrap();
    ledger::install(&pool).await.unwrap();
    let bouncer = PgBouncer::for_cluster(&cluster, options).await.unwrap();
    (cluster, bouncer, pool)
}

/// Spawns the test agent `name` on `url` (through PgBouncer) serving `ledger`, its ledger log
/// going to `ledger_url` directly.
async fn spawn_ledger_agent(
    url: &str,
    ledger_url: &str,
    name: &str,
    extra: &[&str],
) -> AgentHandle {
    let mut args: Vec<&str> = LEASE_ARGS.to_vec();
    args.extend_from_slice(extra);
    spawn_agent(
        "leasehold-test-agent",
        url,
        name,
        "ledger",
        &args,
        vec![("LEASEHOLD_TEST_LEDGER_URL".into(), ledger_url.to_string())],
    )
    .await
    .unwrap()
}

/// Everything `agent` wrote so far (stderr, then stdout).
fn agent_log(agent: &AgentHandle) -> String {
    agent.stderr_text().unwrap() + &agent.stdout_text().unwrap()
}

/// Waits up to `timeout` until `n` tasks succeeded, failing with the agents' log tails.
async fn wait_succeeded(pool: &PgPool, n: i64, timeout: Duration, agents: &[AgentHandle]) {
    let result = wait_until(&format!("{n} tasks succeeded"), timeout, || {
        let pool = pool.clone();
        async move {
            let done: i64 =
                sqlx::query_scalar("SELECT count(*) FROM tasks WHERE status = 'succeeded'")
                    .fetch_one(&pool)
                    .await?;
            Ok(done >= n)
        }
    })
    .await;
    if let Err(error) = result {
        let counts: Vec<(String, i64)> =
            sqlx::query_as("SELECT status, count(*) FROM tasks GROUP BY status ORDER BY status")
                .fetch_all(pool)
                .await
                .unwrap_or_default();
        let tails: Vec<String> = agents
            .iter()
            .take(3)
            .map(|a| format!("--- {}:\n{}", a.label(), a.log_tail(25)))
            .collect();
        panic!(
            "{error:#}\ntasks by status: {counts:?}\n{}",
            tails.join("\n")
        );
    }
}

/// Waits until `tasks` succeeded (enqueued at `start`), stops `sampler`, and checks that the
/// agents still run and that every task succeeded and ran exactly once (the ledger); prints
/// the samples under `label`.
async fn drained_once(
    pool: &PgPool,
    tasks: usize,
    start: Instant,
    sampler: ConnectionSampler,
    agents: &mut [AgentHandle],
    label: &str,
) -> (Samples, ledger::LedgerReport) {
    wait_succeeded(pool, tasks as i64, Duration::from_secs(120), agents).await;
    let elapsed = start.elapsed();
    let samples = sampler.finish().await.unwrap();
    expect_running(agents);
    let report = ledger::expect_all_succeeded(pool).await.unwrap();
    print_samples(label, &samples, elapsed);
    assert_eq!(report.succeeded, tasks as u64, "{report:?}");
    assert_eq!(
        report.executions, tasks as u64,
        "every task ran exactly once: {report:?}"
    );
    (samples, report)
}

/// Waits up to `timeout` until every agent of `agents` is registered as running (by name);
/// fails at once, quoting its log, when one of them exits first. Their ids by name.
async fn wait_all_registered(
    pool: &PgPool,
    agents: &mut [AgentHandle],
    names: &[String],
    timeout: Duration,
) -> HashMap<String, String> {
    let start = Instant::now();
    loop {
        let ids: HashMap<String, String> = sqlx::query_as::<_, (String, String)>(
            "SELECT name, id FROM agents WHERE state = 'running' AND name = ANY($1)",
        )
        .bind(names)
        .fetch_all(pool)
        .await
        .unwrap()
        .into_iter()
        .collect();
        if ids.len() == names.len() {
            return ids;
        }
        if let Some(agent) = agents
            .iter_mut()
            .find_map(|a| (!a.is_running()).then_some(a))
        {
            panic!(
                "{} exited before registering ({} of {} registered):\n{}",
                agent.label(),
                ids.len(),
                names.len(),
                agent.log_tail(15)
            );
        }
        assert!(
            start.elapsed() < timeout,
            "{} of {} agents registered within {timeout:?}; first agent's log:\n{}",
            ids.len(),
            names.len(),
            agents[0].log_tail(25)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Fails naming every agent that exited.
fn expect_running(agents: &mut [AgentHandle]) {
    for agent in agents.iter_mut() {
        assert!(
            agent.is_running(),
            "{} exited:\n{}",
            agent.label(),
            agent.log_tail(30)
        );
    }
}

fn print_samples(what: &str, samples: &Samples, elapsed: Duration) {
    println!(
        "{what}: drained in {elapsed:.1?}; {} samples: max server connections {} (upstream) / {} \
         (SHOW POOLS), max client connections {}, max clients waiting {}",
        samples.count,
        samples.max_upstream_servers,
        samples.max_pool_servers,
        samples.max_pool_clients,
        samples.max_pool_waiting
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_tasks_through_pgbouncer_transaction_mode() {
    const DB: &str = "leasehold_pgbouncer";
    const TASKS: usize = 10_000;
    const POOL: u32 = 8;
    let (cluster, bouncer, pool) = pooled_cluster(
        DB,
        &[],
        PgBouncerOptions {
            default_pool_size: POOL,
            ..PgBouncerOptions::default()
        },
    )
    .await;
    let pooled_url = bouncer.url(DB);
    let direct_url = cluster.url(DB);

    let sampler = ConnectionSampler::start(pool.clone(), bouncer.admin_url(), DB, SAMPLE_EVERY);
    let mut agents = Vec::new();
    let mut names = Vec::new();
    for (name, extra) in [
        ("pgb-a", vec![]),
        ("pgb-b", vec![]),
        (
            "pgb-notify",
            vec!["--notify-database-url", direct_url.as_str()],
        ),
    ] {
        // 64 at once, not the default 1000: the ledger handler's own pool has 4 connections,
        // and a thousand executions queueing on it measure the test agent, not the pooler.
        let mut args = vec!["--concurrency", "64"];
        args.extend(extra);
        agents.push(spawn_ledger_agent(&pooled_url, &direct_url, name, &args).await);
        names.push(name.to_string());
    }
    wait_all_registered(&pool, &mut agents, &names, Duration::from_secs(60)).await;

    let start = Instant::now();
    ledger::enqueue(&pool, "ledger", TASKS, json!({}))
        .await
        .unwrap();
    let (samples, report) = drained_once(
        &pool,
        TASKS,
        start,
        sampler,
        &mut agents,
        "10,000 tasks, three agents, pool of 8",
    )
    .await;
    println!("{report:?}");
    assert_eq!(report.successes_without_execution, 0, "{report:?}");

    for agent in &agents {
        let log = agent_log(agent);
        assert!(
            log.contains(POOLER_SEEN),
            "{} did not say it found the pooler ({POOLER_SEEN:?}):\n{}",
            agent.label(),
            agent.log_tail(30)
        );
    }
    for agent in &agents[..2] {
        assert!(
            agent_log(agent).contains(POLLING),
            "{} (no notify URL) did not say it polls ({POLLING:?}):\n{}",
            agent.label(),
            agent.log_tail(30)
        );
    }
    assert!(
        !agent_log(&agents[2]).contains(POLLING),
        "{} listens directly but says it polls:\n{}",
        agents[2].label(),
        agents[2].log_tail(30)
    );

    assert!(samples.count >= 3, "too few samples: {samples:?}");
    assert!(
        samples.max_upstream_servers >= 1,
        "no server connection of PgBouncer was ever seen: the count is blind ({samples:?})"
    );
    assert!(
        samples.max_upstream_servers <= i64::from(POOL)
            && samples.max_pool_servers <= u64::from(POOL),
        "PgBouncer held more than its pool of {POOL}: {samples:?}"
    );
    drop(agents);
    pool.close().await;
    drop(bouncer);
    drop(cluster);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_agents_through_pgbouncer() {
    const DB: &str = "leasehold_pgbouncer_fleet";
    const AGENTS: usize = 50;
    const POOL: u32 = 20;
    /// Tasks per batch, and each batch's work per task (ms): 2,000 tasks of 20–50 ms.
    const BATCHES: [(usize, u64); 4] = [(500, 20), (500, 30), (500, 40), (500, 50)];
    let tasks: usize = BATCHES.iter().map(|(n, _)| n).sum();
    // 50 ledger pools and LISTEN-less agents' direct connections besides PgBouncer's 20.
    let (cluster, bouncer, pool) = pooled_cluster(
        DB,
        &["max_connections=400"],
        PgBouncerOptions {
            default_pool_size: POOL,
            ..PgBouncerOptions::default()
        },
    )
    .await;
    let pooled_url = bouncer.url(DB);
    let direct_url = cluster.url(DB);
    // Resolve (and build, if need be) the binary once before spawning in a burst.
    binary("leasehold-test-agent").await.unwrap();

    let sampler = ConnectionSampler::start(pool.clone(), bouncer.admin_url(), DB, SAMPLE_EVERY);
    let spawned = Instant::now();
    let names: Vec<String> = (0..AGENTS).map(|i| format!("fleet-{i:02}")).collect();
    let mut agents = Vec::with_capacity(AGENTS);
    for name in &names {
        agents.push(
            spawn_ledger_agent(
                &pooled_url,
                &direct_url,
                name,
                &["--concurrency", "2", "--max-connections", "2"],
            )
            .await,
        );
    }
    let by_name = wait_all_registered(&pool, &mut agents, &names, Duration::from_secs(90)).await;
    let startup = spawned.elapsed();
    // Agent id → name.
    let ids: HashMap<String, String> = by_name.into_iter().map(|(name, id)| (id, name)).collect();
    assert_eq!(ids.len(), AGENTS);

    let start = Instant::now();
    for (n, ms) in BATCHES {
        ledger::enqueue(&pool, "ledger", n, json!({ "ms": ms }))
            .await
            .unwrap();
    }
    let (samples, report) = drained_once(
        &pool,
        tasks,
        start,
        sampler,
        &mut agents,
        "2,000 tasks, 50 agents, pool of 20",
    )
    .await;

    // Who ran what: the final holder of each succeeded task.
    let by_owner: HashMap<String, i64> = sqlx::query_as::<_, (String, i64)>(
        "SELECT lease_owner, count(*) FROM tasks WHERE status = 'succeeded' GROUP BY lease_owner",
    )
    .fetch_all(&pool)
    .await
    .unwrap()
    .into_iter()
    .collect();
    let per_agent: Vec<(String, i64)> = ids
        .iter()
        .map(|(id, name)| (name.clone(), by_owner.get(id).copied().unwrap_or(0)))
        .collect();
    let strangers: Vec<&String> = by_owner.keys().filter(|o| !ids.contains_key(*o)).collect();
    assert!(
        strangers.is_empty(),
        "tasks held by unknown owners: {strangers:?}"
    );
    let min = per_agent.iter().map(|(_, n)| *n).min().unwrap();
    let max = per_agent.iter().map(|(_, n)| *n).max().unwrap();
    let mean = tasks as f64 / AGENTS as f64;
    println!(
        "50 agents registered {startup:.1?} after the first spawn; tasks per agent: min {min}, \
         mean {mean:.1}, max {max}; {report:?}"
    );
    let idle: Vec<&String> = per_agent
        .iter()
        .filter(|(_, n)| *n == 0)
        .map(|(name, _)| name)
        .collect();
    assert!(idle.is_empty(), "agents that ran no task: {idle:?}");
    assert!(
        (max as f64) <= 3.0 * mean,
        "an agent ran {max} tasks, more than three times the mean {mean:.1}: {per_agent:?}"
    );
    assert!(
        samples.max_upstream_servers >= 1,
        "no server connection of PgBouncer was ever seen: the count is blind ({samples:?})"
    );
    assert!(
        samples.max_upstream_servers <= i64::from(POOL)
            && samples.max_pool_servers <= u64::from(POOL),
        "PgBouncer held more than its pool of {POOL}: {samples:?}"
    );

    // Stop them all now and check that none is left (drop would kill them as well).
    for agent in &agents {
        agent.sigterm().unwrap();
    }
    for agent in &mut agents {
        agent.wait_exit(Duration::from_secs(30)).await.unwrap();
    }
    drop(agents);
    pool.close().await;
    drop(bouncer);
    drop(cluster);
}

/// Runs `leasehold-agent migrate --database-url url` with no database variables in its
/// environment: exit code, stdout, stderr.
async fn migrate(url: &str) -> (i32, String, String) {
    let path = binary("leasehold-agent").await.unwrap();
    let out = tokio::time::timeout(
        Duration::from_secs(60),
        tokio::process::Command::new(path)
            .args(["migrate", "--database-url", url])
            .env_remove("RUST_LOG")
            .env_remove("DATABASE_URL")
            .env_remove("LEASEHOLD_DATABASE_URL")
            .env_remove("LEASEHOLD_POOLER")
            .output(),
    )
    .await
    .expect("migrate did not end within 60 s")
    .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The tables of the public schema and the applied migrations (version, checksum).
async fn schema(pool: &PgPool) -> (Vec<String>, Vec<(i64, Vec<u8>)>) {
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT table_name::text FROM information_schema.tables \
         WHERE table_schema = 'public' ORDER BY 1",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    let migrations = if tables.iter().any(|t| t == "_sqlx_migrations") {
        sqlx::query_as("SELECT version, checksum FROM _sqlx_migrations ORDER BY version")
            .fetch_all(pool)
            .await
            .unwrap()
    } else {
        Vec::new()
    };
    (tables, migrations)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_through_pgbouncer_is_refused() {
    let cluster = PgCluster::start().await.unwrap();
    cluster.create_database("leasehold_empty").await.unwrap();
    let (_, migrated) = cluster
        .migrated_database_pool("leasehold_migrated")
        .await
        .unwrap();
    let empty = leasehold_tests::cluster::test_pool(&cluster.url("leasehold_empty"))
        .await
        .unwrap();
    let bouncer = PgBouncer::for_cluster(&cluster, PgBouncerOptions::default())
        .await
        .unwrap();

    // An up-to-date database has nothing to migrate: said so, nothing locked or changed.
    let before = schema(&migrated).await;
    let (code, stdout, stderr) = migrate(&bouncer.url("leasehold_migrated")).await;
    assert_eq!(
        code, 0,
        "up-to-date migrate through PgBouncer:\n{stdout}{stderr}"
    );
    assert!(stdout.contains("up to date"), "{stdout}");
    assert_eq!(
        schema(&migrated).await,
        before,
        "the migrated schema changed"
    );

    // A pending migration is refused.
    for (db, pool) in [("leasehold_empty", &empty)] {
        let before = schema(pool).await;
        let (code, stdout, stderr) = migrate(&bouncer.url(db)).await;
        assert_eq!(
            code, 2,
            "migrate of {db} through PgBouncer: exit {code}\nstdout: {stdout}\nstderr: {stderr}"
        );
        assert!(
            stderr.contains(MIGRATE_REFUSED),
            "migrate of {db} through PgBouncer does not ask for a {MIGRATE_REFUSED:?}:\n{stderr}"
        );
        assert!(
            !stdout.contains("applied"),
            "migrate of {db} says it applied something:\n{stdout}"
        );
        assert_eq!(schema(pool).await, before, "the schema of {db} changed");
    }
    assert!(
        schema(&empty).await.0.is_empty(),
        "the empty database got tables"
    );

    // Control: the same command on the direct URL migrates.
    let (code, stdout, stderr) = migrate(&cluster.url("leasehold_empty")).await;
    assert_eq!(code, 0, "direct migrate failed:\n{stdout}{stderr}");
    assert!(
        !schema(&empty).await.1.is_empty(),
        "direct migrate applied nothing"
    );

    empty.close().await;
    migrated.close().await;
    drop(bouncer);
    drop(cluster);
}

/// `LEASEHOLD_POOLER=transaction` forces pooler mode on a direct connection: the statements
/// run as they would through PgBouncer and the agent polls (no notify URL given); an agent in
/// `auto` mode on the same direct connection finds no pooler (the detection's negative
/// control) and says neither thing. Together they drain the tasks cleanly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forced_pooler_mode_on_a_direct_connection() {
    const DB: &str = "leasehold_forced_pooler";
    const TASKS: usize = 1_000;
    let cluster = PgCluster::start().await.unwrap();
    let (url, pool) = cluster.migrated_database_pool(DB).await.unwrap();
    ledger::install(&pool).await.unwrap();

    let mut agents = Vec::new();
    let names: Vec<String> = vec!["forced".into(), "auto".into()];
    for (name, pooler) in [("forced", "transaction"), ("auto", "auto")] {
        let mut args: Vec<&str> = LEASE_ARGS.to_vec();
        args.extend(["--concurrency", "64"]);
        agents.push(
            spawn_agent(
                "leasehold-test-agent",
                &url,
                name,
                "ledger",
                &args,
                vec![
                    ("LEASEHOLD_TEST_LEDGER_URL".into(), url.clone()),
                    ("LEASEHOLD_POOLER".into(), pooler.into()),
                ],
            )
            .await
            .unwrap(),
        );
    }
    wait_all_registered(&pool, &mut agents, &names, Duration::from_secs(60)).await;
    ledger::enqueue(&pool, "ledger", TASKS, json!({}))
        .await
        .unwrap();
    wait_succeeded(&pool, TASKS as i64, Duration::from_secs(90), &agents).await;
    expect_running(&mut agents);
    let report = ledger::expect_all_succeeded(&pool).await.unwrap();
    assert_eq!(
        report.executions, TASKS as u64,
        "every task ran exactly once: {report:?}"
    );

    let forced = agent_log(&agents[0]);
    assert!(
        forced.contains(POLLING),
        "the agent forced into pooler mode does not say it polls:\n{}",
        agents[0].log_tail(30)
    );
    let auto = agent_log(&agents[1]);
    assert!(
        !auto.contains(POOLER_SEEN) && !auto.contains(POLLING),
        "the agent in auto mode took a direct connection for a pooler:\n{}",
        agents[1].log_tail(30)
    );
    drop(agents);
    pool.close().await;
    drop(cluster);
}

/// Wake-ups through PgBouncer: with `--notify-database-url` (a direct connection) an agent
/// that polls only every 30 s picks up a task enqueued while it is idle at once, by LISTEN;
/// the same agent without it (the positive control) leaves the task waiting for its poll.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wake_ups_come_over_the_notify_url_through_pgbouncer() {
    const DB: &str = "leasehold_pgbouncer_notify";
    let (cluster, bouncer, pool) = pooled_cluster(DB, &[], PgBouncerOptions::default()).await;
    let direct = cluster.url(DB);
    let through = bouncer.url(DB);
    for (name, notify) in [("listens", true), ("polls", false)] {
        let mut extra = vec!["--poll-interval", "30s"];
        if notify {
            extra.extend(["--notify-database-url", direct.as_str()]);
        }
        // A sentinel waiting before the agent starts: its first claim takes it, and a while
        // after it succeeded the agent is idle until a wake-up or its next poll, 30 s on.
        let before: i64 =
            sqlx::query_scalar("SELECT count(*) FROM tasks WHERE status = 'succeeded'")
                .fetch_one(&pool)
                .await
                .unwrap();
        ledger::enqueue(&pool, "ledger", 1, json!({}))
            .await
            .unwrap();
        let mut agents = vec![spawn_ledger_agent(&through, &direct, name, &extra).await];
        wait_all_registered(
            &pool,
            &mut agents,
            &[name.to_string()],
            Duration::from_secs(60),
        )
        .await;
        wait_succeeded(&pool, before + 1, Duration::from_secs(30), &agents).await;
        // And the claim a finished run frees capacity for: past it too.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let before = before + 1;
        ledger::enqueue(&pool, "ledger", 1, json!({}))
            .await
            .unwrap();
        let enqueued = Instant::now();
        let picked = wait_until("the task succeeded", Duration::from_secs(5), || {
            let pool = pool.clone();
            async move {
                let done: i64 =
                    sqlx::query_scalar("SELECT count(*) FROM tasks WHERE status = 'succeeded'")
                        .fetch_one(&pool)
                        .await?;
                Ok(done > before)
            }
        })
        .await;
        println!(
            "{name}: {}",
            match &picked {
                Ok(_) => format!("done {:?} after the enqueue", enqueued.elapsed()),
                Err(_) => "still waiting 5 s after the enqueue".to_string(),
            }
        );
        if notify {
            assert!(
                picked.is_ok(),
                "the agent with a notify URL did not pick the task up within 5 s:\n{}",
                agents[0].log_tail(30)
            );
        } else {
            assert!(
                picked.is_err(),
                "the agent without a notify URL picked the task up before its poll: the \
                 control proves nothing"
            );
            assert!(agent_log(&agents[0]).contains(POLLING));
        }
        expect_running(&mut agents);
        agents[0].sigterm().unwrap();
        agents[0].wait_exit(Duration::from_secs(30)).await.unwrap();
    }
    pool.close().await;
    drop(bouncer);
    drop(cluster);
}
