//! [`Services`]: the agent's long-lived services in one `JoinSet`, supervised.
//!
//! Every service is a future that runs until its stop token is cancelled. One that ends any
//! other way — it returned early or panicked — has failed: the agent can no longer keep its
//! promises (a dead heartbeat renews nothing and no longer enforces the local-safety
//! deadline; a dead completer writes no results), so it must stop rather than limp on.
//!
//! ```text
//!   service ends ─┬─ its stop token cancelled, no panic ──▶ expected (a shutdown stage)
//!                 └─ returned before, or panicked ───────▶ failure: log naming the service,
//!                      cancel `failed` and `forced` ──▶ the agent stops claiming, stops its
//!                      executions, releases their leases and `run` returns AgentError::Service
//!                      (`leasehold-agent run` exits 1)
//! ```
//!
//! Invariants: the first failure is the one reported; a panic is always a failure, even
//! during a shutdown; dropping [`Services`] aborts whatever still runs.
//!
//! When things fail: if the heartbeat itself failed, no lease can be proven any more, so the
//! agent drops its executions at once instead of giving them `stop_grace` (see `agent.rs`).
//! With the cargo feature `failpoints`, `LEASEHOLD_FAILPOINT` can make a service fail on
//! purpose for tests (see `failpoint`); without it nothing of that is compiled.

#[cfg(feature = "failpoints")]
mod failpoint;

use std::collections::HashMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, PoisonError};

use futures_util::FutureExt;
use tokio::task::{Id, JoinSet};
use tokio_util::sync::CancellationToken;

/// The service that renews leases and enforces the local-safety deadline.
pub(crate) const HEARTBEAT: &str = "heartbeat";
/// The service that writes finished attempts (completions, failures, releases).
pub(crate) const COMPLETER: &str = "completer";

/// A service of the agent ended while the agent was running.
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "the agent's {service} service {how} while the agent ran; the agent stopped claiming, stopped its executions and released their leases"
)]
pub struct ServiceFailed {
    /// The service's name (`heartbeat`, `claimer`, `completer`, …).
    pub service: &'static str,
    /// What happened: `returned early` or `panicked: <message>`.
    pub how: String,
}

/// The first failure, and the tokens cancelled by it.
struct Failure {
    first: Mutex<Option<ServiceFailed>>,
    failed: CancellationToken,
    forced: CancellationToken,
}

impl Failure {
    fn record(&self, service: &'static str, how: String) {
        tracing::error!(
            service,
            how = how.as_str(),
            "an agent service failed: stopping the agent"
        );
        let mut first = self.first.lock().unwrap_or_else(PoisonError::into_inner);
        if first.is_none() {
            *first = Some(ServiceFailed { service, how });
        }
        self.failed.cancel();
        self.forced.cancel();
    }
}

/// The agent's running services.
pub(crate) struct Services {
    set: JoinSet<()>,
    names: HashMap<Id, &'static str>,
    failure: Arc<Failure>,
}

impl Services {
    /// No services yet; a failure will cancel `forced` (the agent's forced-stop token).
    pub(crate) fn new(forced: CancellationToken) -> Self {
        Self {
            set: JoinSet::new(),
            names: HashMap::new(),
            failure: Arc::new(Failure {
                first: Mutex::new(None),
                failed: CancellationToken::new(),
                forced,
            }),
        }
    }

    /// Cancelled at the first failure.
    pub(crate) fn failed(&self) -> CancellationToken {
        self.failure.failed.clone()
    }

    /// The first failure, if a service failed.
    pub(crate) fn failure(&self) -> Option<ServiceFailed> {
        self.failure
            .first
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Runs `service` as `name`. Its end is expected once any of `ends` is cancelled (its
    /// stop token; the claimer also ends by itself when `--exit-when-idle` finds nothing).
    pub(crate) fn spawn<F>(&mut self, name: &'static str, ends: &[&CancellationToken], service: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        #[cfg(feature = "failpoints")]
        let service = failpoint::wrap(name, service);
        let ends: Vec<CancellationToken> = ends.iter().map(|t| (*t).clone()).collect();
        let failure = Arc::clone(&self.failure);
        let handle = self.set.spawn(async move {
            let ended = AssertUnwindSafe(service).catch_unwind().await;
            match ended {
                Err(panic) => failure.record(name, format!("panicked: {}", message(&*panic))),
                Ok(()) if ends.iter().any(CancellationToken::is_cancelled) => {}
                Ok(()) => failure.record(name, "returned early".to_owned()),
            }
        });
        self.names.insert(handle.id(), name);
    }

    /// Waits until every service named in `names` has ended (they must have been asked to).
    pub(crate) async fn join(&mut self, names: &[&str]) {
        while self.names.values().any(|n| names.contains(n)) {
            match self.set.join_next_with_id().await {
                Some(Ok((id, ()))) => {
                    self.names.remove(&id);
                }
                Some(Err(e)) => {
                    // Not a panic (caught in the task): aborted, which nothing here does.
                    tracing::warn!(error = %e, "a service task ended abnormally");
                    self.names.remove(&e.id());
                }
                None => self.names.clear(),
            }
        }
    }
}

/// The text of a panic payload.
fn message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-text panic".to_owned())
}
