//! The Tasks view's model (view 8): every task in the database by state — one tab per state,
//! each with its live count — keyset-paged newest first under the Dead letters view's filter
//! language (`type:NAME code:CODE words`, pushed to the agent).
//!
//! Rows arrive a page at a time ([`TASKS_PAGE`]) and are kept as [`TaskRow`]s: their text cut
//! and made inert once, on arrival, with the widest cell of each column kept as it grows — so a
//! frame costs the rows it shows, not the 100,000 loaded below them, and the selection finds its
//! row in [`TaskBrowse::ids`] without making a string per row.
//!
//! Invariant: the loaded rows answer one (tab, filter) pair, recorded with them; a page that
//! answers another (the operator switched tabs or filters while it travelled) is dropped.

use leasehold_proto::v1 as pb;

use crate::output::text::{shown, width};

/// Rows asked per page.
pub const TASKS_PAGE: u32 = 200;
/// How often the counts, and the first page while it is the only one loaded, are read again
/// while the view is shown (local ms).
pub const TASKS_REFRESH_MS: i64 = 2_000;
/// The widest a type, code or message cell is kept.
const TYPE_MAX: usize = 64;
const CODE_MAX: usize = 64;
const MESSAGE_MAX: usize = 300;

/// The states the view has a tab for, in tab order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum TaskTab {
    /// Queued and due: waiting for a claim.
    #[default]
    Queued,
    /// Queued, not yet due (a run_at or a delay).
    Later,
    /// Waiting to retry after a failed attempt.
    Retrying,
    /// Running (or asked to cancel).
    Running,
    /// Succeeded or partially succeeded.
    Succeeded,
    Cancelled,
    Dead,
}

/// What an operator may do to the tasks of a tab.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TabActions {
    pub run_now: bool,
    pub cancel: bool,
    pub requeue: bool,
    pub delete: bool,
}

impl TaskTab {
    pub const ALL: [TaskTab; 7] = [
        TaskTab::Queued,
        TaskTab::Later,
        TaskTab::Retrying,
        TaskTab::Running,
        TaskTab::Succeeded,
        TaskTab::Cancelled,
        TaskTab::Dead,
    ];

