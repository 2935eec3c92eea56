//! `leasehold tasks ls` (ListTasks, one page) and `leasehold tasks show ID` (GetTask).
//!
//! Table mode shows untrusted text inert. `tasks ls` fits 80 columns. `tasks show` cuts its
//! lines to the terminal's width and its payload (pretty JSON) to [`PAYLOAD_LINES`] lines; to
//! a pipe or a file it prints every line whole. JSON mode prints the full values.

use chrono::{DateTime, Utc};
use leasehold_proto::v1;
use leasehold_shared::TaskStatus;

use crate::cli::values::epoch_ms;
use crate::cli::{ListFilter, TasksLsArgs};
use crate::client::Agent;
use crate::convert::Timestamp;
use crate::convert::task::{AttemptView, TaskDetail, TaskPage, TaskView, progress_of};
use crate::convert::wire_status;
use crate::error::{Error, Result};
use crate::exit;
use crate::output::Out;
use crate::output::table::{Column, Table, WIDTH};
use crate::output::text::{age, inert, progress, short_duration, shown};

/// Most payload lines `tasks show` prints in table mode.
pub const PAYLOAD_LINES: usize = 40;
/// Width of the field names in `tasks show`.
const KEY_WIDTH: usize = 16;

/// A ListTasks request from the shared filter flags.
pub fn list_request(
    filter: &ListFilter,
    statuses: &[TaskStatus],
    text: Option<&str>,
    now: DateTime<Utc>,
) -> Result<v1::ListTasksRequest> {
    let since_ms = match filter.since {
        Some(since) => {
            let at = since
                .before(now)
                .map_err(|e| Error::usage(format!("--since: {e}")))?;
            epoch_ms("--since", at).map_err(Error::Usage)?
        }
        None => 0,
    };
    Ok(v1::ListTasksRequest {
        statuses: statuses.iter().map(|s| wire_status(*s) as i32).collect(),
        task_type: filter.task_type.clone().unwrap_or_default(),
        text: text.unwrap_or_default().to_owned(),
        before_id: filter.before.unwrap_or(0),
        limit: filter.limit,
        error_code: filter.code.clone().unwrap_or_default(),
        since_ms,
        due: None,
    })
}

/// The request of `tasks ls`.
pub fn prepare_ls(args: &TasksLsArgs, now: DateTime<Utc>) -> Result<v1::ListTasksRequest> {
    let mut statuses = args.status.clone();
    statuses.sort();
    statuses.dedup();
    list_request(&args.filter, &statuses, args.text.as_deref(), now)
}

/// Fetches and converts one page.
pub async fn fetch_page(agent: &Agent, request: v1::ListTasksRequest) -> Result<TaskPage> {
    let reply = agent.list_tasks(request).await?;
    TaskPage::from_wire(reply).map_err(|e| Error::bad_wire("list tasks", e))
}

/// Runs `tasks ls`.
pub async fn run_ls(agent: &Agent, request: v1::ListTasksRequest, out: &mut Out) -> Result<u8> {
    let page = fetch_page(agent, request).await?;
    if out.json_mode() {
        out.json(&page)?;
    } else {
        out.lines(ls_table(&page))?;
    }
    Ok(exit::OK)
}

/// `next page: --before N`, when there is one.
pub fn next_page_hint(page: &TaskPage) -> Option<String> {
    page.next_before_id
        .map(|id| format!("next page: --before {id}"))
}

