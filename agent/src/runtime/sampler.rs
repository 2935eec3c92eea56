//! The history sampler service: while this agent leads, record the queue's history — per type
//! and minute of the database clock, enqueued, succeeded, failed attempts, dead-lettered,
//! cancelled and the depth — in `queue_history` (`store/queue_history.rs` says how each count
//! is read without scanning the finished history), and delete rows older than a day.
//!
//! ```text
//!   not leading ──(maintenance elects us: leader_term set)──▶ leading
//!   leading: pass (writes each complete minute once it is HISTORY_SETTLE past its end,
//!                  backfills minutes never written up to an hour back, recounts the last two)
//!            ──▶ sleep until the next minute + HISTORY_SETTLE (database clock)
//!            every HOUSEKEEPING_EVERY: delete history older than HISTORY_RETENTION
//! ```
//!
//! Each pass is idempotent (counts are recounted, never added), so a new leader, or two agents
//! that both believe they lead, write the same rows. `leasehold_tasks_enqueued_total` rises by
//! what each pass newly counted: on the agent that made the pass, the leader.
//!
//! When things fail: a failed pass is logged and tried again after [`RETRY_AFTER`]; minutes it
//! missed are backfilled by the next pass that succeeds (at most an hour back).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use chrono::{DateTime, Utc};
use leasehold_shared::store::{HistoryPruneParams, HistorySampleParams};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::core::Core;

/// Pause after a failed pass, and how often a follower looks whether it leads now.
const RETRY_AFTER: Duration = Duration::from_secs(5);
/// How often the leader deletes history past retention.
const HOUSEKEEPING_EVERY: Duration = Duration::from_secs(300);

pub(crate) struct Sampler {
    pub(crate) core: Arc<Core>,
}

impl Sampler {
    pub(crate) async fn run(self, stop: CancellationToken) {
        let idle = self
            .core
            .settings
            .poll_interval
            .clamp(Duration::from_millis(100), RETRY_AFTER);
        let mut pruned_at: Option<Instant> = None;
        loop {
            let wait = if self.core.leader_term.load(Ordering::Relaxed) == 0 {
                idle
            } else {
                if pruned_at.is_none_or(|at| at.elapsed() >= HOUSEKEEPING_EVERY) {
                    self.prune().await;
                    pruned_at = Some(Instant::now());
                }
                self.pass().await.unwrap_or(RETRY_AFTER)
            };
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// One pass; returns how long to sleep before the next (`None`: it failed).
    async fn pass(&self) -> Option<Duration> {
        let params = HistorySampleParams::default();
        let settle = params.settle;
        let limit = (self.core.settings.lease_ttl / 2).max(Duration::from_secs(5));
        let sample =
            match tokio::time::timeout(limit, self.core.store.queue_history_sample(params)).await {
                Ok(Ok(sample)) => sample,
                Ok(Err(error)) => {
                    tracing::warn!(%error, "queue history sampling failed");
                    return None;
                }
                Err(_) => {
                    tracing::warn!(?limit, "queue history sampling timed out");
                    return None;
                }
            };
        for (task_type, n) in &sample.newly_enqueued {
            self.core.metrics.enqueued(task_type.as_str(), *n);
        }
        if sample.written.len() > 1 {
            tracing::info!(
                minutes = sample.written.len(),
                "queue history: wrote missed minutes"
            );
        }
        Some(
            sample
                .now
                .map_or(RETRY_AFTER, |now| until_next(now, settle)),
        )
    }

    async fn prune(&self) {
        match self
            .core
            .store
            .queue_history_prune(HistoryPruneParams::default())
            .await
        {
            Ok(0) => {}
            Ok(deleted) => tracing::info!(deleted, "deleted queue history past retention"),
            Err(error) => tracing::warn!(%error, "queue history retention failed"),
        }
    }
}

/// From `now` to the next time a minute is `settle` past its end (and a little more, so the
/// database's now has surely passed it).
fn until_next(now: DateTime<Utc>, settle: Duration) -> Duration {
    let settle_delta = chrono::TimeDelta::from_std(settle).unwrap_or_default();
    let minute = leasehold_shared::store::queue_history::minute_of(now - settle_delta);
    let next = minute + chrono::TimeDelta::minutes(1) + settle_delta;
    (next - now).to_std().unwrap_or_default() + Duration::from_millis(200)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn the_next_pass_is_just_past_the_next_minute_and_settle() {
        let now = Utc
            .with_ymd_and_hms(2026, 12, 7, 10, 0, 20)
            .single()
            .unwrap();
        let wait = until_next(now, Duration::from_secs(10));
        assert_eq!(wait, Duration::from_millis(50_200));
        let early = Utc
            .with_ymd_and_hms(2026, 12, 7, 10, 0, 5)
            .single()
            .unwrap();
        assert_eq!(
            until_next(early, Duration::from_secs(10)),
            Duration::from_millis(5_200)
        );
    }
}
