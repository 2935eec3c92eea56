//! What the fault scenarios of TESTING.md (T02, T05, T13, T18, T20) share: agents whose
//! database connections go through a [`TcpProxy`], counting lines of an agent's log, waiting
//! for every ledger task to finish, and [`Figures`], the line each scenario prints for the
//! README's Reliability table.
//!
//! The figures are counted straight from the database, independently of the ledger check
//! (which already fails on any of them being non-zero): lost tasks, duplicate executions and
//! accepted stale writes, next to what the fault caused (fenced writes, recoveries, executions
//! explained by a revoked epoch).

use std::time::Duration;

use anyhow::Context;
use chrono::{DateTime, Utc};
use sqlx::PgPool;

use crate::agent::AgentHandle;
use crate::db::TestDb;
use crate::fleet::{spawn_agent, spawn_test_agent};
use crate::inspect::count;
use crate::ledger::LedgerReport;
use crate::proxy::TcpProxy;
use crate::wait::wait_until;

/// What an agent logs for every holder write refused because the lease moved on.
pub const FENCED_LOG: &str = "write fenced: the lease had moved on";
/// What an agent logs when it stops an execution at its local safety deadline.
pub const LOCAL_DEADLINE_LOG: &str = "execution stopped at its local safety deadline";
/// What an agent logs when a renewal finds a lease gone.
pub const LEASE_LOST_LOG: &str = "lease lost at renewal";
/// What an agent logs when its lease renewal fails.
pub const RENEWAL_FAILED_LOG: &str = "lease renewal failed";
/// What an agent logs when a database call fails (one line per failure, each holding one of
/// these).
pub const DATABASE_FAILURE_LOGS: &[&str] = &[
    RENEWAL_FAILED_LOG,
    "claim failed",
    "claim timed out",
    "LISTEN connection lost",
    "LISTEN failed",
    "LISTEN connection did not answer a probe",
    "completion batch failed",
    "registry heartbeat failed",
    "leader renewal failed",
];

/// Spawns the test agent `name` with `handlers` whose database connections go through
/// `proxy`; its ledger log goes straight to `db_url`. `envs` are added to its environment.
pub async fn spawn_proxied(
    db_url: &str,
    proxy: &TcpProxy,
    name: &str,
    handlers: &str,
    extra: &[&str],
    envs: Vec<(String, String)>,
) -> anyhow::Result<AgentHandle> {
    let mut envs = envs;
    envs.push(("LEASEHOLD_TEST_LEDGER_URL".into(), db_url.to_string()));
    spawn_agent(
        "leasehold-test-agent",
        &proxy.url_for(db_url),
        name,
        handlers,
        extra,
        envs,
    )
    .await
}

/// Longest [`start_ledger_agent`] waits for the agent to register.
pub const REGISTER_WAIT: Duration = Duration::from_secs(20);

/// Starts the test agent `name` running `ledger` tasks `concurrency` at a time and waits until
/// this very process registered: the handle and its agent id.
pub async fn start_ledger_agent(
    db: &TestDb,
    name: &str,
    concurrency: u32,
) -> anyhow::Result<(AgentHandle, String)> {
    let concurrency = concurrency.to_string();
    let agent = spawn_test_agent(&db.url, name, "ledger", &["--concurrency", &concurrency]).await?;
    let id = agent.wait_registered(&db.pool, name, REGISTER_WAIT).await?;
    Ok((agent, id))
}

/// [`start_ledger_agent`] for each of `names`, one after the other: their handles.
pub async fn start_ledger_agents(
    db: &TestDb,
    names: &[&str],
    concurrency: u32,
) -> anyhow::Result<Vec<AgentHandle>> {
    let mut agents = Vec::new();
    for name in names {
        agents.push(start_ledger_agent(db, name, concurrency).await?.0);
    }
    Ok(agents)
}

/// [`start_ledger_agent`] named `rescuer`: the agent that takes a victim's tasks over.
pub async fn start_rescuer(db: &TestDb, concurrency: u32) -> anyhow::Result<(AgentHandle, String)> {
    start_ledger_agent(db, "rescuer", concurrency).await
}

/// Makes every task's work short (`"ms": 10` in its payload), so whoever runs it next
/// finishes quickly.
pub async fn shorten_tasks(pool: &PgPool) -> anyhow::Result<()> {
    sqlx::query("UPDATE tasks SET payload = payload || '{\"ms\": 10}'")
        .execute(pool)
        .await
        .context("shortening the tasks' work")?;
    Ok(())
}

/// Running tasks whose lease `owner` holds.
pub async fn leases_held(pool: &PgPool, owner: &str) -> anyhow::Result<i64> {
    sqlx::query_scalar("SELECT count(*) FROM tasks WHERE lease_owner = $1 AND status = 'running'")
        .bind(owner)
        .fetch_one(pool)
        .await
        .with_context(|| format!("counting the leases {owner} holds"))
}

/// Tasks in state `succeeded`, all types.
pub async fn succeeded_tasks(pool: &PgPool) -> anyhow::Result<i64> {
    count(
        pool,
        "SELECT count(*) FROM tasks WHERE status = 'succeeded'",
    )
    .await
}

/// Waits (`what`, for the error) until `n` tasks succeeded.
pub async fn wait_succeeded(
    pool: &PgPool,
    what: &str,
    n: i64,
    timeout: Duration,
) -> anyhow::Result<()> {
    wait_until(what, timeout, || async move {
        Ok(succeeded_tasks(pool).await? == n)
    })
    .await
}