/// The table of `tasks ls`.
pub fn ls_table(page: &TaskPage) -> Vec<String> {
    if page.tasks.is_empty() {
        return vec!["no tasks".to_owned()];
    }
    let mut table = Table::new(vec![
        Column::new("ID", 2, 12).right(),
        Column::new("TYPE", 6, 24),
        Column::new("STATUS", 6, 19),
        Column::new("ATTEMPT", 3, 9),
        Column::new("PRI", 3, 6).right(),
        Column::new("UPDATED", 6, 12),
        Column::new("ERROR", 10, 200),
    ]);
    let now = page.now.millis();
    for t in &page.tasks {
        table.row(vec![
            t.id.to_string(),
            t.task_type.clone(),
            t.status.to_string(),
            format!("{}/{}", t.attempt, t.max_attempts),
            t.priority.to_string(),
            t.updated_at
                .map_or_else(|| "-".into(), |u| age(now, u.millis())),
            t.last_error
                .as_ref()
                .map_or_else(String::new, |e| format!("{}: {}", e.code, e.message)),
        ]);
    }
    let mut lines = table.render(WIDTH);
    lines.extend(next_page_hint(page));
    lines
}

/// Runs `tasks show ID`.
pub async fn run_show(agent: &Agent, id: i64, out: &mut Out) -> Result<u8> {
    let reply = agent.get_task(id).await?;
    let detail =
        TaskDetail::from_wire(reply).map_err(|e| Error::bad_wire(format!("get task {id}"), e))?;
    if out.json_mode() {
        out.json(&detail)?;
    } else {
        out.lines(show_lines(&detail, out.width()))?;
    }
    Ok(exit::OK)
}

/// How wide `tasks show` may write: a terminal's columns, or no limit (a pipe or a file).
#[derive(Debug, Clone, Copy)]
struct Fit(Option<usize>);

impl Fit {
    /// `s` made inert and cut to the width less `indent` columns.
    fn cut(self, s: &str, indent: usize) -> String {
        match self.0 {
            Some(w) => shown(s, w.saturating_sub(indent).max(1)),
            None => inert(s).into_owned(),
        }
    }

    fn field(self, key: &str, value: &str) -> String {
        format!("{key:<KEY_WIDTH$} {}", self.cut(value, KEY_WIDTH + 1))
    }
}

fn when(t: Option<Timestamp>, now: &Timestamp) -> String {
    t.map_or_else(
        || "-".to_owned(),
        |t| format!("{} ({})", t.rfc3339(), age(now.millis(), t.millis())),
    )
}

fn compact(value: Option<&serde_json::Value>) -> String {
    value.map_or_else(|| "-".to_owned(), serde_json::Value::to_string)
}

/// The progress as `26/28 (25 succeeded, 1 failed)`; its JSON when it is not the documented
/// object.
fn progress_text(value: Option<&serde_json::Value>) -> String {
    match value.and_then(progress_of) {
        Some(p) => progress(&p),
        None => compact(value),
    }
}

/// `2 of 25`, and how often the task was snoozed when it was (snoozes give the attempt back).
fn attempt_text(t: &TaskView) -> String {
    match t.snoozes {
        0 => format!("{} of {}", t.attempt, t.max_attempts),
        1 => format!("{} of {}, snoozed once", t.attempt, t.max_attempts),
        n => format!("{} of {}, snoozed {n} times", t.attempt, t.max_attempts),
    }
}