    /// The tab's name, as the tab bar and the title show it.
    pub fn name(self) -> &'static str {
        match self {
            TaskTab::Queued => "queued",
            TaskTab::Later => "later",
            TaskTab::Retrying => "retrying",
            TaskTab::Running => "running",
            TaskTab::Succeeded => "succeeded",
            TaskTab::Cancelled => "cancelled",
            TaskTab::Dead => "dead",
        }
    }

    /// The tab `step` tabs on (wrapping).
    pub fn step(self, step: isize) -> TaskTab {
        let n = TaskTab::ALL.len() as isize;
        let at = TaskTab::ALL.iter().position(|t| *t == self).unwrap_or(0) as isize;
        TaskTab::ALL[(at + step).rem_euclid(n) as usize]
    }

    /// The statuses a ListTasks of the tab asks for.
    pub fn statuses(self) -> Vec<i32> {
        use pb::TaskStatus as S;
        let statuses: &[S] = match self {
            TaskTab::Queued | TaskTab::Later => &[S::Queued],
            TaskTab::Retrying => &[S::RetryWait],
            TaskTab::Running => &[S::Running, S::CancelRequested],
            TaskTab::Succeeded => &[S::Succeeded, S::PartiallySucceeded],
            TaskTab::Cancelled => &[S::Cancelled],
            TaskTab::Dead => &[S::Dead],
        };
        statuses.iter().map(|s| *s as i32).collect()
    }

    /// ListTasks' `due`: the queued tab wants the due ones, the later tab the others.
    pub fn due(self) -> Option<bool> {
        match self {
            TaskTab::Queued => Some(true),
            TaskTab::Later => Some(false),
            _ => None,
        }
    }

    /// The header of the time column: what the time of a row is.
    pub fn when_header(self) -> &'static str {
        match self {
            TaskTab::Queued => "WAITING",
            TaskTab::Later => "DUE IN",
            TaskTab::Retrying => "RETRY IN",
            TaskTab::Running => "RUNNING",
            TaskTab::Succeeded | TaskTab::Cancelled | TaskTab::Dead => "FINISHED",
        }
    }

    /// The tab's count in `counts`: `None` when not known (the finished history could not be
    /// counted in time).
    pub fn count(self, counts: &pb::CountTasksResponse) -> Option<u64> {
        match self {
            TaskTab::Queued => Some(counts.queued),
            TaskTab::Later => Some(counts.scheduled),
            TaskTab::Retrying => Some(counts.retrying),
            TaskTab::Running => Some(counts.running),
            TaskTab::Succeeded => counts.succeeded,
            TaskTab::Cancelled => counts.cancelled,
            TaskTab::Dead => counts.dead,
        }
    }

    /// True for the tabs whose counts stop at the reply's `finished_cap`.
    pub fn capped(self) -> bool {
        matches!(
            self,
            TaskTab::Succeeded | TaskTab::Cancelled | TaskTab::Dead
        )
    }

    /// What the tab's tasks allow: run now (not yet due, or waiting to retry), cancel (waiting
    /// or running), requeue (finished), delete (any no agent holds).
    pub fn actions(self) -> TabActions {
        let waiting = matches!(self, TaskTab::Queued | TaskTab::Later | TaskTab::Retrying);
        let finished = self.capped();
        TabActions {
            run_now: matches!(self, TaskTab::Later | TaskTab::Retrying),
            cancel: waiting || self == TaskTab::Running,
            requeue: finished,
            delete: waiting || finished,
        }
    }
}

/// A count as the tab bar shows it: exact below 10,000, then `12.3k`, `1.2M`; `100k+` past a
/// capped tab's cap; `?` when it could not be counted.
pub fn count_text(tab: TaskTab, counts: Option<&pb::CountTasksResponse>) -> String {
    let Some(counts) = counts else {
        return "…".into();
    };
    let Some(n) = tab.count(counts) else {
        return "?".into();
    };
    if tab.capped() && counts.finished_cap > 0 && n > counts.finished_cap {
        return format!("{}+", compact(counts.finished_cap));
    }
    compact(n)
}

/// `999`, `9999`, `12.3k`, `100k`, `1.2M`.
pub fn compact(n: u64) -> String {
    match n {
        0..10_000 => n.to_string(),
        10_000..100_000 => format!("{:.1}k", n as f64 / 1_000.0),
        100_000..1_000_000 => format!("{}k", n / 1_000),
        _ => format!("{:.1}M", n as f64 / 1_000_000.0),
    }
}

/// One task as the view shows it, made once when its page arrives.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskRow {
    pub id: i64,
    pub id_text: String,
    /// Inert and cut to [`TYPE_MAX`].
    pub task_type: String,
    pub priority: String,
    /// `attempt/max`.
    pub attempts: String,
    /// The time the tab's time column counts from or to (ms; 0 when the task has none).
    pub at_ms: i64,
    /// Its last error's code (`-` when none), inert and cut.
    pub code: String,
    /// Its last error's message (for a running task: its holder), inert and cut.
    pub message: String,
}

