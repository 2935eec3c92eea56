//! The whole queue at a glance ([`Store::task_stats`](super::Store::task_stats)): what waits,
//! runs and is dead now, and what finished and failed in the last minute, quarter hour and
//! hour, all by the database clock.
//!
//! Invariant: every number is read through an index, never by a scan of the finished
//! history: the live counts through the claim and lease indexes of the unfinished tasks (as
//! the overview), dead tasks through the dead-letter index, the windows' finishes through the
//! index of finished tasks on `finished_at` and the windows' earlier failed attempts through
//! the index of failed attempts on `finished_at`, each read from the start of the longest
//! window (an hour) on. The statements are `task_stats.sql` of each backend.
//!
//! What counts as what:
//!
//! ```text
//!   queued      status queued, available_at <= now        ┐ waiting: a claim could take
//!   retrying    status retry_wait (due or not)             │ the due ones now; the oldest
//!   scheduled   status queued, available_at > now          ┘ due one gives oldest_waiting
//!   running     running or cancel_requested
//!   dead        status dead (the dead-letter queue)
//!   succeeded   finished in the window as succeeded or partially_succeeded
//!   dead_lettered / cancelled   finished in the window with that status
//!   failed_attempts   attempts that ended `failed` in the window: the retried ones (rows of
//!                     the attempts table) and the last one of a task that failed for good
//! ```
//!
//! When things fail: one statement (SQLite: one read transaction), so the numbers are of one
//! snapshot; an error is returned as it is and nothing is written.

use std::time::Duration;

use chrono::{DateTime, Utc};

/// The windows [`QueueStats::windows`] covers, in this order, each ending at the database's
/// now.
pub const STATS_WINDOWS: [Duration; 3] = [
    Duration::from_secs(60),
    Duration::from_secs(15 * 60),
    Duration::from_secs(60 * 60),
];

/// The whole queue now and over the last [`STATS_WINDOWS`], as of `now` (database time).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueStats {
    /// Queued and due.
    pub queued: u64,
    /// Queued, not yet due.
    pub scheduled: u64,
    /// Waiting to retry (due or not).
    pub retrying: u64,
    /// Running or cancel_requested.
    pub running: u64,
    /// In the dead-letter queue.
    pub dead: u64,
    /// How long the oldest waiting task (of any type) has been due; `None` when none waits.
    pub oldest_waiting: Option<Duration>,
    /// One per [`STATS_WINDOWS`] entry, in that order.
    pub windows: Vec<StatsWindow>,
    pub now: DateTime<Utc>,
}

/// What finished and failed in one window ending at the database's now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatsWindow {
    pub window: Duration,
    /// Succeeded or partially succeeded.
    pub succeeded: u64,
    /// Dead-lettered.
    pub dead_lettered: u64,
    /// Cancelled (by an operator, a deadline, shedding).
    pub cancelled: u64,
    /// Attempts that ended in failure, retried or not.
    pub failed_attempts: u64,
}

impl StatsWindow {
    /// Successes per second over the window.
    pub fn throughput(&self) -> f64 {
        // Counts and windows far below 2^52: exact as f64.
        self.succeeded as f64 / self.window.as_secs_f64()
    }

    /// Failed attempts / (failed attempts + successes); `None` when both are 0.
    pub fn failure_rate(&self) -> Option<f64> {
        let total = self.failed_attempts + self.succeeded;
        (total > 0).then(|| self.failed_attempts as f64 / total as f64)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    fn window(secs: u64, succeeded: u64, failed_attempts: u64) -> StatsWindow {
        StatsWindow {
            window: Duration::from_secs(secs),
            succeeded,
            dead_lettered: 0,
            cancelled: 0,
            failed_attempts,
        }
    }

    #[test]
    fn throughput_is_successes_per_second_of_the_window() {
        assert_eq!(window(60, 30, 9).throughput(), 0.5);
        assert_eq!(window(900, 0, 9).throughput(), 0.0);
    }

    #[test]
    fn failure_rate_counts_failed_attempts_against_successes_and_is_absent_without_either() {
        assert_eq!(window(60, 3, 1).failure_rate(), Some(0.25));
        assert_eq!(window(60, 0, 4).failure_rate(), Some(1.0));
        assert_eq!(window(60, 4, 0).failure_rate(), Some(0.0));
        assert_eq!(window(60, 0, 0).failure_rate(), None);
    }
}