/// The lines of `tasks show` in table mode, cut to `width` columns (`None`: not cut, every
/// payload line).
pub fn show_lines(d: &TaskDetail, width: Option<usize>) -> Vec<String> {
    let fit = Fit(width);
    let t = &d.task;
    let now = &d.now;
    let mut lines = vec![
        fit.cut(&format!("task {}: {}, {}", t.id, t.task_type, t.status), 0),
        fit.field("status", t.status.as_str()),
        fit.field("type", &t.task_type),
        fit.field("priority", &t.priority.to_string()),
        fit.field("attempt", &attempt_text(t)),
        fit.field("lease", &lease_text(t)),
        fit.field("created", &when(t.created_at, now)),
        fit.field("available", &when(t.available_at, now)),
        fit.field("started", &when(t.started_at, now)),
        fit.field("heartbeat", &when(t.heartbeat_at, now)),
        fit.field("lease until", &when(t.lease_until, now)),
        fit.field("finished", &when(t.finished_at, now)),
        fit.field("deadline", &when(t.deadline_at, now)),
        fit.field("updated", &when(t.updated_at, now)),
        fit.field(
            "timeout",
            &t.timeout_ms
                .map_or_else(|| "type default".into(), short_duration),
        ),
        fit.field(
            "idempotency key",
            t.idempotency_key.as_deref().unwrap_or("-"),
        ),
        fit.field(
            "concurrency key",
            t.concurrency_key.as_deref().unwrap_or("-"),
        ),
        fit.field(
            "last error",
            &t.last_error.as_ref().map_or_else(
                || "-".to_owned(),
                |e| {
                    let retry = if e.retryable {
                        "retryable"
                    } else {
                        "not retryable"
                    };
                    format!("{}: {} ({retry})", e.code, e.message)
                },
            ),
        ),
        fit.field("progress", &progress_text(t.progress.as_ref())),
        fit.field(
            "checkpoint",
            &match &t.checkpoint {
                Some(c) => format!(
                    "{} (saved {})",
                    compact(Some(c)),
                    when(t.checkpoint_at, now)
                ),
                None => "-".to_owned(),
            },
        ),
        fit.field("result", &compact(t.result.as_ref())),
        "payload:".to_owned(),
    ];
    lines.extend(payload_lines(&t.payload, fit));
    lines.push(String::new());
    let attempts = d.attempts_with_current();
    if attempts.is_empty() {
        lines.push("Attempts: none yet".to_owned());
    } else {
        lines.push("Attempts:".to_owned());
        lines.extend(
            attempts_table(&attempts, now, fit)
                .into_iter()
                .map(|l| format!("  {l}")),
        );
    }
    let reasons: Vec<String> = match &d.why_not_running {
        Some(why) => why
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(str::to_owned)
            .collect(),
        None => d.blockers.iter().map(|b| b.message.clone()).collect(),
    };
    if !reasons.is_empty() {
        lines.push(String::new());
        lines.push("Why not running:".to_owned());
        lines.extend(reasons.iter().map(|r| format!("  {}", fit.cut(r, 2))));
    }
    lines
}

fn lease_text(t: &TaskView) -> String {
    match &t.lease_owner {
        Some(owner) => format!("{owner}, epoch {}", t.lease_epoch),
        None => "-".to_owned(),
    }
}

/// The payload as indented JSON, each line cut to fit and at most [`PAYLOAD_LINES`] lines on a
/// terminal; every line whole to a pipe.
fn payload_lines(payload: &serde_json::Value, fit: Fit) -> Vec<String> {
    let pretty = serde_json::to_string_pretty(payload).unwrap_or_else(|_| payload.to_string());
    let all: Vec<&str> = pretty.lines().collect();
    let most = if fit.0.is_some() {
        PAYLOAD_LINES
    } else {
        usize::MAX
    };
    let mut lines: Vec<String> = all
        .iter()
        .take(most)
        .map(|l| format!("  {}", fit.cut(l, 2)))
        .collect();
    if all.len() > most {
        lines.push(format!(
            "  … {} more lines (--output json shows all)",
            all.len() - most
        ));
    }
    lines
}

