//! `leasehold-agent bench`: store throughput and pickup latency on a real database.
//!
//! Phases, each on tasks of a task type unique to this run (deleted at the end, so the bench
//! can share a database with real work without touching it):
//! 1. **enqueue** — `tasks` no-op tasks in bulk statements of 10,000 → `enqueue_per_s`;
//! 2. **drain** — `agents` concurrent claimers, each claiming `batch` tasks per statement and
//!    completing them with one batched completion → `processed_per_s`;
//! 3. **pickup** — an idle claimer woken by LISTEN/NOTIFY; one task enqueued at a time; the
//!    pickup latency is `started_at − created_at` in database time → `pickup_p50_ms`, `pickup_p99_ms`.
//!
//! `--matrix` repeats the drain for batch sizes 1, 10, 100 and 1, 2, 4 claimers.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use leasehold_shared::store::postgres::{NOTIFY_CHANNEL, PgStore, PgStoreOptions};
use leasehold_shared::store::{ClaimParams, CompleteParams, Completion, NewTask};
use leasehold_shared::{AgentId, LeaseKey, Store, TaskType};
use serde::Serialize;

/// Bench settings (the `bench` subcommand's flags).
#[derive(Debug, Clone)]
pub struct BenchConfig {
    pub database_url: String,
    pub tasks: u64,
    pub agents: u32,
    pub concurrency: u32,
    pub batch: u32,
    pub matrix: bool,
    pub latency_samples: u32,
}

/// One drain measurement.
#[derive(Debug, Clone, Serialize)]
pub struct DrainFigure {
    pub claimers: u32,
    pub batch: u32,
    pub tasks: u64,
    pub seconds: f64,
    pub processed_per_s: f64,
}

/// What the bench prints.
#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    pub tasks: u64,
    pub agents: u32,
    pub batch: u32,
    pub concurrency: u32,
    pub enqueue_per_s: f64,
    pub processed_per_s: f64,
    pub pickup_p50_ms: f64,
    pub pickup_p99_ms: f64,
    pub matrix: Vec<DrainFigure>,
}

struct Bench {
    store: PgStore,
    task_type: TaskType,
}

/// Runs the bench and returns its report.
pub async fn run(config: &BenchConfig) -> Result<BenchReport> {
    anyhow::ensure!(config.tasks > 0, "--tasks must be above 0");
    anyhow::ensure!(
        (1..=64).contains(&config.agents),
        "--agents must be within 1..=64"
    );
    anyhow::ensure!(
        config.batch >= 1 && config.concurrency >= 1,
        "--batch and --concurrency must be above 0"
    );
    let options = PgStoreOptions {
        max_connections: config.agents.max(4) + 4,
        ..PgStoreOptions::default()
    };
    let store = PgStore::connect(&config.database_url, options)
        .await
        .context("connecting to the database")?;
    store.migrate().await.context("applying migrations")?;
    let task_type = TaskType::new(format!(
        "bench.{}.{}",
        std::process::id(),
        chrono::Utc::now().timestamp_millis()
    ))?;
    let bench = Bench { store, task_type };
    let result = bench.run_all(config).await;
    let cleanup = bench.cleanup().await;
    let report = result?;
    cleanup?;
    Ok(report)
}

impl Bench {
    async fn run_all(&self, config: &BenchConfig) -> Result<BenchReport> {
        let batch = config.batch.min(config.concurrency);
        let enqueue_per_s = self.enqueue(config.tasks).await?;
        let main = self.drain(config.agents, batch, config.tasks).await?;
        let mut matrix = Vec::new();
        if config.matrix {
            for claimers in [1, 2, 4] {
                for b in [1, 10, 100] {
                    // Batch 1 is slow: keep its runs short so the matrix finishes in minutes.
                    let n = if b == 1 {
                        config.tasks.min(20_000)
                    } else {
                        config.tasks
                    };
                    self.enqueue(n).await?;
                    matrix.push(self.drain(claimers, b, n).await?);
                }
            }
        }
        let (pickup_p50_ms, pickup_p99_ms) = self.pickup(config.latency_samples).await?;
        Ok(BenchReport {
            tasks: config.tasks,
            agents: config.agents,
            batch,
            concurrency: config.concurrency,
            enqueue_per_s,
            processed_per_s: main.processed_per_s,
            pickup_p50_ms,
            pickup_p99_ms,
            matrix,
        })
    }

    fn new_task(&self) -> NewTask {
        NewTask::new(self.task_type.clone(), serde_json::json!({}))
    }

    async fn enqueue(&self, tasks: u64) -> Result<f64> {
        const CHUNK: u64 = 10_000;
        let started = Instant::now();
        let mut left = tasks;
        while left > 0 {
            let n = left.min(CHUNK);
            let chunk: Vec<NewTask> = (0..n).map(|_| self.new_task()).collect();
            self.store
                .task_enqueue_many(chunk)
                .await
                .context("bulk enqueue")?;
            left -= n;
        }
        Ok(tasks as f64 / started.elapsed().as_secs_f64())
    }

