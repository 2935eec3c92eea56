//! The demo's own handlers, next to the built-in `noop`, `sleep`, `fail` and `exec`:
//!
//! - `demo.long` works through `steps` items of `step_ms` each and reports progress after
//!   every item; every `fail_every`-th item fails, and a run with failed items ends partially
//!   succeeded. It stops at once when asked (cancel, timeout, shutdown).
//! - `demo.flaky` fails (retryable, code `flaky`) while the attempt is at most `fail_attempts`
//!   and succeeds after, so with the type's short backoff it shows retries that recover — or,
//!   when `fail_attempts` reaches the task's attempts, one that ends in the dead-letter queue.

use std::time::Duration;

use async_trait::async_trait;
use leasehold_agent::handlers::{self, BuiltinOptions};
use leasehold_agent::{Handler, HandlerError, HandlerRegistry, Outcome, TaskContext};
use leasehold_shared::{Progress, TaskType};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::error::{Error, Result};

/// Task type of [`ProgressHandler`].
pub const LONG_TYPE: &str = "demo.long";
/// Task type of [`FlakyHandler`].
pub const FLAKY_TYPE: &str = "demo.flaky";
/// Most items a `demo.long` task may have.
pub const MAX_STEPS: u64 = 10_000;
/// Longest item of a `demo.long` task.
pub const MAX_STEP_MS: u64 = 60_000;

/// The payload of `demo.long`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProgressPayload {
    pub steps: u64,
    pub step_ms: u64,
    /// Every n-th item fails (none when absent or 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fail_every: Option<u64>,
}

/// Works through items, reporting progress.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProgressHandler;

#[async_trait]
impl Handler for ProgressHandler {
    type Payload = ProgressPayload;

    fn validate(&self, p: &ProgressPayload) -> Result<(), HandlerError> {
        if p.steps == 0 || p.steps > MAX_STEPS || p.step_ms > MAX_STEP_MS {
            return Err(HandlerError::permanent(
                "bad_payload",
                format!("steps must be 1 to {MAX_STEPS} and step_ms at most {MAX_STEP_MS}"),
            ));
        }
        Ok(())
    }

    async fn run(&self, ctx: TaskContext, p: ProgressPayload) -> Result<Outcome, HandlerError> {
        let mut progress = Progress {
            total: p.steps,
            ..Progress::default()
        };
        ctx.progress(progress).await;
        for item in 1..=p.steps {
            tokio::select! {
                () = tokio::time::sleep(Duration::from_millis(p.step_ms)) => {}
                () = ctx.cancelled() => {
                    return Err(HandlerError::retryable(
                        "stopped",
                        format!("asked to stop after {} of {} items", progress.processed, p.steps),
                    ));
                }
            }
            progress.processed = item;
            match p.fail_every {
                Some(n) if n > 0 && item % n == 0 => progress.failed += 1,
                _ => progress.succeeded += 1,
            }
            ctx.progress(progress).await;
        }
        let result = json!({ "items": p.steps, "failed": progress.failed });
        Ok(if progress.failed > 0 {
            Outcome::PartiallySucceeded(Some(result))
        } else {
            Outcome::Succeeded(Some(result))
        })
    }
}

/// The payload of `demo.flaky`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlakyPayload {
    /// Attempts that fail before one succeeds.
    pub fail_attempts: i32,
}

/// Fails its first attempts, then succeeds.
#[derive(Debug, Clone, Copy, Default)]
pub struct FlakyHandler;

#[async_trait]
impl Handler for FlakyHandler {
    type Payload = FlakyPayload;

    async fn run(&self, ctx: TaskContext, p: FlakyPayload) -> Result<Outcome, HandlerError> {
        // A little work, so the lease shows in the console.
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(300)) => {}
            () = ctx.cancelled() => {
                return Err(HandlerError::retryable("stopped", "asked to stop"));
            }
        }
        if ctx.attempt() <= p.fail_attempts {
            return Err(HandlerError::retryable(
                "flaky",
                format!(
                    "upstream timed out (attempt {} of {}; this task fails {} times)",
                    ctx.attempt(),
                    ctx.max_attempts(),
                    p.fail_attempts
                ),
            ));
        }
        Ok(Outcome::Succeeded(Some(
            json!({ "attempt": ctx.attempt() }),
        )))
    }
}

