//! The backlog service: while this agent leads, refresh the backlog gauges
//! (`leasehold_queue_depth`, `leasehold_oldest_waiting_seconds`, `leasehold_dead_letters`,
//! see `metrics/backlog.rs`) from the overview every [`BACKLOG_REFRESH`]; while it does not,
//! export none of them.
//!
//! ```text
//!   every BACKLOG_REFRESH:  leading? ──yes──▶ task_overview ──▶ still leading? ──▶ set gauges
//!                                    └─no───▶ clear gauges (within one refresh of losing it)
//! ```
//!
//! Runs only when the agent serves `/metrics` (`--metrics-listen`). One overview query per
//! refresh on the leader alone: the query reads the claim, lease and dead-letter indexes, as
//! `leasehold types` does; it counts every waiting task, so with a deep queue the refresh
//! waits ten times as long as the read took when that is longer than [`BACKLOG_REFRESH`].
//!
//! When things fail: a failed or timed-out read is logged and leaves the last values; the
//! next refresh tries again.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use leasehold_shared::store::Overview;
use tokio_util::sync::CancellationToken;

use super::core::Core;
use super::metrics::BacklogRow;
use crate::grpc::read_cache::COST_FACTOR;

/// How often the leader reads the overview for the gauges.
pub const BACKLOG_REFRESH: Duration = Duration::from_secs(15);

pub(crate) struct Backlog {
    pub(crate) core: Arc<Core>,
}

impl Backlog {
    pub(crate) async fn run(self, stop: CancellationToken) {
        let core = &self.core;
        let limit = (core.settings.lease_ttl / 2).max(Duration::from_secs(1));
        loop {
            // The next read waits BACKLOG_REFRESH, or ten times as long as this one took when it
            // answered (the overview counts every waiting task: see grpc/read_cache.rs); after a
            // failure or a timeout, BACKLOG_REFRESH.
            let mut pause = BACKLOG_REFRESH;
            if core.leading.load(Ordering::Relaxed) {
                let started = tokio::time::Instant::now();
                let read = tokio::time::timeout(limit, core.store.task_overview()).await;
                if matches!(read, Ok(Ok(_))) {
                    pause = pause.max(started.elapsed().saturating_mul(COST_FACTOR));
                }
                match read {
                    // Leadership may have gone while the query ran: the gauges are only ever
                    // set by an agent that leads after reading them.
                    Ok(Ok(overview)) if core.leading.load(Ordering::Relaxed) => {
                        core.metrics.set_backlog(&rows(&overview));
                    }
                    Ok(Ok(_)) => core.metrics.clear_backlog(),
                    Ok(Err(error)) => tracing::warn!(%error, "backlog gauges: overview failed"),
                    Err(_) => tracing::warn!(?limit, "backlog gauges: overview timed out"),
                }
            } else {
                core.metrics.clear_backlog();
            }
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tokio::time::sleep(pause) => {}
            }
        }
        core.metrics.clear_backlog();
    }
}

/// The gauges' rows of an overview.
pub(crate) fn rows(overview: &Overview) -> Vec<BacklogRow> {
    overview
        .types
        .iter()
        .map(|t| BacklogRow {
            task_type: t.task_type.as_str().to_string(),
            depth: t.queued + t.scheduled + t.retrying,
            oldest_waiting_seconds: t.oldest_waiting.map_or(0.0, |d| d.as_secs_f64()),
            dead: t.dead,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use leasehold_shared::TaskType;
    use leasehold_shared::store::TypeCounts;

    use super::*;

    #[test]
    fn depth_is_every_waiting_task_and_no_waiting_task_is_age_zero() {
        let counts = |name: &str, oldest| TypeCounts {
            task_type: TaskType::new(name.to_string()).unwrap(),
            queued: 3,
            scheduled: 4,
            retrying: 5,
            running: 100,
            dead: 6,
            finished_last_minute: 100,
            dead_last_minute: 100,
            limit: None,
            paused: false,
            rate: None,
            shed_after: None,
            shed_last_minute: 100,
            per_key_limit: None,
            breaker: None,
            oldest_waiting: oldest,
        };
        let overview = Overview {
            types: vec![
                counts("a", Some(Duration::from_millis(1500))),
                counts("b", None),
            ],
            truncated: false,
            global_limit: None,
            global_paused: false,
            global_rate: None,
            now: chrono::DateTime::from_timestamp(1_800_000_000, 0).unwrap(),
        };
        assert_eq!(
            rows(&overview),
            [
                BacklogRow {
                    task_type: "a".into(),
                    depth: 12,
                    oldest_waiting_seconds: 1.5,
                    dead: 6,
                },
                BacklogRow {
                    task_type: "b".into(),
                    depth: 12,
                    oldest_waiting_seconds: 0.0,
                    dead: 6,
                },
            ]
        );
    }
}