    async fn drain(&self, claimers: u32, batch: u32, tasks: u64) -> Result<DrainFigure> {
        let done = Arc::new(AtomicU64::new(0));
        let started = Instant::now();
        let mut workers = tokio::task::JoinSet::new();
        for n in 0..claimers {
            let store = self.store.clone();
            let task_type = self.task_type.clone();
            let done = Arc::clone(&done);
            let owner = AgentId::new(format!("bench-{}#{n}", std::process::id()))?;
            workers.spawn(
                async move { claim_loop(store, task_type, owner, batch, tasks, done).await },
            );
        }
        while let Some(joined) = workers.join_next().await {
            joined.context("claimer panicked")??;
        }
        let seconds = started.elapsed().as_secs_f64();
        let processed = done.load(Ordering::Relaxed);
        Ok(DrainFigure {
            claimers,
            batch,
            tasks: processed,
            seconds,
            processed_per_s: processed as f64 / seconds,
        })
    }

    async fn pickup(&self, samples: u32) -> Result<(f64, f64)> {
        if samples == 0 {
            return Ok((0.0, 0.0));
        }
        let mut listener = sqlx::postgres::PgListener::connect_with(self.store.pool()).await?;
        listener.listen(NOTIFY_CHANNEL).await?;
        let owner = AgentId::new(format!("bench-{}#pickup", std::process::id()))?;
        let mut latencies = Vec::with_capacity(samples as usize);
        for _ in 0..samples {
            let enqueued = self.store.task_enqueue(self.new_task()).await?;
            loop {
                let claimed = self
                    .store
                    .task_claim(claim_params(&owner, &self.task_type, 1))
                    .await?;
                if let Some(task) = claimed.tasks.first() {
                    let started = task.started_at.unwrap_or(claimed.now);
                    latencies.push(
                        (started - task.created_at).num_microseconds().unwrap_or(0) as f64 / 1000.0,
                    );
                    complete_all(&self.store, &owner, &claimed.tasks).await?;
                    break;
                }
                // Idle: wait for the enqueue's NOTIFY (the poll fallback is 1 s).
                let _ = tokio::time::timeout(Duration::from_secs(1), listener.recv()).await;
            }
            anyhow::ensure!(enqueued.created, "pickup task was not created");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        latencies.sort_by(f64::total_cmp);
        Ok((percentile(&latencies, 0.50), percentile(&latencies, 0.99)))
    }

    async fn cleanup(&self) -> Result<()> {
        sqlx::query("DELETE FROM tasks WHERE task_type = $1")
            .bind(self.task_type.as_str())
            .execute(self.store.pool())
            .await
            .context("deleting bench tasks")?;
        Ok(())
    }
}

fn claim_params(owner: &AgentId, task_type: &TaskType, batch: u32) -> ClaimParams {
    ClaimParams {
        owner: owner.clone(),
        task_types: vec![task_type.clone()],
        batch,
        lease_ttl: Duration::from_secs(30),
    }
}

async fn complete_all(
    store: &PgStore,
    owner: &AgentId,
    tasks: &[leasehold_shared::domain::Task],
) -> Result<()> {
    let batch: Vec<CompleteParams> = tasks
        .iter()
        .map(|t| CompleteParams {
            key: LeaseKey {
                id: t.id,
                owner: owner.clone(),
                epoch: t.lease_epoch,
            },
            completion: Completion::Succeeded { result: None },
        })
        .collect();
    store
        .task_complete_many(batch)
        .await
        .context("completing")?;
    Ok(())
}

async fn claim_loop(
    store: PgStore,
    task_type: TaskType,
    owner: AgentId,
    batch: u32,
    target: u64,
    done: Arc<AtomicU64>,
) -> Result<()> {
    let params = claim_params(&owner, &task_type, batch);
    loop {
        let claimed = store.task_claim(params.clone()).await.context("claiming")?;
        if claimed.tasks.is_empty() {
            if done.load(Ordering::Relaxed) >= target {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
            continue;
        }
        complete_all(&store, &owner, &claimed.tasks).await?;
        done.fetch_add(claimed.tasks.len() as u64, Ordering::Relaxed);
    }
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
    let mut out = format!(
        "enqueue   {:>10.0} tasks/s  (bulk, {} tasks)\nprocessed {:>10.0} tasks/s  ({} claimers, batch {})\npickup    p50 {:.2} ms  p99 {:.2} ms\n",
        report.enqueue_per_s,
        report.tasks,
        report.processed_per_s,
        report.agents,
        report.batch,
        report.pickup_p50_ms,
        report.pickup_p99_ms,
    );
    if !report.matrix.is_empty() {
        out.push_str("\nclaimers  batch     tasks   seconds   tasks/s\n");
        for f in &report.matrix {
            out.push_str(&format!(
                "{:>8} {:>6} {:>9} {:>9.2} {:>9.0}\n",
                f.claimers, f.batch, f.tasks, f.seconds, f.processed_per_s
            ));
        }
    }
    out
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
