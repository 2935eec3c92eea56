//! `noop`: succeeds at once with no result. Payload `{}`; for benchmarks of the queue itself.

use async_trait::async_trait;
use serde::Deserialize;

use crate::handler::{Handler, HandlerError, Outcome, TaskContext};

/// The payload of `noop`: an empty object.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoopPayload {}

/// Does nothing and succeeds.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoopHandler;

#[async_trait]
impl Handler for NoopHandler {
    type Payload = NoopPayload;

    async fn run(&self, _ctx: TaskContext, _payload: NoopPayload) -> Result<Outcome, HandlerError> {
        Ok(Outcome::Succeeded(None))
    }
}

#[cfg(test)]
mod tests {
    use leasehold_shared::TaskType;

    use super::*;

    #[tokio::test]
    async fn noop_succeeds_without_a_result() {
        let (ctx, _stopper) = TaskContext::standalone(TaskType::new("noop").unwrap(), None);
        let payload: NoopPayload = serde_json::from_value(serde_json::json!({})).unwrap();
        assert_eq!(
            NoopHandler.run(ctx, payload).await,
            Ok(Outcome::Succeeded(None))
        );
    }

    #[test]
    fn noop_refuses_fields() {
        assert!(serde_json::from_value::<NoopPayload>(serde_json::json!({"ms": 1})).is_err());
    }
}
