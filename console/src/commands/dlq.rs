//! `leasehold dlq ls` (ListTasks with status dead) and `leasehold dlq requeue` (RequeueDead).
//!
//! `dlq requeue` with no filter would requeue every dead task: it is refused locally (exit 2,
//! "give a filter or --all") unless `--all` says so, before any connection is made.

use chrono::{DateTime, Utc};
use leasehold_proto::v1;
use leasehold_shared::TaskStatus;
use serde::Serialize;

use super::plural;
use super::tasks::{fetch_page, list_request, next_page_hint};
use crate::cli::values::{TimeOrDuration, epoch_ms};
use crate::cli::{DlqLsArgs, DlqRequeueArgs};
use crate::client::Agent;
use crate::convert::task::TaskPage;
use crate::error::{Error, Result};
use crate::exit;
use crate::output::Out;
use crate::output::table::{Column, Table, WIDTH};
use crate::output::text::age;

/// The request of `dlq ls`.
pub fn prepare_ls(args: &DlqLsArgs, now: DateTime<Utc>) -> Result<v1::ListTasksRequest> {
    list_request(&args.filter, &[TaskStatus::Dead], None, now)
}

/// Runs `dlq ls`.
pub async fn run_ls(agent: &Agent, request: v1::ListTasksRequest, out: &mut Out) -> Result<u8> {
    let page = fetch_page(agent, request).await?;
    if out.json_mode() {
        out.json(&page)?;
    } else {
        out.lines(ls_table(&page))?;
    }
    Ok(exit::OK)
}

/// The table of `dlq ls`.
pub fn ls_table(page: &TaskPage) -> Vec<String> {
    if page.tasks.is_empty() {
        return vec!["no dead tasks".to_owned()];
    }
    let mut table = Table::new(vec![
        Column::new("ID", 2, 12).right(),
        Column::new("TYPE", 6, 24),
        Column::new("CODE", 6, 24),
        Column::new("MESSAGE", 12, 200),
        Column::new("ATTEMPTS", 3, 9),
        Column::new("DIED", 6, 12),
    ]);
    let now = page.now.millis();
    for t in &page.tasks {
        let (code, message) = t
            .last_error
            .as_ref()
            .map_or((String::new(), String::new()), |e| {
                (e.code.clone(), e.message.clone())
            });
        table.row(vec![
            t.id.to_string(),
            t.task_type.clone(),
            code,
            message,
            format!("{}/{}", t.attempt, t.max_attempts),
            t.finished_at
                .or(t.updated_at)
                .map_or_else(|| "-".into(), |f| age(now, f.millis())),
        ]);
    }
    let mut lines = table.render(WIDTH);
    lines.extend(next_page_hint(page));
    lines
}

fn bound(flag: &str, t: Option<TimeOrDuration>, now: DateTime<Utc>) -> Result<i64> {
    match t {
        Some(t) => {
            let at = t
                .before(now)
                .map_err(|e| Error::usage(format!("{flag}: {e}")))?;
            epoch_ms(flag, at).map_err(Error::Usage)
        }
        None => Ok(0),
    }
}

/// The request of `dlq requeue`; refuses a request without a filter unless `--all`.
pub fn prepare_requeue(
    args: &DlqRequeueArgs,
    now: DateTime<Utc>,
) -> Result<v1::RequeueDeadRequest> {
    let has_filter = args.task_type.is_some()
        || args.code.is_some()
        || args.since.is_some()
        || args.until.is_some();
    if !has_filter && !args.all {
        return Err(Error::usage(
            "dlq requeue: give a filter or --all (--type, --code, --since, --until)",
        ));
    }
    let since_ms = bound("--since", args.since, now)?;
    let until_ms = bound("--until", args.until, now)?;
    if since_ms != 0 && until_ms != 0 && since_ms >= until_ms {
        return Err(Error::usage("dlq requeue: --since must be before --until"));
    }
    Ok(v1::RequeueDeadRequest {
        task_type: args.task_type.clone().unwrap_or_default(),
        error_code: args.code.clone().unwrap_or_default(),
        since_ms,
        until_ms,
        dry_run: args.dry_run,
        all: args.all,
    })
}

/// The JSON of `dlq requeue`.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct Requeued {
    pub count: u64,
    pub dry_run: bool,
}

