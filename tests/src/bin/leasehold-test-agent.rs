//! `leasehold-test-agent`: the real `leasehold-agent` binary plus handlers for fault tests.
//!
//! - `ledger` `{"ledger_id": N, "ms": M, "ignore_cancel": bool}`: writes every execution to
//!   `test_executions` over its own, unfenced connection (see `leasehold_tests::ledger`), then
//!   works for M ms. With `LEASEHOLD_TEST_CRASH_AFTER_RETURN=1` in the agent's environment, the
//!   first execution that returns aborts the whole process right after logging its end: the
//!   work is done but its completion is never committed (TESTING.md T02). With
//!   `"fail_attempts": F` it then fails (retryable, code `planned_failure`) while the attempt
//!   number is at most F. The same handler also serves the type `ledger.limited`, for
//!   scenarios that give one type a concurrency limit.
//! - `hog` `{"ms": M}`: holds every connection of the agent's pool for M ms.
//! - `panic` `{}`: panics.
//! - `snoozer` `{"times": N, "ms": M}`: snoozes for M ms while the task was snoozed fewer than
//!   N times, then succeeds with `{"attempt", "snoozes"}` as it saw them.
//! - `checkpointer` `{"steps": S, "step_ms": M}`: resumes from the saved checkpoint
//!   `{"step": k}` (0 without one), then for each step left works M ms and saves the next
//!   checkpoint; succeeds with `{"started_from": k, "attempt"}`.
//! - `txn` `{"first_ms": M}`: in one transaction of [`TaskContext::begin`], inserts its
//!   business row into `txn_effects (task_id, epoch, agent)`, works M ms on its first attempt,
//!   then completes the task in that transaction. Each step is logged to `txn_log (task_id,
//!   epoch, event)` over its own connection: `begun`, then `completed` or the error code. The
//!   test creates both tables.
//!
//! Enable them like the built-ins: `--handlers ledger,hog,panic,noop`.

use std::time::Duration;

use async_trait::async_trait;
use leasehold_agent::config::AgentConfig;
use leasehold_agent::{Handler, HandlerError, HandlerRegistry, Outcome, TaskContext};
use leasehold_shared::TaskType;
use serde::Deserialize;
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;

/// Set by the first execution that crashes the process (`crash_after_return`).
static CRASHING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

#[derive(Debug, Deserialize)]
struct LedgerPayload {
    ledger_id: i64,
    #[serde(default)]
    ms: u64,
    #[serde(default)]
    ignore_cancel: bool,
    #[serde(default)]
    fail_attempts: i32,
}

struct Ledger {
    pool: PgPool,
    /// Abort the process once an execution returned (before its completion is written).
    crash_after_return: bool,
}

