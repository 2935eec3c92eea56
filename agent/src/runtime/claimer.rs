//! The claimer service: claims up to the free slots in one statement and starts executions.
//!
//! It claims again at once while claims come back full, and otherwise sleeps until woken: by a
//! NOTIFY (an enqueue), by a freed slot, or by the jittered poll interval (NOTIFY is a hint,
//! polling always runs), or — when a rate limit held the claim back — by the moment that
//! limit lets the next start in. Woken by a freed slot while nearly full, it waits a moment for more
//! slots so claims stay batched.
//!
//! When things fail: a claim that fails or times out pauses claiming with exponential backoff
//! ([`CLAIM_BACKOFF`], each pause jittered ±10 %; claims pause while the database is away;
//! running tasks are unaffected). With `--exit-when-idle` a claim that comes back short while
//! nothing is held asks the idle watcher (`idle.rs`) to look at once; the watcher decides when
//! the run ends.

use std::sync::Arc;
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use leasehold_shared::store::ClaimParams;
use tokio_util::sync::CancellationToken;

use super::core::{BatchTimings, Core, bump};
use super::executor;
use super::feed::FeedEvent;
use super::queue::ClaimQueue;
use super::renewal::now;

const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(5);
/// Pauses after failed claims: [`BACKOFF_MIN`] doubling to [`BACKOFF_MAX`], for as long as
/// claims fail; a claim that succeeds starts the sequence again.
const CLAIM_BACKOFF: ExponentialBuilder = ExponentialBuilder::new()
    .with_min_delay(BACKOFF_MIN)
    .with_max_delay(BACKOFF_MAX)
    .without_max_times();
/// Nearly-full wake-ups wait this long for more slots to free.
const FILL_WAIT: Duration = Duration::from_millis(1);

pub(crate) struct Claimer {
    pub(crate) core: Arc<Core>,
    /// Where claims go (the store; the in-memory queue in the unit tests).
    pub(crate) queue: Arc<dyn ClaimQueue>,
    /// With `--exit-when-idle`: the idle watcher's wake-up.
    pub(crate) idle_check: Option<Arc<tokio::sync::Notify>>,
}

fn jittered(d: Duration) -> Duration {
    // ±10 % so agents started together do not poll in step.
    let factor = 0.9 + fastrand::f64() * 0.2;
    d.mul_f64(factor)
}

/// The next pause of a failing claimer (the cap should the sequence end, which
/// [`CLAIM_BACKOFF`] never does).
fn next_pause(backoff: &mut impl Iterator<Item = Duration>) -> Duration {
    backoff.next().unwrap_or(BACKOFF_MAX)
}

impl Claimer {
    /// Runs `claim_workers` claim loops side by side: while one claim is in flight, another can
    /// take the slots freed meanwhile, so the database always has work from this agent. Each
    /// claim first reserves its slots, so together they never take more than the free slots.
    pub(crate) async fn run(self, stop: CancellationToken) {
        let workers = (0..self.core.settings.claim_workers.max(1)).map(|_| self.worker(&stop));
        futures_util::future::join_all(workers).await;
    }