fn attempts_table(attempts: &[AttemptView], now: &Timestamp, fit: Fit) -> Vec<String> {
    let mut table = Table::new(vec![
        Column::new("#", 1, 5).right(),
        Column::new("EPOCH", 5, 10).right(),
        Column::new("AGENT", 5, 200),
        Column::new("STARTED", 7, 12),
        Column::new("FINISHED", 8, 12),
        Column::new("OUTCOME", 7, 64),
        Column::new("ERROR", 5, 4000),
    ]);
    let now = now.millis();
    for a in attempts {
        table.row(vec![
            a.attempt.to_string(),
            a.epoch.to_string(),
            a.agent.clone(),
            a.started_at
                .map_or_else(|| "-".into(), |s| age(now, s.millis())),
            a.finished_at
                .map_or_else(|| "running".into(), |f| age(now, f.millis())),
            a.outcome.clone().unwrap_or_else(|| "-".into()),
            a.error
                .as_ref()
                .map_or_else(String::new, |e| format!("{}: {}", e.code, e.message)),
        ]);
    }
    table.render(fit.0.map_or(usize::MAX, |w| w.saturating_sub(2)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::values::TimeOrDuration;
    use crate::convert::task::tests::wire_task;
    use crate::output::text::width;

    fn now() -> DateTime<Utc> {
        DateTime::from_timestamp_millis(1_764_588_000_000).unwrap_or_default()
    }

    fn filter() -> ListFilter {
        ListFilter {
            task_type: None,
            code: None,
            since: None,
            limit: 50,
            before: None,
        }
    }

    fn wide_task() -> v1::Task {
        let mut t = wire_task();
        t.task_type = "t".repeat(64);
        t.lease_owner = "o\u{1b}[31m".repeat(60);
        t.idempotency_key = "k".repeat(255);
        t.concurrency_key = format!("{}\u{1b}[2J", "q".repeat(200));
        t.payload_json = serde_json::json!({
            "long": "x".repeat(500),
            "escape": "\u{1b}]0;pwned\u{7}",
            "list": (0..100).collect::<Vec<_>>(),
        })
        .to_string();
        t.last_error = Some(v1::TaskError {
            code: "c".repeat(100),
            message: "m\u{202e}".repeat(400),
            retryable: false,
        });
        t.result_json = serde_json::json!({"out": "r".repeat(300)}).to_string();
        t
    }

    fn detail(t: v1::Task) -> Option<TaskDetail> {
        TaskDetail::from_wire(v1::GetTaskResponse {
            task: Some(t),
            attempts: vec![v1::Attempt {
                epoch: 5,
                attempt: 3,
                agent: "a".repeat(200),
                started_at_ms: 1_764_588_001_000,
                finished_at_ms: 0,
                error: Some(v1::TaskError {
                    code: "x".into(),
                    message: "\u{1b}[2J".repeat(50),
                    retryable: true,
                }),
                ..Default::default()
            }],
            why_not_running: "type limit reached: 3/3 running\npaused\u{1b}[5m".into(),
            blockers: vec![],
            now_ms: 1_764_588_003_123,
        })
        .ok()
    }

    #[test]
    fn the_request_carries_every_filter() {
        let mut f = filter();
        f.task_type = Some("noop".into());
        f.code = Some("timeout".into());
        f.since = Some(TimeOrDuration::Relative(std::time::Duration::from_secs(60)));
        f.before = Some(500);
        f.limit = 10;
        let args = TasksLsArgs {
            status: vec![TaskStatus::Dead, TaskStatus::Queued, TaskStatus::Dead],
            filter: f,
            text: Some("smtp".into()),
        };
        let r = prepare_ls(&args, now()).ok();
        assert_eq!(
            r,
            Some(v1::ListTasksRequest {
                statuses: vec![v1::TaskStatus::Queued as i32, v1::TaskStatus::Dead as i32],
                task_type: "noop".into(),
                text: "smtp".into(),
                before_id: 500,
                limit: 10,
                error_code: "timeout".into(),
                since_ms: 1_764_587_940_000,
                due: None,
            })
        );
    }

    #[test]
    fn ls_fits_80_columns_and_hints_the_next_page() {
        let page = TaskPage::from_wire(v1::ListTasksResponse {
            tasks: vec![wire_task(), wide_task()],
            next_before_id: 41,
            now_ms: 1_764_588_003_123,
        });
        let lines = page.as_ref().map(ls_table).unwrap_or_default();
        assert_eq!(lines.len(), 4);
        assert!(lines[0].starts_with("ID") || lines[0].trim_start().starts_with("ID"));
        assert_eq!(lines[3], "next page: --before 41");
        for line in &lines {
            assert!(width(line) <= WIDTH, "{} columns: {line}", width(line));
            assert!(
                !line.contains('\u{1b}') && !line.contains('\u{202e}'),
                "{line}"
            );
        }
        let json = page
            .ok()
            .and_then(|p| serde_json::to_value(p).ok())
            .unwrap_or_default();
        assert_eq!(json["next_before_id"], 41);
        assert_eq!(json["tasks"][0]["id"], 42);
    }

    #[test]
    fn an_empty_page_says_so() {
        let page = TaskPage::from_wire(v1::ListTasksResponse {
            tasks: vec![],
            next_before_id: 0,
            now_ms: 1,
        });
        assert_eq!(
            page.map(|p| ls_table(&p)).ok(),
            Some(vec!["no tasks".to_owned()])
        );
    }

    #[test]
    fn show_fits_80_columns_with_wide_inert_values() {
        let lines = detail(wide_task())
            .map(|d| show_lines(&d, Some(WIDTH)))
            .unwrap_or_default();
        assert!(lines.len() > 20);
        for line in &lines {
            assert!(width(line) <= WIDTH, "{} columns: {line}", width(line));
            assert!(!line.chars().any(char::is_control), "{line:?}");
        }
        let text = lines.join("\n");
        assert!(text.contains("more lines (--output json shows all)"));
        assert!(
            text.contains(
                "Why not running:\n  type limit reached: 3/3 running\n  paused\\u{1b}[5m"
            )
        );
        assert!(text.contains("Attempts:"));
    }

    #[test]
    fn show_to_a_pipe_cuts_nothing_and_stays_inert() {
        let lines = detail(wide_task())
            .map(|d| show_lines(&d, None))
            .unwrap_or_default();
        let text = lines.join("\n");
        assert!(text.contains(&"x".repeat(500)), "{text}");
        assert!(text.contains(&"k".repeat(255)), "{text}");
        assert!(text.contains(&"q".repeat(200)), "{text}");
        assert!(!text.contains("more lines"), "{text}");
        assert!(lines.iter().any(|l| width(l) > 400));
        for line in &lines {
            assert!(!line.chars().any(char::is_control), "{line:?}");
            assert!(!line.contains('\u{202e}'), "{line:?}");
        }
    }

    #[test]
    fn show_lists_the_running_attempt_and_progress_in_words() {
        let mut t = wire_task();
        t.status = v1::TaskStatus::Running as i32;
        t.attempt = 2;
        t.lease_epoch = 6;
        t.progress_json = r#"{"total":28,"processed":26,"succeeded":25,"failed":1}"#.into();
        let lines = detail(t)
            .map(|d| show_lines(&d, Some(WIDTH)))
            .unwrap_or_default();
        let text = lines.join("\n");
        assert!(
            text.contains("progress         26/28 (25 succeeded, 1 failed)\n"),
            "{text}"
        );
        let running = lines
            .iter()
            .find(|l| l.trim_start().starts_with("2  "))
            .map(|l| l.split_whitespace().collect::<Vec<_>>());
        assert_eq!(
            running.as_ref().map(|r| r[..3].to_vec()),
            Some(vec!["2", "6", "web-1#7"]),
            "{text}"
        );
    }

    #[test]
    fn show_lists_the_fields() {
        let lines = detail(wire_task())
            .map(|d| show_lines(&d, Some(WIDTH)))
            .unwrap_or_default();
        let text = lines.join("\n");
        assert!(text.starts_with("task 42: email.send, dead\n"), "{text}");
        assert!(text.contains("lease            web-1#7, epoch 5"), "{text}");
        assert!(text.contains("last error       smtp_timeout: connection timed out (retryable)"));
        assert!(text.contains("timeout          30s"));
        assert!(text.contains("concurrency key  acme\n"), "{text}");
        assert!(
            text.contains("attempt          3 of 3, snoozed 2 times\n"),
            "{text}"
        );
        assert!(
            text.contains(r#"checkpoint       {"page":7} (saved 2025-12-01T11:20:02.500Z"#),
            "{text}"
        );
        assert!(
            text.contains("finished         2025-12-01T11:20:03.123Z (0ms ago)"),
            "{text}"
        );
        assert!(text.contains("  \"to\": \"a@example.com\""), "{text}");
    }
}
