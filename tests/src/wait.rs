//! Polling waits: tests wait for an observable condition instead of sleeping a fixed time.

use std::future::Future;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

/// How often [`wait_until`] re-checks its condition.
pub const POLL_INTERVAL: Duration = Duration::from_millis(20);

/// Polls `cond` every [`POLL_INTERVAL`] until it returns `Ok(true)`.
///
/// Fails with an error naming `what` when `timeout` passes first, and at once (with `what` as
/// context) when `cond` itself fails. The condition is always checked at least once, and once
/// more after the deadline, so a slow poll is not mistaken for a timeout.
pub async fn wait_until<F, Fut>(what: &str, timeout: Duration, mut cond: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<bool>>,
{
    let start = Instant::now();
    loop {
        let past_deadline = start.elapsed() >= timeout;
        if cond()
            .await
            .with_context(|| format!("while waiting until {what}"))?
        {
            return Ok(());
        }
        if past_deadline {
            bail!(
                "timed out after {:.1?} waiting until {what}",
                start.elapsed()
            );
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}