impl Ledger {
    /// Retries until the write lands or the execution is stopped: the log must not miss an
    /// execution because the database blinked.
    async fn write<F, Fut, T>(&self, ctx: &TaskContext, f: F) -> Result<T, HandlerError>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<T, sqlx::Error>>,
    {
        loop {
            match f().await {
                Ok(v) => return Ok(v),
                Err(e) => {
                    if ctx.is_cancelled() {
                        return Err(HandlerError::retryable("ledger", e.to_string()));
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }
}

#[async_trait]
impl Handler for Ledger {
    type Payload = LedgerPayload;

    async fn run(&self, ctx: TaskContext, p: LedgerPayload) -> Result<Outcome, HandlerError> {
        let agent = ctx
            .agent_id()
            .map(|a| a.as_str().to_string())
            .unwrap_or_default();
        let exec_id: i64 = self
            .write(&ctx, || {
                sqlx::query_scalar(
                    "INSERT INTO test_executions (ledger_id, task_id, epoch, agent) VALUES ($1, $2, $3, $4) RETURNING id",
                )
                .bind(p.ledger_id)
                .bind(ctx.id().0)
                .bind(ctx.epoch().0)
                .bind(&agent)
                .fetch_one(&self.pool)
            })
            .await?;
        let work = tokio::time::sleep(Duration::from_millis(p.ms));
        let outcome = if p.ignore_cancel {
            work.await;
            "returned"
        } else {
            // A stop request seen at the same poll as the end of the work wins (a handler
            // that checks for cancellation before reporting success).
            tokio::select! {
                biased;
                _ = ctx.cancelled() => "stopped",
                _ = work => "returned",
            }
        };
        self.write(&ctx, || {
            sqlx::query("UPDATE test_executions SET finished_at = clock_timestamp(), outcome = $2 WHERE id = $1")
                .bind(exec_id)
                .bind(outcome)
                .execute(&self.pool)
        })
        .await?;
        if self.crash_after_return && outcome == "returned" {
            // One crash: an execution that returns on another worker thread while the first
            // one is printing waits for the abort instead of logging a second crash (two
            // lines made T02 count two crashes under load).
            if CRASHING.swap(true, std::sync::atomic::Ordering::SeqCst) {
                return std::future::pending().await;
            }
            eprintln!(
                "leasehold-test-agent: crashing after task {} epoch {} returned, before its completion",
                ctx.id().0,
                ctx.epoch().0
            );
            std::process::abort();
        }
        if outcome == "stopped" {
            return Err(HandlerError::retryable("stopped", "asked to stop"));
        }
        if ctx.attempt() <= p.fail_attempts {
            return Err(HandlerError::retryable(
                "planned_failure",
                format!(
                    "attempt {} of {} planned to fail",
                    ctx.attempt(),
                    p.fail_attempts
                ),
            ));
        }
        Ok(Outcome::Succeeded(Some(
            serde_json::json!({"ledger_id": p.ledger_id}),
        )))
    }
}

#[derive(Debug, Deserialize)]
struct HogPayload {
    ms: u64,
}

struct Hog;

#[async_trait]
impl Handler for Hog {
    type Payload = HogPayload;

    async fn run(&self, ctx: TaskContext, p: HogPayload) -> Result<Outcome, HandlerError> {
        let pool = ctx
            .pool()
            .ok_or_else(|| HandlerError::permanent("no_pool", "no pool"))?
            .clone();
        let max = pool.options().get_max_connections();
        let mut held = Vec::new();
        let deadline = tokio::time::Instant::now() + Duration::from_millis(p.ms);
        // Take every connection there is, keep taking the ones others give back.
        while tokio::time::Instant::now() < deadline {
            if held.len() < max as usize
                && let Ok(Ok(conn)) =
                    tokio::time::timeout(Duration::from_millis(50), pool.acquire()).await
            {
                held.push(conn);
                continue;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let n = held.len();
        drop(held);
        Ok(Outcome::Succeeded(Some(
            serde_json::json!({"held": n, "max": max}),
        )))
    }
}

#[derive(Debug, Deserialize)]
struct Empty {}

struct Panic;

#[async_trait]
impl Handler for Panic {
    type Payload = Empty;

    #[allow(clippy::panic)]
    async fn run(&self, _ctx: TaskContext, _p: Empty) -> Result<Outcome, HandlerError> {
        panic!("poison task: this handler always panics");
    }
}

#[derive(Debug, Deserialize)]
struct SnoozerPayload {
    times: i32,
    #[serde(default)]
    ms: u64,
}

struct Snoozer;

#[async_trait]
impl Handler for Snoozer {
    type Payload = SnoozerPayload;

    async fn run(&self, ctx: TaskContext, p: SnoozerPayload) -> Result<Outcome, HandlerError> {
        if ctx.snoozes() < p.times {
            return Ok(Outcome::Snooze(Duration::from_millis(p.ms)));
        }
        Ok(Outcome::Succeeded(Some(serde_json::json!({
            "attempt": ctx.attempt(),
            "snoozes": ctx.snoozes(),
        }))))
    }
}

#[derive(Debug, Deserialize)]
struct CheckpointerPayload {
    steps: u32,
    step_ms: u64,
}

#[derive(Debug, serde::Serialize, Deserialize)]
struct Step {
    step: u32,
}

struct Checkpointer;

#[async_trait]
impl Handler for Checkpointer {
    type Payload = CheckpointerPayload;

    async fn run(&self, ctx: TaskContext, p: CheckpointerPayload) -> Result<Outcome, HandlerError> {
        let from = ctx.checkpoint_as::<Step>()?.map_or(0, |s| s.step);
        for step in from..p.steps {
            tokio::select! {
                () = tokio::time::sleep(Duration::from_millis(p.step_ms)) => {}
                () = ctx.cancelled() => {
                    return Err(HandlerError::retryable("stopped", "asked to stop"));
                }
            }
            ctx.save_checkpoint(&Step { step: step + 1 }).await?;
        }
        Ok(Outcome::Succeeded(Some(serde_json::json!({
            "started_from": from,
            "attempt": ctx.attempt(),
        }))))
    }
}

#[derive(Debug, Deserialize)]
struct TxnPayload {
    #[serde(default)]
    first_ms: u64,
}

struct Txn {
    pool: PgPool,
}

impl Txn {
    async fn log(&self, ctx: &TaskContext, event: &str) {
        let logged = sqlx::query("INSERT INTO txn_log (task_id, epoch, event) VALUES ($1, $2, $3)")
            .bind(ctx.id().0)
            .bind(ctx.epoch().0)
            .bind(event)
            .execute(&self.pool)
            .await;
        if let Err(e) = logged {
            eprintln!("txn_log write failed: {e}");
        }
    }
}

#[async_trait]
impl Handler for Txn {
    type Payload = TxnPayload;

    async fn run(&self, ctx: TaskContext, p: TxnPayload) -> Result<Outcome, HandlerError> {
        let mut tx = ctx.begin().await?;
        sqlx::query("INSERT INTO txn_effects (task_id, epoch, agent) VALUES ($1, $2, $3)")
            .bind(ctx.id().0)
            .bind(ctx.epoch().0)
            .bind(ctx.agent_id().map(|a| a.as_str().to_string()))
            .execute(tx.conn())
            .await
            .map_err(|e| HandlerError::from_error("txn_effects", &e))?;
        self.log(&ctx, "begun").await;
        if ctx.attempt() == 1 {
            tokio::time::sleep(Duration::from_millis(p.first_ms)).await;
        }
        match tx.complete(Outcome::done()).await {
            Ok(outcome) => {
                self.log(&ctx, "completed").await;
                Ok(outcome)
            }
            Err(e) => {
                self.log(&ctx, &e.code).await;
                Err(e)
            }
        }
    }
}

/// The ledger's own connection bypasses any fault proxy: `LEASEHOLD_TEST_LEDGER_URL` when set.
fn ledger_url(config: &AgentConfig) -> String {
    std::env::var("LEASEHOLD_TEST_LEDGER_URL").unwrap_or_else(|_| config.database_url.clone())
}

fn extend(registry: &mut HandlerRegistry, config: &AgentConfig) -> anyhow::Result<()> {
    let pool = PgPoolOptions::new()
        .max_connections(4)
        .acquire_timeout(Duration::from_secs(2))
        .connect_lazy(&ledger_url(config))?;
    let crash_after_return =
        std::env::var("LEASEHOLD_TEST_CRASH_AFTER_RETURN").is_ok_and(|v| v == "1");
    registry.register(
        TaskType::new("ledger")?,
        Ledger {
            pool: pool.clone(),
            crash_after_return,
        },
    );
    registry.register(
        TaskType::new("ledger.limited")?,
        Ledger {
            pool: pool.clone(),
            crash_after_return,
        },
    );
    registry.register(TaskType::new("txn")?, Txn { pool });
    registry.register(TaskType::new("hog")?, Hog);
    registry.register(TaskType::new("panic")?, Panic);
    registry.register(TaskType::new("snoozer")?, Snoozer);
    registry.register(TaskType::new("checkpointer")?, Checkpointer);
    Ok(())
}

fn main() -> std::process::ExitCode {
    leasehold_agent::cli::main_with(Some(Box::new(extend)))
}