/// Lines of the agent's stderr containing `needle` (0 while the log cannot be read).
pub fn log_count(agent: &AgentHandle, needle: &str) -> u64 {
    agent.stderr_text().map_or(0, |text| {
        text.lines().filter(|line| line.contains(needle)).count() as u64
    })
}

/// [`log_count`] summed over `agents`.
pub fn log_count_all<'a>(agents: impl IntoIterator<Item = &'a AgentHandle>, needle: &str) -> u64 {
    agents.into_iter().map(|a| log_count(a, needle)).sum()
}

/// The database's clock (lease times are database times, DESIGN §4).
pub async fn db_now(pool: &PgPool) -> anyhow::Result<DateTime<Utc>> {
    sqlx::query_scalar("SELECT clock_timestamp()")
        .fetch_one(pool)
        .await
        .context("reading the database clock")
}

/// Ledger tasks not yet terminal.
pub async fn unfinished_ledger_tasks(pool: &PgPool) -> anyhow::Result<i64> {
    sqlx::query_scalar(
        "SELECT count(*) FROM test_ledger l JOIN tasks t ON t.id = l.task_id \
         WHERE t.status NOT IN ('succeeded', 'partially_succeeded', 'cancelled', 'dead')",
    )
    .fetch_one(pool)
    .await
    .context("counting unfinished ledger tasks")
}

/// Waits until every ledger task is terminal.
pub async fn wait_ledger_done(pool: &PgPool, timeout: Duration) -> anyhow::Result<()> {
    wait_until("every ledger task is terminal", timeout, || async move {
        Ok(unfinished_ledger_tasks(pool).await? == 0)
    })
    .await
}

/// Attempt rows with outcome `lease_expired` (recoveries), all tasks.
pub async fn recoveries(pool: &PgPool) -> anyhow::Result<i64> {
    sqlx::query_scalar("SELECT count(*) FROM task_attempts WHERE outcome = 'lease_expired'")
        .fetch_one(pool)
        .await
        .context("counting recoveries")
}

/// One scenario's row of the README's Reliability table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Figures {
    /// The TESTING.md scenario id (`T05`).
    pub scenario: String,
    /// Ledger tasks.
    pub tasks: u64,
    /// Faults injected (pauses, crashes, cut replies, …), as the scenario counts them.
    pub faults: u64,
    /// Ledger tasks that did not succeed.
    pub lost: u64,
    /// Executions of an epoch beyond its first, plus accepted completions beyond one per task.
    pub duplicate_executions: u64,
    /// Accepted completions under an epoch other than the task's final one.
    pub stale_writes_accepted: u64,
    /// Holder writes the agents logged as fenced.
    pub fenced_writes: u64,
    /// Leases taken back by recovery (`lease_expired` attempts).
    pub recoveries: u64,
    /// Executions at an epoch that was not accepted (each explained by a revoked epoch).
    pub extra_executions: u64,
}

impl Figures {
    /// Counts the figures of scenario `scenario` from the database, after a clean `report`.
    pub async fn collect(
        pool: &PgPool,
        scenario: &str,
        report: &LedgerReport,
        faults: u64,
        fenced_writes: u64,
    ) -> anyhow::Result<Figures> {
        let (lost, duplicates, stale): (i64, i64, i64) = sqlx::query_as(
            "SELECT \
                 (SELECT count(*) FROM test_ledger l JOIN tasks t ON t.id = l.task_id \
                  WHERE t.status NOT IN ('succeeded', 'partially_succeeded')), \
                 (SELECT coalesce(sum(n - 1), 0)::bigint FROM \
                     (SELECT count(*) AS n FROM test_executions GROUP BY task_id, epoch) e) \
                 + (SELECT coalesce(sum(n - 1), 0)::bigint FROM \
                     (SELECT count(*) AS n FROM task_attempts a JOIN test_ledger l ON l.task_id = a.task_id \
                      WHERE a.outcome IN ('succeeded', 'partially_succeeded') GROUP BY a.task_id) c), \
                 (SELECT count(*) FROM task_attempts a JOIN tasks t ON t.id = a.task_id \
                  JOIN test_ledger l ON l.task_id = a.task_id \
                  WHERE a.outcome IN ('succeeded', 'partially_succeeded') AND a.epoch <> t.lease_epoch)",
        )
        .fetch_one(pool)
        .await
        .context("counting the reliability figures")?;
        let n = |v: i64| u64::try_from(v).context("negative count");
        Ok(Figures {
            scenario: scenario.to_string(),
            tasks: report.tasks,
            faults,
            lost: n(lost)?,
            duplicate_executions: n(duplicates)?,
            stale_writes_accepted: n(stale)?,
            fenced_writes,
            recoveries: report.lease_expired_attempts,
            extra_executions: report.extra_executions,
        })
    }

    /// Whether nothing was lost, run twice or accepted from a stale epoch.
    pub fn clean(&self) -> bool {
        self.lost == 0 && self.duplicate_executions == 0 && self.stale_writes_accepted == 0
    }

    /// The line printed for the Reliability table.
    pub fn line(&self) -> String {
        format!(
            "reliability {}: runs 1, tasks {}, faults injected {}, lost {}, duplicate executions {}, \
             stale writes accepted {}, fenced writes {}, recoveries {}, extra executions {} \
             (explained by revoked epochs)",
            self.scenario,
            self.tasks,
            self.faults,
            self.lost,
            self.duplicate_executions,
            self.stale_writes_accepted,
            self.fenced_writes,
            self.recoveries,
            self.extra_executions
        )
    }
}
