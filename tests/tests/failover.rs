#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! A failover under load (issue 25): a primary with a synchronous streaming standby
//! (`pg_basebackup -R`, `synchronous_standby_names`), two agents given both servers in one URL
//! (`postgres://h1,h2/db?target_session_attrs=read-write`), 600 ledger tasks running when the
//! primary is stopped with `-m immediate` and the standby promoted (`pg_ctl promote`). The
//! agents find the new primary without a restart and finish the work there: every completion
//! acknowledged before the crash is on the new primary, every task ran to success, no epoch ran
//! twice (the ledger), and work resumed within the lease TTL plus grace. A second run gives
//! the standby a clock ten minutes ahead: the step the promote brings revokes no lease.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use leasehold_tests::cluster::test_pool;
use leasehold_tests::faketime::FakeClock;
use leasehold_tests::fleet::spawn_agent;
use leasehold_tests::{PgCluster, TestDb, ledger, wait_until};
use serde_json::json;
use sqlx::PgPool;

const TASKS: usize = 600;
const TTL: Duration = Duration::from_secs(10);
const GRACE: Duration = Duration::from_secs(2);
/// What an agent logs when it sees the database clock step forward.
const JUMP_SEEN: &str = "database clock jumped forward";

async fn succeeded_ids(pool: &PgPool) -> anyhow::Result<Vec<i64>> {
    Ok(
        sqlx::query_scalar("SELECT id FROM tasks WHERE status = 'succeeded' ORDER BY id")
            .fetch_all(pool)
            .await?,
    )
}

/// What one failover run saw.
struct Seen {
    report: ledger::LedgerReport,
    /// `lease_expired` attempts of an epoch that ran (a lease revoked from a running task); the
    /// others are claims that committed in the instant of the crash and never reached their
    /// agent, recovered after the TTL.
    revoked_while_running: i64,
    logs: Vec<String>,
}

