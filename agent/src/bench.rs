//! `leasehold-agent bench`: throughput, cost per task and pickup latency of the real runtime
//! on a real database.
//!
//! Phases, on tasks of a task type unique to this run (deleted at the end, so the bench can
//! share a database with real work without touching it):
//! 0. **backlog** (untimed, with `--backlog N`) — `N` more tasks of the same type, so the drain
//!    runs on a queue of `tasks + N`; on PostgreSQL then a CHECKPOINT, and another after the
//!    enqueue below: loading millions of rows in minutes starts a checkpoint by WAL volume, and
//!    an enqueue or a drain inside it measures the load's write-out, not the depth of the queue;
//!    the second starts the drain at a checkpoint at every depth (`checkpoint_after_backlog` in
//!    the report);
//! 1. **enqueue** — `tasks` no-op tasks in bulk statements of 10,000 → `enqueue_per_s`;
//! 2. **drain** — `agents` full agent runtimes (each with its own pool, heartbeat, completer and
//!    LISTEN connection, default settings unless `--concurrency`/`--batch` are given) run them
//!    with a no-op handler → `processed_per_s` (`tasks` / `drain_seconds`), from the agents'
//!    start until the `tasks`-th completion committed (by the agents' own counters). The agents
//!    are then stopped and, with a backlog, what is left of it deleted (untimed);
//! 3. **pickup** — fresh agents, idle on an empty queue; one task enqueued at a time; the
//!    latency is the task's `started_at − available_at` in database time → `pickup_p50_ms`,
//!    `pickup_p99_ms`.
//!
//! **Cost per task of the drain** (PostgreSQL only; `None`/null on SQLite), from the server's
//! counters ([`ServerCounters`]) read before the drain (after the enqueue and backlog, once the
//! connections that wrote them are closed: a backend flushes its statistics as it exits) and
//! after it:
//! - `wal_bytes_per_task`, `xids_per_task`, `statements_per_task`: read right after the
//!   `tasks`-th completion committed, divided by the completions counted then. WAL and
//!   transaction ids are **server-wide** (other databases, autovacuum and checkpoints' full-page
//!   images count too: run on a quiet server); statements are this database's, from
//!   `pg_stat_statements` (null when that view is absent or its library not loaded);
//! - `commits_per_task`: this database's `xact_commit`, which backends publish at most once a
//!   second while busy and up to 10 s late when idle, so it is read only once every connection
//!   of the drain's agents is gone (each flushed on exit), divided by all the completions of
//!   those agents. It therefore also counts their start and stop (registration, LISTEN, the
//!   last heartbeats, marking themselves stopped: a few commits per agent, negligible at the
//!   default 100,000 tasks) and, with a backlog, the tasks they finished while stopping, and
//!   the bench's own reads of the counters (±2).
//!
//! - `agent_cpu_us_per_task`: this process's CPU time (user + system, every thread:
//!   `getrusage`) from the agents' start to the `tasks`-th completion, per task counted then;
//! - `db_cpu_us_per_task`: the CPU time of the drain agents' backends over the same span (from
//!   `/proc/PID/schedstat`, so only when the server runs on this host and its processes are
//!   readable; a backend is recognised by its process name and the database in its title), per
//!   task. A backend that connected during the drain counts whole; one that exited is missed.
//!
//! None of this is inside the timed drain: the clock stops before the first reading.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use async_trait::async_trait;
use leasehold_shared::store::postgres::ServerCounters;
use leasehold_shared::store::{AnyStore, NewTask};
use leasehold_shared::{Store, TaskType};
use serde::Serialize;

use crate::handler::{Handler, HandlerError, HandlerRegistry, Outcome, TaskContext};
use crate::runtime::{Agent, AgentBuilder, AgentControl, RunSummary, RuntimeSettings, Shutdown};

/// Agents the bench runs unless told otherwise.
pub const DEFAULT_AGENTS: u32 = 1;
/// The largest `--backlog`.
pub const MAX_BACKLOG: u64 = 100_000_000;

/// Tasks per bulk enqueue statement.
const CHUNK: u64 = 10_000;
/// A large backlog reports its progress every this many tasks.
const PROGRESS_EVERY: u64 = 1_000_000;

