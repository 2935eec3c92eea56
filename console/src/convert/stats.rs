//! Queue stats from the wire (`leasehold stats`; see the parent module for conventions).

use leasehold_proto::v1;
use serde::Serialize;

use super::{Timestamp, WireError, time};

/// The windows an agent sends, in this order, with their names.
pub const WINDOWS: [(u64, &str); 3] = [(60_000, "1m"), (900_000, "15m"), (3_600_000, "1h")];

/// One window ending at the reply's `now`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WindowView {
    /// `1m`, `15m` or `1h`.
    pub window: &'static str,
    pub window_ms: u64,
    /// Tasks that succeeded (fully or partially) in the window.
    pub succeeded: u64,
    /// Tasks dead-lettered in the window.
    pub dead_lettered: u64,
    /// Tasks cancelled in the window.
    pub cancelled: u64,
    /// Attempts that ended in failure in the window, retried or not.
    pub failed_attempts: u64,
    /// Successes per second over the window.
    pub throughput_per_sec: f64,
    /// failed_attempts / (failed_attempts + succeeded); `null` when both are 0.
    pub failure_rate: Option<f64>,
}

/// `leasehold stats`: the whole queue now and over the last minute, 15 minutes and hour.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StatsView {
    /// Queued and due.
    pub queued: u64,
    /// Queued, due later.
    pub scheduled: u64,
    /// Waiting to retry.
    pub retrying: u64,
    /// Running or asked to cancel.
    pub running: u64,
    /// In the dead-letter queue.
    pub dead: u64,
    /// How long (ms) the oldest waiting task has been due; `null` when none waits.
    pub oldest_waiting_ms: Option<u64>,
    /// 1m, 15m, 1h.
    pub windows: Vec<WindowView>,
    /// Database time of the numbers.
    pub now: Timestamp,
}

impl StatsView {
    /// Converts a `GetStats` reply: exactly the three windows, in order.
    pub fn from_wire(r: &v1::GetStatsResponse) -> Result<Self, WireError> {
        if r.windows.len() != WINDOWS.len() {
            return Err(WireError::Broken(format!(
                "{} stats windows where 3 (1m, 15m, 1h) were expected",
                r.windows.len()
            )));
        }
        let windows = r
            .windows
            .iter()
            .zip(WINDOWS)
            .map(|(w, (ms, name))| {
                if w.window_ms != ms {
                    return Err(WireError::Broken(format!(
                        "a stats window of {} ms where the {name} one ({ms} ms) was expected",
                        w.window_ms
                    )));
                }
                let total = w.failed_attempts.saturating_add(w.succeeded);
                Ok(WindowView {
                    window: name,
                    window_ms: ms,
                    succeeded: w.succeeded,
                    dead_lettered: w.dead_lettered,
                    cancelled: w.cancelled,
                    failed_attempts: w.failed_attempts,
                    // Counts far below 2^52: exact as f64.
                    throughput_per_sec: w.succeeded as f64 * 1000.0 / ms as f64,
                    failure_rate: (total > 0).then(|| w.failed_attempts as f64 / total as f64),
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            queued: r.queued,
            scheduled: r.scheduled,
            retrying: r.retrying,
            running: r.running,
            dead: r.dead,
            oldest_waiting_ms: r.oldest_waiting_ms,
            windows,
            now: time("now_ms", r.now_ms)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(windows: Vec<v1::StatsWindow>) -> v1::GetStatsResponse {
        v1::GetStatsResponse {
            windows,
            now_ms: 1_764_588_000_000,
            ..Default::default()
        }
    }

    fn window(window_ms: u64, succeeded: u64, failed_attempts: u64) -> v1::StatsWindow {
        v1::StatsWindow {
            window_ms,
            succeeded,
            failed_attempts,
            ..Default::default()
        }
    }

    #[test]
    fn rates_are_derived_per_window() {
        let view = StatsView::from_wire(&reply(vec![
            window(60_000, 30, 10),
            window(900_000, 0, 0),
            window(3_600_000, 0, 5),
        ]))
        .unwrap_or_else(|e| panic!("{e}"));
        let w = &view.windows;
        assert_eq!(
            (w[0].throughput_per_sec, w[0].failure_rate),
            (0.5, Some(0.25))
        );
        assert_eq!((w[1].throughput_per_sec, w[1].failure_rate), (0.0, None));
        assert_eq!(w[2].failure_rate, Some(1.0));
        assert_eq!([w[0].window, w[1].window, w[2].window], ["1m", "15m", "1h"]);
    }

    #[test]
    fn missing_or_misordered_windows_break_the_contract() {
        assert!(StatsView::from_wire(&reply(vec![window(60_000, 1, 1)])).is_err());
        let swapped = vec![
            window(900_000, 0, 0),
            window(60_000, 0, 0),
            window(3_600_000, 0, 0),
        ];
        assert!(StatsView::from_wire(&reply(swapped)).is_err());
        let mut no_time = reply(vec![
            window(60_000, 0, 0),
            window(900_000, 0, 0),
            window(3_600_000, 0, 0),
        ]);
        no_time.now_ms = 0;
        assert!(StatsView::from_wire(&no_time).is_err());
    }
}