/// The programs the demo's `exec` may run (`sh` wherever PATH finds it).
pub const DEMO_EXEC_ALLOW: [&str; 2] = ["/bin/sh", "/usr/bin/sh"];

/// The handlers every demo agent runs: the four built-ins and the two above.
pub fn registry() -> Result<HandlerRegistry> {
    let mut registry = HandlerRegistry::new();
    let options = BuiltinOptions {
        // A demo program stopped by a timeout should not linger.
        exec_kill_after: Duration::from_secs(1),
        // The demo's exec tasks run `sh -c …` (found in PATH); nothing else.
        exec_allow: DEMO_EXEC_ALLOW.iter().map(|p| (*p).to_string()).collect(),
        ..BuiltinOptions::default()
    };
    for name in handlers::BUILTIN {
        handlers::register(&mut registry, name, &options)
            .map_err(|e| Error::usage(format!("registering the demo handlers: {e}")))?;
    }
    registry.register(task_type(LONG_TYPE)?, ProgressHandler);
    registry.register(task_type(FLAKY_TYPE)?, FlakyHandler);
    Ok(registry)
}

/// A task type the demo names (a constant, so this only fails if a constant is wrong).
pub fn task_type(name: &str) -> Result<TaskType> {
    TaskType::new(name).map_err(|e| Error::usage(format!("demo task type {name:?}: {e}")))
}

#[cfg(test)]
mod tests {
    use leasehold_agent::StopReason;

    use super::*;

    fn context(task_type: &str) -> (TaskContext, leasehold_agent::ContextStopper) {
        TaskContext::standalone(TaskType::new(task_type).unwrap(), None)
    }

    #[tokio::test]
    async fn progress_with_failed_items_ends_partially_succeeded() {
        let (ctx, _stop) = context(LONG_TYPE);
        let p = ProgressPayload {
            steps: 4,
            step_ms: 1,
            fail_every: Some(2),
        };
        let outcome = ProgressHandler.run(ctx, p).await;
        assert_eq!(
            outcome,
            Ok(Outcome::PartiallySucceeded(Some(
                json!({"items": 4, "failed": 2})
            )))
        );
        let (ctx, _stop) = context(LONG_TYPE);
        let p = ProgressPayload {
            fail_every: None,
            ..p
        };
        assert!(matches!(
            ProgressHandler.run(ctx, p).await,
            Ok(Outcome::Succeeded(_))
        ));
    }

    #[tokio::test]
    async fn progress_stops_when_asked() {
        let (ctx, stop) = context(LONG_TYPE);
        let p = ProgressPayload {
            steps: 1000,
            step_ms: 1000,
            fail_every: None,
        };
        let run = tokio::spawn(async move { ProgressHandler.run(ctx, p).await });
        stop.stop(StopReason::Cancelled);
        let err = run.await.unwrap().unwrap_err();
        assert_eq!(err.code, "stopped");
    }

    #[test]
    fn progress_refuses_empty_and_huge_work() {
        for (steps, step_ms) in [(0, 1), (MAX_STEPS + 1, 1), (1, MAX_STEP_MS + 1)] {
            let p = ProgressPayload {
                steps,
                step_ms,
                fail_every: None,
            };
            assert_eq!(
                ProgressHandler.validate(&p).unwrap_err().code,
                "bad_payload"
            );
        }
    }

    #[tokio::test]
    async fn flaky_fails_its_first_attempts() {
        // A standalone context is attempt 1.
        let (ctx, _stop) = context(FLAKY_TYPE);
        let err = FlakyHandler
            .run(ctx, FlakyPayload { fail_attempts: 1 })
            .await
            .unwrap_err();
        assert_eq!(err.code, "flaky");
        assert!(err.retryable);
        let (ctx, _stop) = context(FLAKY_TYPE);
        assert!(
            FlakyHandler
                .run(ctx, FlakyPayload { fail_attempts: 0 })
                .await
                .is_ok()
        );
    }

    #[test]
    fn every_demo_type_has_a_handler() {
        let registry = registry().unwrap();
        let types: Vec<String> = registry
            .task_types()
            .iter()
            .map(|t| t.as_str().to_owned())
            .collect();
        assert_eq!(
            types,
            ["demo.flaky", "demo.long", "exec", "fail", "noop", "sleep"]
        );
    }
}