    async fn worker(&self, stop: &CancellationToken) {
        let stop = stop.clone();
        let core = &self.core;
        let mut backoff = CLAIM_BACKOFF.build();
        let params = |batch: u32| ClaimParams {
            owner: core.id.clone(),
            task_types: core.types.clone(),
            batch,
            lease_ttl: core.settings.lease_ttl,
        };
        // The server cancels a claim statement after lease_ttl / 2 (at least 1 s; see agent.rs),
        // and then nothing was taken. The client waits a second longer, so it normally hears that
        // error instead of guessing; only a silent network leaves a claim whose outcome is
        // unknown (its rows, if any, are recovered after the TTL).
        let claim_timeout =
            (core.settings.lease_ttl / 2).max(Duration::from_secs(1)) + Duration::from_secs(1);
        loop {
            if stop.is_cancelled() {
                return;
            }
            let limit = core.book.limit();
            let batch = core.settings.claim_batch as usize;
            let free = core.book.free();
            if free == 0 {
                if self.wait(&stop, core.settings.poll_interval).await {
                    return;
                }
                continue;
            }
            if free * 4 < limit.min(batch) {
                tokio::time::sleep(FILL_WAIT).await;
            }
            let reserved = core.book.reserve(batch);
            if reserved == 0 {
                continue;
            }
            let want = u32::try_from(reserved).unwrap_or(u32::MAX);
            // On tokio's clock: the same as the monotonic clock unless a test paused time.
            let claimed_at = now();
            let wakes_before = core.wakes.load(std::sync::atomic::Ordering::SeqCst);
            // Not raced against `stop`: a claim dropped after its commit would leave rows this
            // agent owns but never runs. It is bounded by claim_timeout.
            let claimed =
                tokio::time::timeout(claim_timeout, self.queue.task_claim(params(want))).await;
            if !matches!(claimed, Ok(Ok(_))) {
                core.book.unreserve(reserved);
            }
            let claim = match claimed {
                Ok(Ok(batch)) => {
                    core.metrics.claim_statement(true);
                    core.metrics.database(true);
                    backoff = CLAIM_BACKOFF.build();
                    batch
                }
                Ok(Err(error)) => {
                    core.metrics.claim_statement(false);
                    if error.is_connection() {
                        core.metrics.database(false);
                    }
                    let retry_in = next_pause(&mut backoff);
                    tracing::warn!(%error, ?retry_in, "claim failed; claims paused");
                    if self.pause(&stop, retry_in).await {
                        return;
                    }
                    continue;
                }
                Err(_) => {
                    core.metrics.claim_statement(false);
                    core.metrics.database(false);
                    let retry_in = next_pause(&mut backoff);
                    tracing::warn!(timeout = ?claim_timeout, ?retry_in, "claim timed out; claims paused");
                    if self.pause(&stop, retry_in).await {
                        return;
                    }
                    continue;
                }
            };
            let n = claim.tasks.len();
            bump(&core.stats.claimed, n as u64);
            let now = claim.now;
            let mut timings = BatchTimings::default();
            let mut acquired = Vec::new();
            for task in claim.tasks {
                executor::start(
                    &self.core,
                    task,
                    claimed_at,
                    now,
                    &mut timings,
                    &mut acquired,
                );
            }
            if !acquired.is_empty() {
                core.feed.push(FeedEvent::Acquired {
                    now,
                    leases: acquired,
                });
            }
            core.book.unreserve(reserved);
            core.update_active();
            if n as u32 >= want {
                continue; // a full batch: more is probably waiting
            }
            if core.wakes.load(std::sync::atomic::Ordering::SeqCst) != wakes_before {
                // Woken while claiming: the claim may have looked before the task arrived, and
                // the wake-up may have gone to a worker with no slot to claim with.
                continue;
            }
            if let Some(check) = &self.idle_check
                && core.book.len() == 0
                && core.book.reserved() == 0
            {
                check.notify_one();
            }
            let wait = if claim.contended {
                Duration::from_millis(20)
            } else if let Some(rate_wait) = claim.rate_wait {
                // A rate limit's window is full: claim again when enough of its oldest starts
                // have left it (a millisecond late, so the database's clock has passed it too,
                // and up to 5 ms more so agents that were told the same do not all claim at
                // once and find the scope's lock taken).
                let spread = Duration::from_micros(fastrand::u64(0..5_000));
                (rate_wait + Duration::from_millis(1) + spread).min(core.settings.poll_interval)
            } else {
                jittered(core.settings.poll_interval)
            };
            if self.wait(&stop, wait).await {
                return;
            }
        }
    }

    /// Waits for a wake-up or `timeout`; true when stopped.
    async fn wait(&self, stop: &CancellationToken, timeout: Duration) -> bool {
        let notified = self.core.wake.notified();
        tokio::select! {
            _ = stop.cancelled() => true,
            _ = notified => false,
            _ = tokio::time::sleep(timeout) => false,
        }
    }

    /// Pauses claiming for `retry_in`, jittered; true when stopped.
    async fn pause(&self, stop: &CancellationToken, retry_in: Duration) -> bool {
        let d = jittered(retry_in);
        tokio::select! {
            _ = stop.cancelled() => true,
            _ = tokio::time::sleep(d) => false,
        }
    }
}

#[cfg(test)]
mod tests;
