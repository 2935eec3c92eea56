//! `fail`: fails on purpose with the code, message and retryability its payload names
//! (defaults `fail`, "failed on purpose", retryable) — for demos and tests of retries and the
//! dead-letter queue.

use async_trait::async_trait;
use serde::Deserialize;

use crate::handler::{Handler, HandlerError, Outcome, TaskContext};

/// Code used when the payload names none.
pub const DEFAULT_FAIL_CODE: &str = "fail";
/// Message used when the payload names none.
pub const DEFAULT_FAIL_MESSAGE: &str = "failed on purpose";
/// Longest error code accepted, in bytes.
pub const MAX_FAIL_CODE_BYTES: usize = 64;

/// The payload of `fail`: `{"code": "..", "message": "..", "retryable": bool}`, all optional.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FailPayload {
    #[serde(default = "default_code")]
    pub code: String,
    #[serde(default = "default_message")]
    pub message: String,
    #[serde(default = "default_retryable")]
    pub retryable: bool,
}

fn default_code() -> String {
    DEFAULT_FAIL_CODE.to_owned()
}

fn default_message() -> String {
    DEFAULT_FAIL_MESSAGE.to_owned()
}

fn default_retryable() -> bool {
    true
}

/// Always fails, as told.
#[derive(Debug, Clone, Copy, Default)]
pub struct FailHandler;

#[async_trait]
impl Handler for FailHandler {
    type Payload = FailPayload;

    fn validate(&self, payload: &FailPayload) -> Result<(), HandlerError> {
        if payload.code.is_empty() || payload.code.len() > MAX_FAIL_CODE_BYTES {
            return Err(HandlerError::permanent(
                "bad_payload",
                format!(
                    "code must be 1 to {MAX_FAIL_CODE_BYTES} bytes, got {}",
                    payload.code.len()
                ),
            ));
        }
        Ok(())
    }

    async fn run(&self, _ctx: TaskContext, payload: FailPayload) -> Result<Outcome, HandlerError> {
        Err(HandlerError {
            code: payload.code,
            message: payload.message,
            retryable: payload.retryable,
        })
    }
}

#[cfg(test)]
mod tests {
    use leasehold_shared::TaskType;
    use serde_json::json;

    use super::*;

    async fn fail_with(payload: serde_json::Value) -> Result<Outcome, HandlerError> {
        let (ctx, _stopper) = TaskContext::standalone(TaskType::new("fail").unwrap(), None);
        let payload: FailPayload = serde_json::from_value(payload).unwrap();
        FailHandler.validate(&payload)?;
        FailHandler.run(ctx, payload).await
    }

    #[tokio::test]
    async fn fail_uses_the_given_fields() {
        let err = fail_with(json!({"code": "boom", "message": "it broke", "retryable": false}))
            .await
            .unwrap_err();
        assert_eq!(err, HandlerError::permanent("boom", "it broke"));
    }

    #[tokio::test]
    async fn fail_defaults_to_a_retryable_fail() {
        let err = fail_with(json!({})).await.unwrap_err();
        assert_eq!(err, HandlerError::retryable("fail", "failed on purpose"));
    }

    #[tokio::test]
    async fn fail_refuses_an_empty_or_long_code() {
        for code in [String::new(), "x".repeat(MAX_FAIL_CODE_BYTES + 1)] {
            let err = fail_with(json!({ "code": code })).await.unwrap_err();
            assert_eq!(err.code, "bad_payload");
            assert!(!err.retryable);
        }
        let longest = "x".repeat(MAX_FAIL_CODE_BYTES);
        let err = fail_with(json!({ "code": longest })).await.unwrap_err();
        assert_eq!(err.code, longest);
    }

    #[test]
    fn fail_refuses_unknown_fields() {
        assert!(serde_json::from_value::<FailPayload>(json!({"reason": "x"})).is_err());
    }
}
