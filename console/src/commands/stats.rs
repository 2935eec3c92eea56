//! `leasehold stats` (GetStats): the whole queue at a glance — what waits, runs and is dead,
//! how long the oldest waiting task has been due, and per window (1 min, 15 min, 1 h of
//! database time) what succeeded, was dead-lettered or cancelled, the failed attempts, the
//! throughput and the failure rate. At most `STATS_MAX_AGE` (1 s) old, read by the agent
//! from the database's indexes.

use crate::client::Agent;
use crate::convert::stats::StatsView;
use crate::error::{Error, Result};
use crate::exit;
use crate::output::Out;
use crate::output::table::{Column, Table, WIDTH};
use crate::output::text::short_duration;

/// Runs `stats`.
pub async fn run(agent: &Agent, out: &mut Out) -> Result<u8> {
    let reply = agent.get_stats().await?;
    let stats = StatsView::from_wire(&reply).map_err(|e| Error::bad_wire("get the stats", e))?;
    if out.json_mode() {
        out.json(&stats)?;
    } else {
        out.lines(table(&stats))?;
    }
    Ok(exit::OK)
}

/// The text of `stats`: one line of live counts, one of the oldest waiting task, then a
/// table of the windows (at most 64 columns with counts below a billion).
pub fn table(s: &StatsView) -> Vec<String> {
    let oldest = s.oldest_waiting_ms.map_or_else(
        || "none waiting".to_owned(),
        |ms| {
            format!(
                "due for {}",
                short_duration(i64::try_from(ms).unwrap_or(i64::MAX))
            )
        },
    );
    let mut lines = vec![
        format!(
            "queued {} · later {} · retrying {} · running {} · dead {}",
            s.queued, s.scheduled, s.retrying, s.running, s.dead
        ),
        format!("oldest waiting: {oldest}"),
    ];
    let mut table = Table::new(vec![
        Column::new("WINDOW", 6, 6),
        Column::new("SUCCEEDED", 9, 20).right(),
        Column::new("DEAD", 4, 20).right(),
        Column::new("CANCELLED", 9, 20).right(),
        Column::new("FAILED", 6, 20).right(),
        Column::new("PER SEC", 7, 20).right(),
        Column::new("FAIL RATE", 9, 9).right(),
    ]);
    for w in &s.windows {
        table.row(vec![
            w.window.to_owned(),
            w.succeeded.to_string(),
            w.dead_lettered.to_string(),
            w.cancelled.to_string(),
            w.failed_attempts.to_string(),
            format!("{:.2}", w.throughput_per_sec),
            w.failure_rate
                .map_or_else(|| "-".to_owned(), |r| format!("{:.1}%", r * 100.0)),
        ]);
    }
    lines.extend(table.render(WIDTH));
    lines
}

#[cfg(test)]
mod tests {
    use leasehold_proto::v1;

    use super::*;

    fn view(oldest_waiting_ms: Option<u64>, big: u64) -> StatsView {
        let window = |window_ms, succeeded, failed_attempts| v1::StatsWindow {
            window_ms,
            succeeded,
            dead_lettered: big,
            cancelled: 1,
            failed_attempts,
        };
        StatsView::from_wire(&v1::GetStatsResponse {
            queued: 12,
            scheduled: 4,
            retrying: 2,
            running: 3,
            dead: big,
            oldest_waiting_ms,
            windows: vec![
                window(60_000, 60, 2),
                window(900_000, big, 20),
                window(3_600_000, 0, 0),
            ],
            now_ms: 1_764_588_000_000,
        })
        .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn the_text_says_every_number_and_fits_80_columns() {
        let lines = table(&view(Some(95_000), 7));
        assert_eq!(
            lines,
            [
                "queued 12 · later 4 · retrying 2 · running 3 · dead 7",
                "oldest waiting: due for 1m35s",
                "WINDOW  SUCCEEDED  DEAD  CANCELLED  FAILED  PER SEC  FAIL RATE",
                "1m             60     7          1       2     1.00       3.2%",
                "15m             7     7          1      20     0.01      74.1%",
                "1h              0     7          1       0     0.00          -",
            ]
        );
        let huge = table(&view(None, 999_999_999_999));
        assert_eq!(huge[1], "oldest waiting: none waiting");
        for line in &huge {
            assert!(
                crate::output::text::width(line) <= WIDTH,
                "{line:?} is wider than 80"
            );
        }
        assert!(huge[4].contains("999999999999"), "{:?}", huge[4]);
    }

    /// The example of `leasehold stats --help` (and of the README) is what the table prints.
    #[test]
    fn the_help_example_is_what_the_table_prints() {
        let window =
            |minutes: u64, succeeded, dead_lettered, cancelled, failed_attempts| v1::StatsWindow {
                window_ms: minutes * 60_000,
                succeeded,
                dead_lettered,
                cancelled,
                failed_attempts,
            };
        let stats = StatsView::from_wire(&v1::GetStatsResponse {
            queued: 12,
            scheduled: 4,
            retrying: 2,
            running: 3,
            dead: 7,
            oldest_waiting_ms: Some(95_000),
            windows: vec![
                window(1, 60, 1, 0, 2),
                window(15, 900, 3, 1, 20),
                window(60, 3600, 7, 2, 41),
            ],
            now_ms: 1_764_588_000_000,
        })
        .unwrap_or_else(|e| panic!("{e}"));
        let help = include_str!("../cli/mod.rs");
        let readme = include_str!("../../../README.md");
        for line in table(&stats) {
            assert!(
                help.contains(&format!("///   {line}\n")),
                "not in the help: {line:?}"
            );
            assert!(
                readme.contains(&format!("\n{line}\n")),
                "not in the README: {line:?}"
            );
        }
    }
}