/// Runs `dlq requeue`.
pub async fn run_requeue(
    agent: &Agent,
    request: v1::RequeueDeadRequest,
    out: &mut Out,
) -> Result<u8> {
    let reply = agent.requeue_dead(request).await?;
    let result = Requeued {
        count: reply.count,
        dry_run: reply.dry_run,
    };
    if out.json_mode() {
        out.json(&result)?;
    } else {
        out.line(&requeue_line(&result))?;
    }
    Ok(exit::OK)
}

/// `requeued 3 dead tasks` / `would requeue 3 dead tasks (dry run)`.
pub fn requeue_line(r: &Requeued) -> String {
    let tasks = plural(r.count, "dead task", "dead tasks");
    if r.dry_run {
        format!("would requeue {tasks} (dry run)")
    } else {
        format!("requeued {tasks}")
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::convert::task::tests::wire_task;
    use crate::output::text::width;

    fn now() -> DateTime<Utc> {
        DateTime::from_timestamp_millis(1_764_588_000_000).unwrap_or_default()
    }

    fn args() -> DlqRequeueArgs {
        DlqRequeueArgs {
            task_type: None,
            code: None,
            since: None,
            until: None,
            all: false,
            dry_run: false,
        }
    }

    #[test]
    fn requeue_without_a_filter_or_all_is_refused() {
        let err = prepare_requeue(&args(), now());
        assert!(matches!(&err, Err(Error::Usage(m)) if m.contains("give a filter or --all")));
        assert_eq!(err.err().map(|e| exit::exit_code(&e)), Some(exit::USAGE));
    }

    #[test]
    fn requeue_all_or_filtered() {
        let mut a = args();
        a.all = true;
        a.dry_run = true;
        assert_eq!(
            prepare_requeue(&a, now()).ok(),
            Some(v1::RequeueDeadRequest {
                all: true,
                dry_run: true,
                ..Default::default()
            })
        );
        let mut a = args();
        a.task_type = Some("noop".into());
        a.code = Some("timeout".into());
        a.since = Some(TimeOrDuration::Relative(Duration::from_secs(7200)));
        a.until = Some(TimeOrDuration::Relative(Duration::from_secs(3600)));
        assert_eq!(
            prepare_requeue(&a, now()).ok(),
            Some(v1::RequeueDeadRequest {
                task_type: "noop".into(),
                error_code: "timeout".into(),
                since_ms: 1_764_580_800_000,
                until_ms: 1_764_584_400_000,
                dry_run: false,
                all: false,
            })
        );
        std::mem::swap(&mut a.since, &mut a.until);
        assert!(prepare_requeue(&a, now()).is_err());
    }

    #[test]
    fn requeue_lines() {
        let line = |count, dry_run| requeue_line(&Requeued { count, dry_run });
        assert_eq!(line(3, false), "requeued 3 dead tasks");
        assert_eq!(line(1, false), "requeued 1 dead task");
        assert_eq!(line(3, true), "would requeue 3 dead tasks (dry run)");
        let json = serde_json::to_string(&Requeued {
            count: 3,
            dry_run: true,
        })
        .ok();
        assert_eq!(json.as_deref(), Some(r#"{"count":3,"dry_run":true}"#));
    }

    #[test]
    fn ls_asks_for_dead_tasks_and_fits_80_columns() {
        let a = DlqLsArgs {
            filter: crate::cli::ListFilter {
                task_type: None,
                code: None,
                since: None,
                limit: 20,
                before: None,
            },
        };
        let r = prepare_ls(&a, now()).ok();
        assert_eq!(
            r.map(|r| r.statuses),
            Some(vec![v1::TaskStatus::Dead as i32])
        );
        let mut wide = wire_task();
        wide.task_type = "t".repeat(64);
        wide.last_error = Some(v1::TaskError {
            code: "c".repeat(64),
            message: "\u{1b}[1m".repeat(200),
            retryable: false,
        });
        let page = TaskPage::from_wire(v1::ListTasksResponse {
            tasks: vec![wire_task(), wide],
            next_before_id: 0,
            now_ms: 1_764_588_063_123,
        });
        let lines = page.map(|p| ls_table(&p)).unwrap_or_default();
        assert_eq!(lines.len(), 3);
        assert!(lines[1].contains("smtp_timeout"), "{}", lines[1]);
        assert!(lines[1].ends_with("1m00s ago"), "{}", lines[1]);
        for line in &lines {
            assert!(width(line) <= WIDTH, "{line}");
            assert!(!line.contains('\u{1b}'));
        }
    }
}