/// Bench settings (the `bench` subcommand's flags).
#[derive(Debug, Clone)]
pub struct BenchConfig {
    pub database_url: String,
    pub tasks: u64,
    /// Tasks queued (untimed) before the timed phases, besides `tasks`.
    pub backlog: u64,
    pub agents: u32,
    pub concurrency: Option<u32>,
    pub batch: Option<u32>,
    pub latency_samples: u32,
    /// Where the agents LISTEN, for a `database_url` through a transaction pooler.
    pub notify_database_url: Option<String>,
}

/// What the bench prints. The `…_per_task` figures are the drain's (see the module's doc);
/// `None` (null) on SQLite.
#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    pub tasks: u64,
    pub backlog: u64,
    pub agents: u32,
    pub concurrency: u32,
    pub batch: u32,
    pub enqueue_per_s: f64,
    pub processed_per_s: f64,
    pub drain_seconds: f64,
    /// WAL bytes written per task, server-wide.
    pub wal_bytes_per_task: Option<f64>,
    /// Transaction ids taken per task, server-wide.
    pub xids_per_task: Option<f64>,
    /// Transactions committed in this database per task.
    pub commits_per_task: Option<f64>,
    /// Statements run in this database per task (needs `pg_stat_statements`).
    pub statements_per_task: Option<f64>,
    /// CPU time of this process (the agents, every thread) per task of the drain, µs.
    pub agent_cpu_us_per_task: Option<f64>,
    /// CPU time of the agents' PostgreSQL backends per task of the drain, µs; `None` unless the
    /// server runs on this host and its processes can be read.
    pub db_cpu_us_per_task: Option<f64>,
    pub pickup_p50_ms: f64,
    pub pickup_p99_ms: f64,
    pub pickup_samples: u32,
    /// Whether the bench ran a CHECKPOINT after loading `--backlog` and another before the
    /// drain (false: not allowed to); `None` (null) without a backlog and on SQLite.
    pub checkpoint_after_backlog: Option<bool>,
}

struct Noop;

#[async_trait]
impl Handler for Noop {
    type Payload = serde_json::Value;

    async fn run(
        &self,
        _ctx: TaskContext,
        _payload: serde_json::Value,
    ) -> Result<Outcome, HandlerError> {
        Ok(Outcome::done())
    }
}

/// `application_name`s of the bench's connections (PostgreSQL), so it can tell when they are
/// gone: its loader's, its own, and (a LIKE pattern) its agents'.
struct Names {
    loader: String,
    main: String,
    agents: String,
}

impl Names {
    fn new() -> Self {
        let pid = std::process::id();
        Self {
            loader: format!("leasehold-bench {pid} load"),
            main: format!("leasehold-bench {pid}"),
            // The agents name their connections `leasehold-agent <name>[ heartbeat]`.
            agents: format!("leasehold-agent bench-{pid}-%"),
        }
    }
}

/// Runs the bench and returns its report.
pub async fn run(config: &BenchConfig) -> Result<BenchReport> {
    anyhow::ensure!(config.tasks > 0, "--tasks must be above 0");
    anyhow::ensure!(
        config.backlog <= MAX_BACKLOG,
        "--backlog must be within 0..={MAX_BACKLOG}"
    );
    anyhow::ensure!(
        (1..=64).contains(&config.agents),
        "--agents must be within 1..=64"
    );
    let names = Names::new();
    // The enqueues run on a pool of their own, closed before the drain so that its backends'
    // statistics are in before the first reading.
    let loader = AnyStore::connect_named(&config.database_url, 4, &names.loader)
        .await
        .context("connecting to the database")?;
    loader.migrate().await.context("applying migrations")?;
    let main = AnyStore::connect_named(&config.database_url, 4, &names.main)
        .await
        .context("connecting to the database")?;
    // Unique to this run, and short: the name is stored in every row and leased-index entry.
    let task_type = TaskType::new(format!("bench.{:012x}", fastrand::u64(..) >> 16))?;
    let result = run_phases(config, &names, &loader, &main, &task_type).await;
    loader.close().await;
    let cleanup = main
        .delete_tasks_of_type(&task_type)
        .await
        .context("deleting bench tasks");
    main.close().await;
    let report = result?;
    cleanup?;
    Ok(report)
}

