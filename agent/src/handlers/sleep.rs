//! `sleep`: waits `ms` milliseconds (at most seven days) and succeeds with `{"slept_ms": N}`;
//! returns early with a retryable `stopped` error when the execution is asked to stop (the
//! runtime records the real stop reason itself).

use std::time::Duration;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::json;

use crate::handler::{Handler, HandlerError, Outcome, TaskContext};

/// Longest sleep accepted: seven days, in milliseconds.
pub const MAX_SLEEP_MS: u64 = 7 * 24 * 60 * 60 * 1000;

/// The payload of `sleep`: `{"ms": N}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SleepPayload {
    pub ms: u64,
}

/// Sleeps, or stops early when asked.
#[derive(Debug, Clone, Copy, Default)]
pub struct SleepHandler;

#[async_trait]
impl Handler for SleepHandler {
    type Payload = SleepPayload;

    fn validate(&self, payload: &SleepPayload) -> Result<(), HandlerError> {
        if payload.ms > MAX_SLEEP_MS {
            return Err(HandlerError::permanent(
                "bad_payload",
                format!(
                    "ms must be at most {MAX_SLEEP_MS} (7 days), got {}",
                    payload.ms
                ),
            ));
        }
        Ok(())
    }

    async fn run(&self, ctx: TaskContext, payload: SleepPayload) -> Result<Outcome, HandlerError> {
        let started = tokio::time::Instant::now();
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(payload.ms)) => {
                Ok(Outcome::Succeeded(Some(json!({ "slept_ms": payload.ms }))))
            }
            () = ctx.cancelled() => {
                let slept = started.elapsed().as_millis();
                tracing::debug!(slept_ms = %slept, ms = payload.ms, "sleep stopped early");
                Err(HandlerError::retryable(
                    "stopped",
                    format!("asked to stop after {slept} of {} ms", payload.ms),
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use leasehold_shared::TaskType;

    use super::*;
    use crate::handler::StopReason;

    fn context() -> (TaskContext, crate::handler::ContextStopper) {
        TaskContext::standalone(TaskType::new("sleep").unwrap(), None)
    }

    #[tokio::test]
    async fn sleep_completes_with_its_duration() {
        let (ctx, _stopper) = context();
        let started = Instant::now();
        let outcome = SleepHandler.run(ctx, SleepPayload { ms: 30 }).await;
        assert!(started.elapsed() >= Duration::from_millis(30));
        assert_eq!(
            outcome,
            Ok(Outcome::Succeeded(Some(json!({ "slept_ms": 30 }))))
        );
    }

    #[tokio::test]
    async fn sleep_stops_early_when_asked() {
        let (ctx, stopper) = context();
        let started = Instant::now();
        let run =
            tokio::spawn(async move { SleepHandler.run(ctx, SleepPayload { ms: 60_000 }).await });
        tokio::time::sleep(Duration::from_millis(20)).await;
        stopper.stop(StopReason::Cancelled);
        let err = run.await.unwrap().unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(2));
        assert_eq!(err.code, "stopped");
        assert!(err.retryable);
    }

    #[test]
    fn sleep_refuses_more_than_seven_days_and_unknown_fields() {
        let ok: SleepPayload = serde_json::from_value(json!({ "ms": MAX_SLEEP_MS })).unwrap();
        assert!(SleepHandler.validate(&ok).is_ok());
        let err = SleepHandler
            .validate(&SleepPayload {
                ms: MAX_SLEEP_MS + 1,
            })
            .unwrap_err();
        assert_eq!(err.code, "bad_payload");
        assert!(!err.retryable);
        assert!(serde_json::from_value::<SleepPayload>(json!({ "ms": 1, "s": 1 })).is_err());
        assert!(serde_json::from_value::<SleepPayload>(json!({})).is_err());
    }
}