impl TaskRow {
    pub fn new(tab: TaskTab, t: &pb::Task) -> Self {
        let (code, message) = t
            .last_error
            .as_ref()
            .map_or(("-", ""), |e| (e.code.as_str(), e.message.as_str()));
        let at_ms = match tab {
            TaskTab::Queued | TaskTab::Later | TaskTab::Retrying => t.available_at_ms,
            TaskTab::Running => t.started_at_ms,
            TaskTab::Succeeded | TaskTab::Cancelled | TaskTab::Dead => t.finished_at_ms,
        };
        let message = if tab == TaskTab::Running {
            format!("on {}", t.lease_owner)
        } else {
            message.to_string()
        };
        Self {
            id: t.id,
            id_text: t.id.to_string(),
            task_type: shown(&t.task_type, TYPE_MAX),
            priority: t.priority.to_string(),
            attempts: format!("{}/{}", t.attempt, t.max_attempts),
            at_ms,
            code: shown(code, CODE_MAX),
            message: shown(&message, MESSAGE_MAX),
        }
    }
}

/// The widest cell of each column over the loaded rows (display columns), kept as rows arrive
/// so widths hold still while scrolling and cost nothing per frame.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Widths {
    pub id: usize,
    pub task_type: usize,
    pub priority: usize,
    pub attempts: usize,
    pub code: usize,
    pub message: usize,
}

impl Widths {
    fn grow(&mut self, r: &TaskRow) {
        self.id = self.id.max(width(&r.id_text));
        self.task_type = self.task_type.max(width(&r.task_type));
        self.priority = self.priority.max(width(&r.priority));
        self.attempts = self.attempts.max(width(&r.attempts));
        self.code = self.code.max(width(&r.code));
        self.message = self.message.max(width(&r.message));
    }
}

/// The tasks loaded so far and the counts of every tab.
#[derive(Debug, Clone, Default)]
pub struct TaskBrowse {
    /// The tab and filter (as typed) the rows answer.
    pub tab: TaskTab,
    pub filter: String,
    pub rows: Vec<TaskRow>,
    /// The rows' ids, in order (what the selection searches).
    pub ids: Vec<i64>,
    pub widths: Widths,
    /// Cursor of the next page; 0 when the last page is loaded.
    pub next_before_id: i64,
    /// The request id of the page on its way (only its reply is taken: one asked before a
    /// switch of tab or filter, or before a reload, is dropped).
    pub asked: Option<u64>,
    /// At least one page has arrived.
    pub loaded: bool,
    pub error: Option<String>,
    /// The counts of every tab, under `counts_filter`.
    pub counts: Option<pb::CountTasksResponse>,
    pub counts_filter: String,
    /// The request id of the counts on their way (only its reply is taken).
    pub counts_asked: Option<u64>,
    pub counts_error: Option<String>,
}

impl TaskBrowse {
    /// True when the rows answer `tab` and `filter` (as typed).
    pub fn answers(&self, tab: TaskTab, filter: &str) -> bool {
        self.tab == tab && self.filter == filter
    }

    /// Starts over for `tab` and `filter` when the rows answer another pair (they are
    /// dropped); true when it did.
    pub fn retarget(&mut self, tab: TaskTab, filter: &str) -> bool {
        if self.tab == tab && self.filter == filter {
            return false;
        }
        self.tab = tab;
        self.filter = filter.to_string();
        self.rows.clear();
        self.ids.clear();
        self.widths = Widths::default();
        self.next_before_id = 0;
        self.loaded = false;
        self.error = None;
        self.asked = None;
        true
    }

