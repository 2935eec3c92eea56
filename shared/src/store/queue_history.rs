//! Queue history (issue 26): per task type and minute of the database clock, how many tasks
//! were enqueued, succeeded, failed an attempt, were dead-lettered or cancelled, and the queue
//! depth just after the minute ended. The leader's sampler writes it
//! ([`Store::queue_history_sample`](super::Store::queue_history_sample)), GetHistory reads it
//! ([`Store::queue_history_read`](super::Store::queue_history_read)).
//!
//! ```text
//!   pass at T (database clock), M = the minute T is in
//!     mark(M+1) := tasks' id sequence as read now (before M+1 began)
//!     minutes to write: complete ones (m + 1 min + settle <= T) of the last `backfill`
//!                       that were never counted, and always the last `recount` ones again
//!     enqueued(m)  = tasks with id > mark(<= m) and created_at in [m, m+1)   (primary key)
//!     finished(m)  = tasks finished within m, by status                      (finished index)
//!     failed(m)    = attempts that failed within m, retried or not           (attempt indexes)
//!     depth(last)  = waiting and running now, when `last` ended < depth_within ago
//!     upsert rows: counts replaced (a second pass recounts to the same value), depth kept
//! ```
//!
//! The planning here is the same for both backends; each backend runs the statements.
//!
//! When things fail: the pass is one transaction (serialised between agents: PostgreSQL takes
//! an advisory lock, SQLite its write lock); an error writes nothing and the next pass does it
//! again. A minute before the first mark ever written cannot have its enqueues counted through
//! the primary key: such minutes are not written (history begins with the first mark).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use chrono::{DateTime, DurationRound, TimeDelta, Utc};

use crate::domain::validate::check_range;
use crate::domain::{TaskType, ValidationError};

/// Most minutes GetHistory returns (a day, the retention).
pub const HISTORY_MAX_MINUTES: u32 = 1440;
/// Minutes GetHistory returns when the request says none.
pub const HISTORY_DEFAULT_MINUTES: u32 = 60;
/// How long rows are kept: the leader deletes older ones.
pub const HISTORY_RETENTION: Duration = Duration::from_secs(24 * 3600);
/// A minute is written once the database clock is this far past its end, so enqueues and
/// completions committed in its last moments are in.
pub const HISTORY_SETTLE: Duration = Duration::from_secs(10);
/// Missed minutes (leader down, leadership moved) written after the fact, at most this many back.
pub const HISTORY_BACKFILL_MINUTES: u32 = 60;
/// The newest minutes counted again on every pass, for enqueues committed a little late.
pub const HISTORY_RECOUNT_MINUTES: u32 = 2;
/// The depth is sampled for the last complete minute only when it ended less than this ago;
/// later, the depth at its end is unknown (NULL).
pub const HISTORY_DEPTH_WITHIN: Duration = Duration::from_secs(30);
/// Rows deleted per retention statement.
pub const HISTORY_PRUNE_BATCH: u32 = 1000;

const MINUTE: TimeDelta = TimeDelta::minutes(1);

/// One sampler pass.
#[derive(Debug, Clone)]
pub struct HistorySampleParams {
    /// See [`HISTORY_SETTLE`].
    pub settle: Duration,
    /// See [`HISTORY_BACKFILL_MINUTES`] (1..=1440).
    pub backfill: u32,
    /// See [`HISTORY_RECOUNT_MINUTES`] (0..=10).
    pub recount: u32,
    /// See [`HISTORY_DEPTH_WITHIN`].
    pub depth_within: Duration,
}

impl Default for HistorySampleParams {
    fn default() -> Self {
        Self {
            settle: HISTORY_SETTLE,
            backfill: HISTORY_BACKFILL_MINUTES,
            recount: HISTORY_RECOUNT_MINUTES,
            depth_within: HISTORY_DEPTH_WITHIN,
        }
    }
}

impl HistorySampleParams {
    pub fn validate(&self) -> Result<(), ValidationError> {
        check_range("backfill", self.backfill, 1..=HISTORY_MAX_MINUTES)?;
        check_range("recount", self.recount, 0..=10)?;
        check_range("settle_ms", self.settle.as_millis(), 0..=59_000)?;
        check_range("depth_within_ms", self.depth_within.as_millis(), 0..=60_000).map(drop)
    }
}

