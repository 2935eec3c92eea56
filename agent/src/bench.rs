//! `leasehold-agent bench`: throughput and pickup latency of the real runtime on a real
//! database.
//!
//! Phases, on tasks of a task type unique to this run (deleted at the end, so the bench can
//! share a database with real work without touching it):
//! 1. **enqueue** — `tasks` no-op tasks in bulk statements of 10,000 → `enqueue_per_s`;
//! 2. **drain** — `agents` full agent runtimes (each with its own pool, heartbeat, completer and
//!    LISTEN connection, default settings unless `--concurrency`/`--batch` are given) run them
//!    with a no-op handler → `processed_per_s`, from the agents' start until the last
//!    completion committed;
//! 3. **pickup** — the same agents, now idle; one task enqueued at a time; the latency is the
//!    task's `started_at − available_at` in database time → `pickup_p50_ms`, `pickup_p99_ms`.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use async_trait::async_trait;
use leasehold_shared::store::{AnyStore, NewTask};
use leasehold_shared::{Store, TaskType};
use serde::Serialize;

use crate::handler::{Handler, HandlerError, HandlerRegistry, Outcome, TaskContext};
use crate::runtime::{AgentBuilder, AgentControl, RuntimeSettings, Shutdown};

/// Agents the bench runs unless told otherwise.
pub const DEFAULT_AGENTS: u32 = 1;

/// Bench settings (the `bench` subcommand's flags).
#[derive(Debug, Clone)]
pub struct BenchConfig {
    pub database_url: String,
    pub tasks: u64,
    pub agents: u32,
    pub concurrency: Option<u32>,
    pub batch: Option<u32>,
    pub latency_samples: u32,
}

/// What the bench prints.
#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    pub tasks: u64,
    pub agents: u32,
    pub concurrency: u32,
    pub batch: u32,
    pub enqueue_per_s: f64,
    pub processed_per_s: f64,
    pub drain_seconds: f64,
    pub pickup_p50_ms: f64,
    pub pickup_p99_ms: f64,
    pub pickup_samples: u32,
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

/// Runs the bench and returns its report.
pub async fn run(config: &BenchConfig) -> Result<BenchReport> {
    anyhow::ensure!(config.tasks > 0, "--tasks must be above 0");
    anyhow::ensure!(
        (1..=64).contains(&config.agents),
        "--agents must be within 1..=64"
    );
    let any = AnyStore::connect(&config.database_url, 4)
        .await
        .context("connecting to the database")?;
    any.migrate().await.context("applying migrations")?;
    let store = any.store();
    // Unique to this run, and short: the name is stored in every row and leased-index entry.
    let task_type = TaskType::new(format!("bench.{:012x}", fastrand::u64(..) >> 16))?;
    let result = run_phases(config, store.as_ref(), &task_type).await;
    let cleanup = any
        .delete_tasks_of_type(&task_type)
        .await
        .context("deleting bench tasks");
    any.close().await;
    let report = result?;
    cleanup?;
    Ok(report)
}

async fn run_phases(
    config: &BenchConfig,
    store: &dyn Store,
    task_type: &TaskType,
) -> Result<BenchReport> {
    let new_task = || NewTask::new(task_type.clone(), serde_json::json!({}));
    // 1. Enqueue.
    const CHUNK: u64 = 10_000;
    let started = Instant::now();
    let mut left = config.tasks;
    while left > 0 {
        let n = left.min(CHUNK);
        store
            .task_enqueue_many((0..n).map(|_| new_task()).collect())
            .await
            .context("bulk enqueue")?;
        left -= n;
    }
    let enqueue_per_s = config.tasks as f64 / started.elapsed().as_secs_f64();

    // 2. Drain with real agents. Progress is read from the agents' own counters: no listener,
    // so the bench adds no work per task to the runtime it measures.
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
    let mut agents = Vec::new();
    for n in 0..config.agents {
        let mut handlers = HandlerRegistry::new();
        handlers.register(task_type.clone(), Noop);
        let agent = AgentBuilder::new(
            RuntimeSettings {
                name: format!("bench-{}-{n}", std::process::id()),
                ..settings.clone()
            },
            handlers,
        )
        .connect(store_url(config))
        .await
        .with_context(|| format!("starting bench agent {n}"))?;
        agents.push(agent);
    }
    let controls: Vec<AgentControl> = agents.iter().map(|a| a.control()).collect();
    let succeeded = || controls.iter().map(|c| c.summary().succeeded).sum::<u64>();
    let shutdown = Shutdown::default();
    let started = Instant::now();
    let mut running = tokio::task::JoinSet::new();
    for agent in agents {
        running.spawn(agent.run(shutdown.clone()));
    }
    while succeeded() < config.tasks {
        tokio::time::sleep(Duration::from_millis(5)).await;
        if let Some(ended) = running.try_join_next() {
            ended.context("bench agent panicked")??;
            anyhow::bail!("a bench agent stopped before the drain finished");
        }
    }
    let drain_seconds = started.elapsed().as_secs_f64();
    let processed_per_s = config.tasks as f64 / drain_seconds;

    // 3. Idle pickup: one task at a time, each finished before the next is enqueued; the
    // latency comes from the task row (database time), so how often we look does not matter.
    let mut latencies = Vec::with_capacity(config.latency_samples as usize);
    for _ in 0..config.latency_samples {
        tokio::time::sleep(Duration::from_millis(5)).await;
        let before = succeeded();
        let id = store
            .task_enqueue(new_task())
            .await
            .context("enqueue for pickup")?
            .id;
        let waited = Instant::now();
        while succeeded() == before {
            anyhow::ensure!(
                waited.elapsed() < Duration::from_secs(10),
                "no agent ran the pickup task within 10 s"
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
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
    shutdown.graceful.cancel();
    while let Some(ended) = running.join_next().await {
        ended.context("bench agent panicked")??;
    }
    latencies.sort_by(f64::total_cmp);
    Ok(BenchReport {
        tasks: config.tasks,
        agents: config.agents,
        concurrency: settings.concurrency,
        batch: settings.claim_batch,
        enqueue_per_s,
        processed_per_s,
        drain_seconds,
        pickup_p50_ms: percentile(&latencies, 0.50),
        pickup_p99_ms: percentile(&latencies, 0.99),
        pickup_samples: config.latency_samples,
    })
}

fn store_url(config: &BenchConfig) -> &str {
    &config.database_url
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
    format!(
        "enqueue   {:>10.0} tasks/s  (bulk, {} tasks)\nprocessed {:>10.0} tasks/s  ({} agents, concurrency {}, claim batch {}; {:.2} s)\npickup    p50 {:.2} ms  p99 {:.2} ms  ({} samples, idle agents)\n",
        report.enqueue_per_s,
        report.tasks,
        report.processed_per_s,
        report.agents,
        report.concurrency,
        report.batch,
        report.drain_seconds,
        report.pickup_p50_ms,
        report.pickup_p99_ms,
        report.pickup_samples,
    )
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
}