    /// Takes a page: the first one replaces the rows, a next one is added below them (only
    /// ids below the last loaded: pages are newest first, so a task listed twice while pages
    /// were read is shown once).
    pub fn take_page(&mut self, page: pb::ListTasksResponse, append: bool) {
        if !append {
            self.rows.clear();
            self.ids.clear();
            self.widths = Widths::default();
        }
        let floor = if append {
            self.ids.last().copied().unwrap_or(i64::MAX)
        } else {
            i64::MAX
        };
        for t in page.tasks.iter().filter(|t| t.id < floor) {
            let row = TaskRow::new(self.tab, t);
            self.widths.grow(&row);
            self.ids.push(row.id);
            self.rows.push(row);
        }
        self.next_before_id = page.next_before_id;
        self.loaded = true;
        self.error = None;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    fn task(id: i64) -> pb::Task {
        pb::Task {
            id,
            task_type: format!("type\u{1b}[31m{id}"),
            attempt: 1,
            max_attempts: 25,
            available_at_ms: 1_000,
            ..Default::default()
        }
    }

    fn page(ids: &[i64], next: i64) -> pb::ListTasksResponse {
        pb::ListTasksResponse {
            tasks: ids.iter().map(|i| task(*i)).collect(),
            next_before_id: next,
            now_ms: 2_000,
        }
    }

    #[test]
    fn pages_append_below_without_repeating_a_task_and_cells_are_inert() {
        let mut b = TaskBrowse::default();
        b.take_page(page(&[9, 8, 7], 7), false);
        // The next page read after 7 was requeued above: 7 again is not shown twice.
        b.take_page(page(&[7, 6, 5], 0), true);
        assert_eq!(b.ids, vec![9, 8, 7, 6, 5]);
        assert_eq!(b.next_before_id, 0);
        assert!(!b.rows[0].task_type.contains('\u{1b}'), "{:?}", b.rows[0]);
        assert_eq!(b.widths.id, 1);
        // A first page replaces everything.
        b.take_page(page(&[12], 0), false);
        assert_eq!(b.ids, vec![12]);
        assert_eq!(b.widths.id, 2);
    }

    #[test]
    fn another_tab_or_filter_starts_over() {
        let mut b = TaskBrowse::default();
        b.take_page(page(&[3, 2], 2), false);
        assert!(!b.retarget(TaskTab::Queued, ""));
        assert_eq!(b.ids.len(), 2);
        assert!(b.retarget(TaskTab::Dead, ""));
        assert!(b.ids.is_empty() && !b.loaded && b.next_before_id == 0);
        assert!(b.retarget(TaskTab::Dead, "type:mail"));
    }

    #[test]
    fn counts_are_compact_and_capped_tabs_say_more() {
        let counts = pb::CountTasksResponse {
            queued: 100_000,
            scheduled: 12_345,
            retrying: 999,
            running: 1_200_000,
            succeeded: Some(100_001),
            cancelled: Some(3),
            dead: None,
            finished_cap: 100_000,
            now_ms: 0,
        };
        let text = |tab| count_text(tab, Some(&counts));
        assert_eq!(text(TaskTab::Queued), "100k");
        assert_eq!(text(TaskTab::Later), "12.3k");
        assert_eq!(text(TaskTab::Retrying), "999");
        assert_eq!(text(TaskTab::Running), "1.2M");
        assert_eq!(text(TaskTab::Succeeded), "100k+");
        assert_eq!(text(TaskTab::Cancelled), "3");
        assert_eq!(text(TaskTab::Dead), "?");
        assert_eq!(count_text(TaskTab::Dead, None), "…");
    }

    #[test]
    fn each_tab_offers_the_actions_its_state_allows() {
        use leasehold_shared::domain::TaskAction;
        for tab in TaskTab::ALL {
            let a = tab.actions();
            for status in tab.statuses() {
                let status = crate::convert::status(status).unwrap();
                let allows = |action| status.apply(action).is_ok();
                assert_eq!(a.requeue, allows(TaskAction::Requeue), "{tab:?} {status}");
                assert_eq!(a.delete, allows(TaskAction::Delete), "{tab:?} {status}");
                assert_eq!(
                    a.cancel,
                    allows(TaskAction::RequestCancel),
                    "{tab:?} {status}"
                );
                // Run-now is allowed for every waiting task; the queued tab's are due already.
                if tab != TaskTab::Queued {
                    assert_eq!(a.run_now, allows(TaskAction::RunNow), "{tab:?} {status}");
                }
            }
        }
        assert_eq!(TaskTab::Dead.step(1), TaskTab::Queued);
        assert_eq!(TaskTab::Queued.step(-1), TaskTab::Dead);
    }
}