/// What a sampler pass did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HistorySample {
    /// The database's now at the pass.
    pub now: Option<DateTime<Utc>>,
    /// The minutes whose counts it wrote, oldest first.
    pub written: Vec<DateTime<Utc>>,
    /// The minute whose depth it sampled.
    pub depth_minute: Option<DateTime<Utc>>,
    /// Per type, how many enqueues this pass counted that earlier passes had not (for the
    /// `leasehold_tasks_enqueued_total` counter).
    pub newly_enqueued: BTreeMap<TaskType, u64>,
}

/// Read the history of one type (or of the whole queue).
#[derive(Debug, Clone)]
pub struct HistoryReadParams {
    /// `None`: every type summed.
    pub task_type: Option<TaskType>,
    /// 1..=[`HISTORY_MAX_MINUTES`].
    pub minutes: u32,
}

impl HistoryReadParams {
    pub fn validate(&self) -> Result<(), ValidationError> {
        check_range("minutes", self.minutes, 1..=HISTORY_MAX_MINUTES).map(drop)
    }
}

/// Retention of the history: rows of minutes older than `older_than` go, `batch` per statement
/// (small batches: no long lock on the table).
#[derive(Debug, Clone)]
pub struct HistoryPruneParams {
    pub older_than: Duration,
    pub batch: u32,
}

impl Default for HistoryPruneParams {
    fn default() -> Self {
        Self {
            older_than: HISTORY_RETENTION,
            batch: HISTORY_PRUNE_BATCH,
        }
    }
}

impl HistoryPruneParams {
    pub fn validate(&self) -> Result<(), ValidationError> {
        check_range("batch", self.batch, 1..=100_000)?;
        check_range("older_than_s", self.older_than.as_secs(), 60..=366 * 86400).map(drop)
    }
}

/// The counts of one minute (of one type, or summed over types).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HistoryCounts {
    pub enqueued: u64,
    pub succeeded: u64,
    pub failed: u64,
    pub dead_lettered: u64,
    pub cancelled: u64,
}

impl HistoryCounts {
    fn add(&mut self, other: &HistoryCounts) {
        self.enqueued += other.enqueued;
        self.succeeded += other.succeeded;
        self.failed += other.failed;
        self.dead_lettered += other.dead_lettered;
        self.cancelled += other.cancelled;
    }
}

/// One minute of history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistoryPoint {
    /// The minute's start (database clock).
    pub minute: DateTime<Utc>,
    pub counts: HistoryCounts,
    /// Queued + retry_wait just after the minute ended; `None` when unknown.
    pub waiting: Option<u64>,
    /// Running + cancel_requested just after the minute ended; `None` when unknown.
    pub running: Option<u64>,
    /// Whether the sampler has written this minute's counts (zeros of a minute it has not
    /// written yet mean "not known", not "nothing happened").
    pub counted: bool,
}

/// The answer of a history read: every minute of the window, oldest first.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueHistory {
    pub now: DateTime<Utc>,
    pub points: Vec<HistoryPoint>,
}

/// A stored row (backends decode to this).
#[derive(Debug, Clone, PartialEq)]
pub struct HistoryRow {
    pub task_type: TaskType,
    pub minute: DateTime<Utc>,
    pub counts: HistoryCounts,
    pub waiting: Option<u64>,
    pub running: Option<u64>,
    /// With the depth: the available time of the longest-due task waiting then (`None`: none
    /// waited, or no depth).
    pub oldest_waiting_at: Option<DateTime<Utc>>,
}

/// A stored minute (backends decode to this).
#[derive(Debug, Clone, PartialEq)]
pub struct HistoryMinute {
    pub minute: DateTime<Utc>,
    pub id_mark: Option<i64>,
    pub counted: bool,
    pub depth_sampled: bool,
}

/// The start of the minute `t` is in.
pub fn minute_of(t: DateTime<Utc>) -> DateTime<Utc> {
    t.duration_trunc(MINUTE).unwrap_or(t)
}

fn delta(d: Duration) -> TimeDelta {
    TimeDelta::from_std(d).unwrap_or(TimeDelta::zero())
}