/// The scenario of the module doc, with tasks of `task_ms`; `standby_clock_ahead` (seconds)
/// runs the standby on a clock of its own that far ahead of the primary's (libfaketime), so
/// the promote steps the database clock.
async fn failover_under_load(task_ms: u64, standby_clock_ahead: Option<i64>) -> Seen {
    let mut primary = PgCluster::start().await.unwrap();
    let (_, setup) = primary
        .migrated_database_pool("leasehold_failover")
        .await
        .unwrap();
    ledger::install(&setup).await.unwrap();
    setup.close().await;
    let clock = standby_clock_ahead.map(|_| FakeClock::new().unwrap());
    let standby = match &clock {
        Some(clock) => primary.standby_with_env(clock.env()).await.unwrap(),
        None => primary.standby().await.unwrap(),
    };
    if let (Some(clock), Some(ahead)) = (&clock, standby_clock_ahead) {
        clock.set_offset(ahead).unwrap();
    }
    primary
        .admin_execute("ALTER SYSTEM SET synchronous_standby_names = '*'")
        .await
        .unwrap();
    primary
        .admin_execute("SELECT pg_reload_conf()")
        .await
        .unwrap();
    let primary_pool = test_pool(&primary.url("leasehold_failover")).await.unwrap();
    wait_until(
        "the standby streams synchronously",
        Duration::from_secs(30),
        || {
            let pool = primary_pool.clone();
            async move {
                let n: i64 = sqlx::query_scalar(
                    "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'",
                )
                .fetch_one(&pool)
                .await?;
                Ok(n == 1)
            }
        },
    )
    .await
    .unwrap();

    let log_db = TestDb::new().await.unwrap();
    ledger::install(&log_db.pool).await.unwrap();
    let url = format!(
        "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/leasehold_failover?target_session_attrs=read-write",
        primary.port(),
        standby.port()
    );
    let ttl = format!("{}s", TTL.as_secs());
    let grace = format!("{}s", GRACE.as_secs());
    let mut agents = Vec::new();
    for name in ["fo-a", "fo-b"] {
        let agent = spawn_agent(
            "leasehold-test-agent",
            &url,
            name,
            "ledger",
            &[
                "--concurrency",
                "16",
                "--lease-ttl",
                &ttl,
                "--heartbeat",
                "1s",
                "--grace",
                &grace,
            ],
            vec![("LEASEHOLD_TEST_LEDGER_URL".into(), log_db.url.clone())],
        )
        .await
        .unwrap();
        agent
            .wait_registered(&primary_pool, name, Duration::from_secs(30))
            .await
            .unwrap();
        agents.push(agent);
    }

    ledger::enqueue(&primary_pool, "ledger", TASKS, json!({ "ms": task_ms }))
        .await
        .unwrap();
    wait_until("150 tasks succeeded", Duration::from_secs(60), || {
        let pool = primary_pool.clone();
        async move { Ok(succeeded_ids(&pool).await?.len() >= 150) }
    })
    .await
    .unwrap();
    // Acknowledged before the crash (committed, so also on the synchronous standby).
    let before: HashSet<i64> = succeeded_ids(&primary_pool)
        .await
        .unwrap()
        .into_iter()
        .collect();
    primary.stop_immediate().await.unwrap();
    primary_pool.close().await;
    standby.promote().await.unwrap();
    let promoted = Instant::now();

    let pool = test_pool(&standby.url("leasehold_failover")).await.unwrap();
    // The new primary's clock (ahead of the old one's when the standby's clock is).
    let promoted_at: DateTime<Utc> = sqlx::query_scalar("SELECT clock_timestamp()")
        .fetch_one(&pool)
        .await
        .unwrap();
    let after: HashSet<i64> = succeeded_ids(&pool).await.unwrap().into_iter().collect();
    let lost: Vec<&i64> = before.difference(&after).collect();
    assert!(
        lost.is_empty(),
        "{} completions acknowledged before the crash are not on the new primary: {lost:?}",
        lost.len()
    );
    assert!(before.len() < TASKS, "the crash came after the work ended");

    // Work resumes on the new primary, within the TTL plus grace.
    wait_until("a completion on the new primary", TTL + GRACE, || {
        let pool = pool.clone();
        async move {
            let n: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM tasks WHERE status = 'succeeded' AND finished_at > $1",
            )
            .bind(promoted_at)
            .fetch_one(&pool)
            .await?;
            Ok(n > 0)
        }
    })
    .await
    .unwrap_or_else(|e| panic!("{e:#}\n{}", agents[0].log_tail(40)));
    let resumed = promoted.elapsed();
    wait_until("every task succeeded", Duration::from_secs(120), || {
        let pool = pool.clone();
        async move { Ok(succeeded_ids(&pool).await?.len() == TASKS) }
    })
    .await
    .unwrap_or_else(|e| panic!("{e:#}\n{}", agents[0].log_tail(40)));

    let copied = ledger::copy_executions(&log_db.pool, &pool).await.unwrap();
    let report = ledger::expect_all_succeeded(&pool).await.unwrap();
    let revoked_while_running: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM task_attempts a \
         WHERE a.outcome = 'lease_expired' AND EXISTS \
             (SELECT 1 FROM test_executions e WHERE e.task_id = a.task_id AND e.epoch = a.epoch)",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(report.succeeded, TASKS as u64, "{report:?}");
    assert!(copied >= TASKS, "{copied} executions logged");
    let mut logs = Vec::new();
    for agent in &mut agents {
        assert!(
            agent.is_running(),
            "{} exited:\n{}",
            agent.label(),
            agent.log_tail(30)
        );
        let log = agent.stderr_text().unwrap() + &agent.stdout_text().unwrap();
        assert!(
            log.contains("database failover"),
            "{} did not log the failover:\n{}",
            agent.label(),
            agent.log_tail(40)
        );
        logs.push(log);
    }
    eprintln!(
        "failover (tasks of {task_ms} ms, standby clock ahead {standby_clock_ahead:?} s): {} \
         acknowledged before the crash, resumed {resumed:?} after the promote; {report:?}",
        before.len()
    );
    drop(agents);
    pool.close().await;
    drop(standby);
    drop(primary);
    log_db.drop_db().await.unwrap();
    Seen {
        report,
        revoked_while_running,
        logs,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_follow_a_failover_to_a_synchronous_standby_and_lose_nothing() {
    let seen = failover_under_load(40, None).await;
    // Every task ran once. A claim that committed in the instant of the crash (on the
    // standby too, but never acknowledged to its agent) is recovered after the TTL and run
    // then: a `lease_expired` attempt with no execution, not a second run.
    assert_eq!(seen.report.executions, TASKS as u64, "{:?}", seen.report);
    assert_eq!(seen.report.extra_executions, 0, "{:?}", seen.report);
}

/// A new primary whose clock is ten minutes ahead: every lease looks expired by its clock, but
/// the agents see the database clock step and hold recovery while their heartbeats renew the
/// leases at the new time — no lease is revoked and nothing runs twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_primary_with_a_clock_ten_minutes_ahead_revokes_no_lease() {
    let seen = failover_under_load(1_500, Some(600)).await;
    // A claim that committed in the instant of the crash and never reached its agent is
    // recovered after the TTL, as in the test above (a `lease_expired` attempt of an epoch that
    // never ran); no lease of a task that was running is revoked.
    assert_eq!(seen.revoked_while_running, 0, "{:?}", seen.report);
    assert_eq!(
        seen.report.extra_executions, 0,
        "a task ran again: {:?}",
        seen.report
    );
    assert!(
        seen.logs.iter().any(|l| l.contains(JUMP_SEEN)),
        "no agent saw the clock step"
    );
}
