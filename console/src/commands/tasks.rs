//! `leasehold tasks ls` (ListTasks, one page) and `leasehold tasks show ID` (GetTask).
//!
//! Table mode cuts every value to fit 80 columns and shows untrusted text inert; the payload
//! is pretty JSON cut to [`PAYLOAD_LINES`] lines. JSON mode prints the full values.

use chrono::{DateTime, Utc};
use leasehold_proto::v1;
use leasehold_shared::TaskStatus;

use crate::cli::values::epoch_ms;
use crate::cli::{ListFilter, TasksLsArgs};
use crate::client::Agent;
use crate::convert::Timestamp;
use crate::convert::task::{TaskDetail, TaskPage, TaskView};
use crate::convert::wire_status;
use crate::error::{Error, Result};
use crate::exit;
use crate::output::Out;
use crate::output::table::{Column, Table, WIDTH};
use crate::output::text::{age, short_duration, shown};

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
        out.lines(show_lines(&detail))?;
    }
    Ok(exit::OK)
}

fn field(key: &str, value: &str) -> String {
    let value = shown(value, WIDTH - KEY_WIDTH - 1);
    format!("{key:<KEY_WIDTH$} {value}")
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

/// The lines of `tasks show` in table mode.
pub fn show_lines(d: &TaskDetail) -> Vec<String> {
    let t = &d.task;
    let now = &d.now;
    let mut lines = vec![
        shown(
            &format!("task {}: {}, {}", t.id, t.task_type, t.status),
            WIDTH,
        ),
        field("status", t.status.as_str()),
        field("type", &t.task_type),
        field("priority", &t.priority.to_string()),
        field("attempt", &format!("{} of {}", t.attempt, t.max_attempts)),
        field("lease", &lease_text(t)),
        field("created", &when(t.created_at, now)),
        field("available", &when(t.available_at, now)),
        field("started", &when(t.started_at, now)),
        field("heartbeat", &when(t.heartbeat_at, now)),
        field("lease until", &when(t.lease_until, now)),
        field("finished", &when(t.finished_at, now)),
        field("deadline", &when(t.deadline_at, now)),
        field("updated", &when(t.updated_at, now)),
        field(
            "timeout",
            &t.timeout_ms
                .map_or_else(|| "type default".into(), short_duration),
        ),
        field(
            "idempotency key",
            t.idempotency_key.as_deref().unwrap_or("-"),
        ),
        field(
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
        field("progress", &compact(t.progress.as_ref())),
        field("result", &compact(t.result.as_ref())),
        "payload:".to_owned(),
    ];
    lines.extend(payload_lines(&t.payload));
    lines.push(String::new());
    if d.attempts.is_empty() {
        lines.push("Attempts: none yet".to_owned());
    } else {
        lines.push("Attempts:".to_owned());
        lines.extend(
            attempts_table(d)
                .into_iter()
                .map(|l| shown(&format!("  {l}"), WIDTH)),
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
        lines.extend(reasons.iter().map(|r| format!("  {}", shown(r, WIDTH - 2))));
    }
    lines
}

fn lease_text(t: &TaskView) -> String {
    match &t.lease_owner {
        Some(owner) => format!("{owner}, epoch {}", t.lease_epoch),
        None => "-".to_owned(),
    }
}

/// The payload as indented JSON, each line cut to fit and at most [`PAYLOAD_LINES`] lines.
fn payload_lines(payload: &serde_json::Value) -> Vec<String> {
    let pretty = serde_json::to_string_pretty(payload).unwrap_or_else(|_| payload.to_string());
    let all: Vec<&str> = pretty.lines().collect();
    let mut lines: Vec<String> = all
        .iter()
        .take(PAYLOAD_LINES)
        .map(|l| format!("  {}", shown(l, WIDTH - 2)))
        .collect();
    if all.len() > PAYLOAD_LINES {
        lines.push(format!(
            "  … {} more lines (--output json shows all)",
            all.len() - PAYLOAD_LINES
        ));
    }
    lines
}

fn attempts_table(d: &TaskDetail) -> Vec<String> {
    let mut table = Table::new(vec![
        Column::new("#", 1, 5).right(),
        Column::new("EPOCH", 5, 10).right(),
        Column::new("AGENT", 5, 24),
        Column::new("STARTED", 7, 12),
        Column::new("FINISHED", 8, 12),
        Column::new("OUTCOME", 7, 19),
        Column::new("ERROR", 5, 200),
    ]);
    let now = d.now.millis();
    for a in &d.attempts {
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
    table.render(WIDTH - 2)
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
                outcome: String::new(),
                error: Some(v1::TaskError {
                    code: "x".into(),
                    message: "\u{1b}[2J".repeat(50),
                    retryable: true,
                }),
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
            .map(|d| show_lines(&d))
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
    fn show_lists_the_fields() {
        let lines = detail(wire_task())
            .map(|d| show_lines(&d))
            .unwrap_or_default();
        let text = lines.join("\n");
        assert!(text.starts_with("task 42: email.send, dead\n"), "{text}");
        assert!(text.contains("lease            web-1#7, epoch 5"), "{text}");
        assert!(text.contains("last error       smtp_timeout: connection timed out (retryable)"));
        assert!(text.contains("timeout          30s"));
        assert!(
            text.contains("finished         2025-12-01T11:20:03.123Z (0ms ago)"),
            "{text}"
        );
        assert!(text.contains("  \"to\": \"a@example.com\""), "{text}");
    }
}