/// What a pass at `now` must do, decided from the stored minutes.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SamplePlan {
    /// Minutes to (re)write, oldest first.
    pub(crate) minutes: Vec<DateTime<Utc>>,
    /// The id mark valid for the oldest of them (every task created in or after it has a
    /// higher id).
    pub(crate) mark: i64,
    /// The minute whose depth is to be sampled now.
    pub(crate) depth_minute: Option<DateTime<Utc>>,
}

impl SamplePlan {
    /// `[from, to)`: the range of times the counts read.
    pub(crate) fn range(&self) -> Option<(DateTime<Utc>, DateTime<Utc>)> {
        Some((*self.minutes.first()?, *self.minutes.last()? + MINUTE))
    }
}

/// Plans a pass at `now`. `known`: the stored minutes from [`plan_from`] on; `mark_before`: the
/// newest stored mark of a minute before that (minute, mark).
pub(crate) fn plan(
    params: &HistorySampleParams,
    now: DateTime<Utc>,
    known: &[HistoryMinute],
    mark_before: Option<(DateTime<Utc>, i64)>,
) -> Option<SamplePlan> {
    let last = minute_of(now - delta(params.settle)) - MINUTE;
    let first = last - MINUTE * (params.backfill as i32 - 1);
    let recount_from = last - MINUTE * (params.recount as i32 - 1).max(0);
    let by_minute: BTreeMap<DateTime<Utc>, &HistoryMinute> =
        known.iter().map(|m| (m.minute, m)).collect();
    // Marks valid for each minute: the newest of a minute at or before it.
    let mut mark = mark_before;
    let mut chosen = Vec::new();
    let mut first_mark = None;
    let mut m = first;
    while m <= last {
        if let Some(k) = by_minute.get(&m)
            && let Some(id) = k.id_mark
        {
            mark = Some((m, mark.map_or(id, |(_, old)| old.max(id))));
        }
        let counted = by_minute.get(&m).is_some_and(|k| k.counted);
        let due = !counted || (params.recount > 0 && m >= recount_from);
        if due && let Some((_, id)) = mark {
            if first_mark.is_none() {
                first_mark = Some(id);
            }
            chosen.push(m);
        }
        m += MINUTE;
    }
    let mark = first_mark?;
    let depth_minute = (chosen.last() == Some(&last)
        && now - (last + MINUTE) <= delta(params.depth_within)
        && !by_minute.get(&last).is_some_and(|k| k.depth_sampled))
    .then_some(last);
    Some(SamplePlan {
        minutes: chosen,
        mark,
        depth_minute,
    })
}

/// The first minute whose stored row [`plan`] needs.
pub(crate) fn plan_from(params: &HistorySampleParams, now: DateTime<Utc>) -> DateTime<Utc> {
    minute_of(now - delta(params.settle)) - MINUTE * params.backfill as i32
}

/// The minute the mark read at `read_at` is stored for: the next whole minute at least a
/// second after the read, so it was read before that minute began.
pub(crate) fn mark_minute(read_at: DateTime<Utc>) -> DateTime<Utc> {
    minute_of(read_at + TimeDelta::seconds(1)) + MINUTE
}

/// Counts read by a pass, by (type, minute), merged into the rows to upsert.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    rows: BTreeMap<(TaskType, DateTime<Utc>), HistoryCounts>,
    depth: BTreeMap<TaskType, Depth>,
}

/// One type's depth as the sampler read it.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Depth {
    pub(crate) waiting: u64,
    pub(crate) running: u64,
    /// The available time of the longest-due waiting task (`None` when none waits).
    pub(crate) oldest_waiting_at: Option<DateTime<Utc>>,
}

impl Tally {
    pub(crate) fn counts(
        &mut self,
        task_type: TaskType,
        minute: DateTime<Utc>,
    ) -> &mut HistoryCounts {
        self.rows.entry((task_type, minute)).or_default()
    }

    pub(crate) fn depth(&mut self, task_type: TaskType, depth: Depth) {
        self.depth.insert(task_type, depth);
    }