/// Enqueues `n` tasks in bulk statements; `backlog` reports progress on stderr.
async fn enqueue(store: &dyn Store, task_type: &TaskType, n: u64, backlog: bool) -> Result<()> {
    let what = if backlog { "backlog" } else { "enqueue" };
    let mut done = 0;
    while done < n {
        let chunk = (n - done).min(CHUNK);
        store
            .task_enqueue_many(
                (0..chunk)
                    .map(|_| NewTask::new(task_type.clone(), serde_json::json!({})))
                    .collect(),
            )
            .await
            .with_context(|| format!("bulk enqueue ({what})"))?;
        done += chunk;
        if backlog && done % PROGRESS_EVERY == 0 {
            eprintln!("backlog: {done} of {n} tasks enqueued");
        }
    }
    Ok(())
}

/// The server's counters once no connection named like `pattern` is left (each flushed its
/// statistics as it exited); `None` on SQLite. Behind a transaction pooler the server
/// connections stay open in the pooler's pool: the counters are read once an idle backend has
/// flushed its statistics (PostgreSQL does within [`IDLE_STATS_FLUSH`]).
async fn counters_when_gone(store: &AnyStore, pattern: &str) -> Result<Option<ServerCounters>> {
    if store.behind_pooler() {
        tokio::time::sleep(IDLE_STATS_FLUSH).await;
        return store
            .server_counters(pattern)
            .await
            .context("reading the server's counters");
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let Some(counters) = store
            .server_counters(pattern)
            .await
            .context("reading the server's counters")?
        else {
            return Ok(None);
        };
        if counters.backends == 0 {
            return Ok(Some(counters));
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "{} connection(s) named like '{pattern}' still open 10 s after they were closed",
            counters.backends
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// How long an idle PostgreSQL backend may keep its statistics before flushing them (10 s,
/// PGSTAT_IDLE_INTERVAL), and a margin.
const IDLE_STATS_FLUSH: Duration = Duration::from_secs(11);

/// Running bench agents.
struct Fleet {
    controls: Vec<AgentControl>,
    running: tokio::task::JoinSet<crate::error::Result<RunSummary>>,
    shutdown: Shutdown,
}

impl Fleet {
    /// Connects `config.agents` agents (not yet running).
    async fn connect(
        config: &BenchConfig,
        settings: &RuntimeSettings,
        task_type: &TaskType,
    ) -> Result<Vec<Agent>> {
        let mut agents = Vec::new();
        for n in 0..config.agents {
            let mut handlers = HandlerRegistry::new();
            handlers.register(task_type.clone(), Noop);
            let mut builder = AgentBuilder::new(
                RuntimeSettings {
                    name: format!("bench-{}-{n}", std::process::id()),
                    ..settings.clone()
                },
                handlers,
            );
            if let Some(url) = &config.notify_database_url {
                builder = builder.notify_database_url(url);
            }
            let agent = builder
                .connect(&config.database_url)
                .await
                .with_context(|| format!("starting bench agent {n}"))?;
            agents.push(agent);
        }
        Ok(agents)
    }

    fn run(agents: Vec<Agent>) -> Self {
        let controls = agents.iter().map(|a| a.control()).collect();
        let shutdown = Shutdown::default();
        let mut running = tokio::task::JoinSet::new();
        for agent in agents {
            running.spawn(agent.run(shutdown.clone()));
        }
        Self {
            controls,
            running,
            shutdown,
        }
    }

    /// Tasks the agents completed with success so far (their own counters: the bench adds no
    /// work per task to the runtime it measures).
    fn succeeded(&self) -> u64 {
        self.controls.iter().map(|c| c.summary().succeeded).sum()
    }

    /// Waits, looking every `step`, until the agents completed at least `tasks` with success;
    /// fails when an agent stops meanwhile or `within` passes first.
    async fn wait_succeeded(
        &mut self,
        tasks: u64,
        within: Option<Duration>,
        step: Duration,
    ) -> Result<()> {
        let waited = Instant::now();
        while self.succeeded() < tasks {
            if let Some(within) = within {
                anyhow::ensure!(
                    waited.elapsed() < within,
                    "the agents completed {} of {tasks} tasks within {within:?}",
                    self.succeeded()
                );
            }
            self.check()?;
            tokio::time::sleep(step).await;
        }
        Ok(())
    }

    /// Fails when an agent stopped (none should before it is told to).
    fn check(&mut self) -> Result<()> {
        if let Some(ended) = self.running.try_join_next() {
            ended.context("bench agent panicked")??;
            anyhow::bail!("a bench agent stopped before it was told to");
        }
        Ok(())
    }

    /// Stops the agents gracefully; returns the tasks they completed with success.
    async fn stop(mut self) -> Result<u64> {
        self.shutdown.graceful.cancel();
        while let Some(ended) = self.running.join_next().await {
            ended.context("bench agent panicked")??;
        }
        Ok(self.succeeded())
    }
}

/// After a backlog was loaded (PostgreSQL): a CHECKPOINT, so the timed phases do not run
/// inside the checkpoint that the load's WAL triggered, writing out gigabytes of the load while
/// every page they touch first pays a full-page image in the WAL. A steady queue of the same
/// depth has no such load behind it. Untimed; without the right to checkpoint (superuser or
/// `pg_checkpoint`) the bench says so and goes on. `Some(done)` on PostgreSQL, `None` on
/// SQLite.
async fn checkpoint(main: &AnyStore) -> Option<bool> {
    match main.server_checkpoint().await? {
        Ok(()) => Some(true),
        Err(error) => {
            eprintln!(
                "backlog: CHECKPOINT refused ({error}); the enqueue and the drain may run \
                 inside the checkpoint the load started"
            );
            Some(false)
        }
    }
}

async fn run_phases(
    config: &BenchConfig,
    names: &Names,
    loader: &AnyStore,
    main: &AnyStore,
    task_type: &TaskType,
) -> Result<BenchReport> {
    // 0. Backlog, untimed.
    let loading = loader.store();
    enqueue(loading.as_ref(), task_type, config.backlog, true).await?;
    let checkpoint_after_backlog = if config.backlog > 0 {
        checkpoint(main).await
    } else {
        None
    };
    // 1. Enqueue.
    let started = Instant::now();
    enqueue(loading.as_ref(), task_type, config.tasks, false).await?;
    let enqueue_per_s = config.tasks as f64 / started.elapsed().as_secs_f64();
    drop(loading);
    loader.close().await;
    // Again before the drain, so that at every depth the drain starts at a checkpoint and pays
    // the same full-page images (else the pages of a small queue, written by the enqueue since
    // the first, would be spared them and a deep queue's not).
    let checkpoint_after_backlog = match checkpoint_after_backlog {
        Some(true) => checkpoint(main).await,
        other => other,
    };
    let before = counters_when_gone(main, &names.loader).await?;

    // 2. Drain with real agents, until `tasks` completions committed.
    let mut settings = RuntimeSettings {
        unserved_after: None,
        ..RuntimeSettings::default()
    };
    if let Some(c) = config.concurrency {
        settings.concurrency = c;
    }
    if let Some(b) = config.batch {
        settings.claim_batch = b;
    }
    let agents = Fleet::connect(config, &settings, task_type).await?;
    let backends_before = main
        .server_counters(&names.agents)
        .await
        .context("reading the server's counters")?
        .and_then(|c| backends_cpu(&c));
    let cpu_before = own_cpu();
    let started = Instant::now();
    let mut fleet = Fleet::run(agents);
    fleet
        .wait_succeeded(config.tasks, None, Duration::from_millis(5))
        .await?;
    let drain_seconds = started.elapsed().as_secs_f64();
    let cpu_after = own_cpu();
    let processed_per_s = config.tasks as f64 / drain_seconds;
    let after = main
        .server_counters(&names.agents)
        .await
        .context("reading the server's counters")?;
    let backends_after = after.as_ref().and_then(backends_cpu);
    let counted = fleet.succeeded();
    let completed = fleet.stop().await?;
    let stopped = match before {
        Some(_) => counters_when_gone(main, &names.agents).await?,
        None => None,
    };
    if config.backlog > 0 {
        main.delete_tasks_of_type(task_type)
            .await
            .context("deleting the rest of the backlog")?;
    }
    let per_task =
        |field: fn(&ServerCounters) -> Option<i64>, to: &Option<ServerCounters>, tasks: u64| {
            let (before, to) = (field(before.as_ref()?)?, field(to.as_ref()?)?);
            Some((to - before) as f64 / tasks as f64)
        };
    let agent_cpu_us_per_task = match (cpu_before, cpu_after) {
        (Some(from), Some(to)) => {
            Some(to.saturating_sub(from).as_secs_f64() * 1e6 / counted as f64)
        }
        _ => None,
    };
    let db_cpu_us_per_task = backends_after.map(|to| {
        let from = backends_before.unwrap_or_default();
        let ns: u64 = to
            .iter()
            .map(|(pid, ns)| ns.saturating_sub(from.get(pid).copied().unwrap_or(0)))
            .sum();
        ns as f64 / 1e3 / counted as f64
    });

    // 3. Idle pickup: one task at a time, each finished before the next is enqueued; the
    // latency comes from the task row (database time), so how often we look does not matter.
    let store = main.store();
    let mut fleet = Fleet::run(Fleet::connect(config, &settings, task_type).await?);
    let mut latencies = Vec::with_capacity(config.latency_samples as usize);
    for _ in 0..config.latency_samples {
        tokio::time::sleep(Duration::from_millis(5)).await;
        let before = fleet.succeeded();
        let id = store
            .task_enqueue(NewTask::new(task_type.clone(), serde_json::json!({})))
            .await
            .context("enqueue for pickup")?
            .id;
        fleet
            .wait_succeeded(
                before + 1,
                Some(Duration::from_secs(10)),
                Duration::from_millis(1),
            )
            .await
            .context("waiting for the pickup task")?;
        let detail = store
            .task_get(id)
            .await
            .context("reading the pickup task")?
            .context("the pickup task is gone")?;
        let started_at = detail
            .task
            .started_at
            .context("the pickup task has no start time")?;
        let waited_for = started_at - detail.task.available_at;
        latencies.push(waited_for.num_microseconds().unwrap_or(i64::MAX) as f64 / 1000.0);
    }
    fleet.stop().await?;
    latencies.sort_by(f64::total_cmp);
    Ok(BenchReport {
        tasks: config.tasks,
        backlog: config.backlog,
        agents: config.agents,
        concurrency: settings.concurrency,
        batch: settings.claim_batch,
        enqueue_per_s,
        processed_per_s,
        drain_seconds,
        wal_bytes_per_task: per_task(|c| Some(c.wal_bytes), &after, counted),
        xids_per_task: per_task(|c| Some(c.next_xid), &after, counted),
        commits_per_task: per_task(|c| Some(c.commits), &stopped, completed),
        statements_per_task: per_task(|c| c.statements, &after, counted),
        agent_cpu_us_per_task,
        db_cpu_us_per_task,
        pickup_p50_ms: percentile(&latencies, 0.50),
        pickup_p99_ms: percentile(&latencies, 0.99),
        pickup_samples: config.latency_samples,
        checkpoint_after_backlog,
    })
}

/// CPU time this process has used, user and system, every thread (live or ended).
fn own_cpu() -> Option<Duration> {
    use nix::sys::resource::{UsageWho, getrusage};
    let usage = getrusage(UsageWho::RUSAGE_SELF).ok()?;
    let time = |t: nix::sys::time::TimeVal| {
        Duration::from_secs(u64::try_from(t.tv_sec()).ok()?)
            .checked_add(Duration::from_micros(u64::try_from(t.tv_usec()).ok()?))
    };
    time(usage.user_time())?.checked_add(time(usage.system_time())?)
}

/// Nanoseconds on a CPU of each of `counters`' backends, read from `/proc`: `None` unless every
/// one is a PostgreSQL process on this host serving this database (its process title names
/// it) whose scheduler statistics can be read — a server elsewhere gives nothing, not a wrong
/// figure from a local process that happens to have the same id.
fn backends_cpu(counters: &ServerCounters) -> Option<std::collections::HashMap<i32, u64>> {
    let database = format!(" {} ", counters.database);
    counters
        .backend_pids
        .iter()
        .map(|&pid| {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
            let title = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            let title = String::from_utf8_lossy(&title);
            if comm.trim_end() != "postgres" || !title.contains(&database) {
                return None;
            }
            let stat = std::fs::read_to_string(format!("/proc/{pid}/schedstat")).ok()?;
            let on_cpu = stat.split_whitespace().next()?.parse().ok()?;
            Some((pid, on_cpu))
        })
        .collect()
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

/// Renders a report as text for people.
pub fn render_text(report: &BenchReport) -> String {
    let backlog = match report.backlog {
        0 => String::new(),
        n => format!("; backlog {n}"),
    };
    let mut text = format!(
        "enqueue   {:>10.0} tasks/s  (bulk, {} tasks)\nprocessed {:>10.0} tasks/s  ({} agents, concurrency {}, claim batch {}; {:.2} s{backlog})\n",
        report.enqueue_per_s,
        report.tasks,
        report.processed_per_s,
        report.agents,
        report.concurrency,
        report.batch,
        report.drain_seconds,
    );
    if let (Some(wal), Some(xids), Some(commits)) = (
        report.wal_bytes_per_task,
        report.xids_per_task,
        report.commits_per_task,
    ) {
        let statements = report
            .statements_per_task
            .map_or("n/a".to_string(), |s| format!("{s:.2}"));
        text.push_str(&format!(
            "per task  {wal:.0} WAL bytes, {xids:.2} xids, {commits:.2} commits, {statements} statements  (drain; WAL and xids server-wide)\n"
        ));
    }
    if let Some(agent) = report.agent_cpu_us_per_task {
        let database = report
            .db_cpu_us_per_task
            .map_or("n/a".to_string(), |d| format!("{d:.1} µs"));
        text.push_str(&format!(
            "cpu/task  agent {agent:.1} µs, database {database}  (drain)\n"
        ));
    }
    text.push_str(&format!(
        "pickup    p50 {:.2} ms  p99 {:.2} ms  ({} samples, idle agents)\n",
        report.pickup_p50_ms, report.pickup_p99_ms, report.pickup_samples,
    ));
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_pick_ranks() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 0.5), 51.0);
        assert_eq!(percentile(&v, 0.99), 99.0);
        assert_eq!(percentile(&[], 0.5), 0.0);
    }

    fn report() -> BenchReport {
        BenchReport {
            tasks: 1000,
            backlog: 0,
            agents: 1,
            concurrency: 10,
            batch: 64,
            enqueue_per_s: 50_000.0,
            processed_per_s: 4000.0,
            drain_seconds: 0.25,
            wal_bytes_per_task: None,
            xids_per_task: None,
            commits_per_task: None,
            statements_per_task: None,
            agent_cpu_us_per_task: None,
            db_cpu_us_per_task: None,
            pickup_p50_ms: 1.0,
            pickup_p99_ms: 2.0,
            pickup_samples: 200,
            checkpoint_after_backlog: None,
        }
    }

    #[test]
    fn text_shows_costs_and_backlog_only_when_there_are_some() {
        let text = render_text(&report());
        assert_eq!(text.lines().count(), 3, "{text}");
        assert!(
            !text.contains("backlog") && !text.contains("per task"),
            "{text}"
        );
        let text = render_text(&BenchReport {
            backlog: 2000,
            wal_bytes_per_task: Some(812.4),
            xids_per_task: Some(1.25),
            commits_per_task: Some(1.5),
            ..report()
        });
        assert_eq!(text.lines().count(), 4, "{text}");
        assert!(text.contains("0.25 s; backlog 2000)"), "{text}");
        assert!(
            text.contains("per task  812 WAL bytes, 1.25 xids, 1.50 commits, n/a statements"),
            "{text}"
        );
        let text = render_text(&BenchReport {
            agent_cpu_us_per_task: Some(6.04),
            ..report()
        });
        assert!(
            text.contains("cpu/task  agent 6.0 µs, database n/a  (drain)"),
            "{text}"
        );
        let text = render_text(&BenchReport {
            agent_cpu_us_per_task: Some(6.04),
            db_cpu_us_per_task: Some(21.47),
            ..report()
        });
        assert!(
            text.contains("cpu/task  agent 6.0 µs, database 21.5 µs  (drain)"),
            "{text}"
        );
    }

    #[test]
    fn own_cpu_grows_with_work() {
        let before = own_cpu().unwrap_or_else(|| panic!("getrusage failed"));
        let mut x = 0u64;
        let spin = Instant::now();
        while spin.elapsed() < Duration::from_millis(30) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        let after = own_cpu().unwrap_or_else(|| panic!("getrusage failed"));
        assert!(
            after >= before + Duration::from_millis(10),
            "{before:?} → {after:?}"
        );
    }

    #[test]
    fn backends_are_read_only_when_they_are_local_postgres_processes_of_this_database() {
        // This test process is not PostgreSQL: its id must not be read as a backend's.
        let mine = ServerCounters {
            wal_bytes: 0,
            next_xid: 0,
            commits: 0,
            statements: None,
            backends: 1,
            backend_pids: vec![std::process::id() as i32],
            database: "test".into(),
        };
        assert_eq!(backends_cpu(&mine), None);
        let none = ServerCounters {
            backend_pids: vec![],
            ..mine
        };
        assert_eq!(backends_cpu(&none), Some(Default::default()));
    }
}