    /// The rows to upsert for `plan`: every (type, minute) of a planned minute with a count,
    /// an existing row (recounted, to zero if its tasks went) or a depth.
    pub(crate) fn rows(mut self, plan: &SamplePlan, existing: &[HistoryRow]) -> Vec<HistoryRow> {
        let planned: BTreeSet<DateTime<Utc>> = plan.minutes.iter().copied().collect();
        self.rows.retain(|(_, m), _| planned.contains(m));
        for row in existing {
            if planned.contains(&row.minute) {
                self.rows
                    .entry((row.task_type.clone(), row.minute))
                    .or_default();
            }
        }
        if let Some(dm) = plan.depth_minute {
            for t in self.depth.keys() {
                self.rows.entry((t.clone(), dm)).or_default();
            }
        }
        self.rows
            .into_iter()
            .map(|((task_type, minute), counts)| {
                let (waiting, running, oldest_waiting_at) = if Some(minute) == plan.depth_minute {
                    let d = self.depth.get(&task_type).copied().unwrap_or_default();
                    (Some(d.waiting), Some(d.running), d.oldest_waiting_at)
                } else {
                    (None, None, None)
                };
                HistoryRow {
                    task_type,
                    minute,
                    counts,
                    waiting,
                    running,
                    oldest_waiting_at,
                }
            })
            .collect()
    }
}

/// Per type, the enqueues `rows` count that `existing` did not.
pub(crate) fn newly_enqueued(
    rows: &[HistoryRow],
    existing: &[HistoryRow],
) -> BTreeMap<TaskType, u64> {
    let old: BTreeMap<(&TaskType, DateTime<Utc>), u64> = existing
        .iter()
        .map(|r| ((&r.task_type, r.minute), r.counts.enqueued))
        .collect();
    let mut out = BTreeMap::new();
    for r in rows {
        let before = old.get(&(&r.task_type, r.minute)).copied().unwrap_or(0);
        let more = r.counts.enqueued.saturating_sub(before);
        if more > 0 {
            *out.entry(r.task_type.clone()).or_insert(0) += more;
        }
    }
    out
}

/// The window a read of `minutes` minutes at `now` covers: `[from, to)`, ending with the last
/// complete minute.
pub(crate) fn read_window(now: DateTime<Utc>, minutes: u32) -> (DateTime<Utc>, DateTime<Utc>) {
    let to = minute_of(now);
    (to - MINUTE * minutes as i32, to)
}

/// Every minute of the window `[from, to)`, from the stored rows (of one type, or of every type
/// summed) and minutes: zeros where there is no row; a depth where the minute's depth was
/// sampled (0 for a type with no row), `None` where it was not.
pub(crate) fn fill(
    now: DateTime<Utc>,
    (from, to): (DateTime<Utc>, DateTime<Utc>),
    rows: &[HistoryRow],
    minutes: &[HistoryMinute],
) -> QueueHistory {
    let known: BTreeMap<DateTime<Utc>, &HistoryMinute> =
        minutes.iter().map(|m| (m.minute, m)).collect();
    let mut by_minute: BTreeMap<DateTime<Utc>, (HistoryCounts, u64, u64, bool)> = BTreeMap::new();
    for r in rows {
        let e = by_minute.entry(r.minute).or_default();
        e.0.add(&r.counts);
        e.1 += r.waiting.unwrap_or(0);
        e.2 += r.running.unwrap_or(0);
        e.3 |= r.waiting.is_some();
    }
    let mut points = Vec::new();
    let mut m = from;
    while m < to {
        let k = known.get(&m);
        let sampled = k.is_some_and(|k| k.depth_sampled);
        let (counts, waiting, running, _) = by_minute.get(&m).copied().unwrap_or_default();
        points.push(HistoryPoint {
            minute: m,
            counts,
            waiting: sampled.then_some(waiting),
            running: sampled.then_some(running),
            counted: k.is_some_and(|k| k.counted),
        });
        m += MINUTE;
    }
    QueueHistory { now, points }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(h: u32, m: u32, s: u32) -> DateTime<Utc> {
        use chrono::TimeZone;
        Utc.with_ymd_and_hms(2026, 12, 7, h, m, s).single().unwrap()
    }

    fn known(minute: DateTime<Utc>, mark: Option<i64>, counted: bool) -> HistoryMinute {
        HistoryMinute {
            minute,
            id_mark: mark,
            counted,
            depth_sampled: counted,
        }
    }

    #[test]
    fn nothing_is_planned_before_the_first_mark() {
        let p = HistorySampleParams::default();
        assert_eq!(plan(&p, at(10, 5, 20), &[], None), None);
        // A mark for 10:05 (read before it): 10:04 is still before it.
        let k = [known(at(10, 5, 0), Some(7), false)];
        assert_eq!(plan(&p, at(10, 5, 20), &k, None), None);
        let planned = plan(&p, at(10, 6, 11), &k, None).unwrap();
        assert_eq!(planned.minutes, vec![at(10, 5, 0)]);
        assert_eq!(planned.mark, 7);
        assert_eq!(planned.depth_minute, Some(at(10, 5, 0)));
    }

    #[test]
    fn a_minute_is_written_only_once_settled() {
        let p = HistorySampleParams::default();
        let k = [known(at(10, 0, 0), Some(1), false)];
        let planned = plan(&p, at(10, 2, 9), &k, None).unwrap();
        assert_eq!(*planned.minutes.last().unwrap(), at(10, 0, 0));
        let planned = plan(&p, at(10, 2, 10), &k, None).unwrap();
        assert_eq!(*planned.minutes.last().unwrap(), at(10, 1, 0));
    }

    #[test]
    fn counted_minutes_are_skipped_but_the_last_ones_recounted() {
        let p = HistorySampleParams::default();
        let k: Vec<_> = (0..10)
            .map(|i| known(at(10, i, 0), Some(i64::from(i)), true))
            .collect();
        let planned = plan(&p, at(10, 10, 15), &k, None).unwrap();
        assert_eq!(planned.minutes, vec![at(10, 8, 0), at(10, 9, 0)]);
        assert_eq!(planned.mark, 8);
        // Depth was sampled already for 10:09.
        assert_eq!(planned.depth_minute, None);
    }

    #[test]
    fn a_gap_is_backfilled_with_the_mark_before_it_and_no_depth() {
        let p = HistorySampleParams::default();
        let k = [known(at(10, 0, 0), Some(5), true)];
        // Counted 10:00 (mark 5); a mark of 9:00 (2) before the hour looked at.
        let planned = plan(&p, at(10, 30, 45), &k, Some((at(9, 0, 0), 2))).unwrap();
        // Every minute of the last hour not counted, 10:00 itself excepted.
        assert_eq!(planned.minutes.first(), Some(&at(9, 30, 0)));
        assert!(!planned.minutes.contains(&at(10, 0, 0)));
        assert_eq!(planned.minutes.len(), 59);
        assert_eq!(planned.minutes.last(), Some(&at(10, 29, 0)));
        // The mark valid for the oldest: the one of 9:00.
        assert_eq!(planned.mark, 2);
        // 10:29 ended 45 s ago: its depth is no longer known.
        assert_eq!(planned.depth_minute, None);
        // Backfill reaches at most 60 minutes back.
        let planned = plan(&p, at(12, 0, 15), &[], Some((at(10, 0, 0), 5))).unwrap();
        assert_eq!(planned.minutes.len(), 60);
        assert_eq!(planned.minutes.first(), Some(&at(11, 0, 0)));
        assert_eq!(planned.mark, 5);
    }

    #[test]
    fn marks_are_for_a_minute_that_began_after_the_read() {
        assert_eq!(mark_minute(at(10, 0, 0)), at(10, 1, 0));
        assert_eq!(mark_minute(at(10, 0, 59)), at(10, 2, 0));
    }

    #[test]
    fn fill_gives_every_minute_zeros_and_unknown_depths() {
        let t = TaskType::new("a").unwrap();
        let rows = [HistoryRow {
            task_type: t,
            minute: at(10, 1, 0),
            counts: HistoryCounts {
                enqueued: 3,
                ..Default::default()
            },
            waiting: Some(4),
            running: None,
            oldest_waiting_at: None,
        }];
        let minutes = [
            known(at(10, 1, 0), None, true),
            known(at(10, 2, 0), None, true),
        ];
        let h = fill(at(10, 4, 5), read_window(at(10, 4, 5), 4), &rows, &minutes);
        assert_eq!(h.points.len(), 4);
        assert_eq!(h.points[0].minute, at(10, 0, 0));
        assert_eq!(h.points[0].waiting, None);
        assert_eq!(h.points[1].counts.enqueued, 3);
        assert_eq!(h.points[1].waiting, Some(4));
        assert_eq!(h.points[2].waiting, Some(0));
        assert!(!h.points[3].counted);
    }
}
