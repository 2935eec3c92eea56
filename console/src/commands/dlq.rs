//! `leasehold dlq ls` (ListTasks with status dead), `leasehold dlq requeue` (RequeueDead) and
//! `leasehold dlq purge` (PurgeDead).
//!
//! `dlq requeue` and `dlq purge` with no filter would take every dead task: they are refused
//! locally (exit 2, "give a filter or --all") unless `--all` says so, before any connection is
//! made. Their dry runs change nothing and list the ids they would take, a page at a time.

use chrono::{DateTime, Utc};
use leasehold_proto::v1;
use leasehold_shared::TaskStatus;
use serde::Serialize;

use super::plural;
use super::tasks::{fetch_page, list_request, next_page_hint};
use crate::cli::values::{TimeOrDuration, epoch_ms};
use crate::cli::{DlqBulkArgs, DlqLsArgs};
use crate::client::Agent;
use crate::convert::WireError;
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

/// The filter and page of `dlq requeue` and `dlq purge`, as both requests carry them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct DeadSelection {
    pub task_type: String,
    pub error_code: String,
    pub since_ms: i64,
    pub until_ms: i64,
    pub all: bool,
    pub dry_run: bool,
    /// 0: from the newest.
    pub before_id: i64,
    /// 0: the agent's default (100).
    pub limit: u32,
}

/// The selection of `dlq <verb>`; refuses one without a filter unless `--all`, before any
/// connection is made.
fn prepare_selection(verb: &str, args: &DlqBulkArgs, now: DateTime<Utc>) -> Result<DeadSelection> {
    let has_filter = args.task_type.is_some()
        || args.code.is_some()
        || args.since.is_some()
        || args.until.is_some();
    if !has_filter && !args.all {
        return Err(Error::usage(format!(
            "dlq {verb}: give a filter or --all (--type, --code, --since, --until)"
        )));
    }
    let since_ms = bound("--since", args.since, now)?;
    let until_ms = bound("--until", args.until, now)?;
    if since_ms != 0 && until_ms != 0 && since_ms >= until_ms {
        return Err(Error::usage(format!(
            "dlq {verb}: --since must be before --until"
        )));
    }
    if !args.dry_run && (args.limit.is_some() || args.before.is_some()) {
        return Err(Error::usage(format!(
            "dlq {verb}: --limit and --before page the ids of a --dry-run"
        )));
    }
    Ok(DeadSelection {
        task_type: args.task_type.clone().unwrap_or_default(),
        error_code: args.code.clone().unwrap_or_default(),
        since_ms,
        until_ms,
        all: args.all,
        dry_run: args.dry_run,
        before_id: args.before.unwrap_or(0),
        limit: args.limit.unwrap_or(0),
    })
}

/// The request of `dlq requeue`; refuses a request without a filter unless `--all`.
pub fn prepare_requeue(args: &DlqBulkArgs, now: DateTime<Utc>) -> Result<v1::RequeueDeadRequest> {
    let s = prepare_selection("requeue", args, now)?;
    Ok(v1::RequeueDeadRequest {
        task_type: s.task_type,
        error_code: s.error_code,
        since_ms: s.since_ms,
        until_ms: s.until_ms,
        dry_run: s.dry_run,
        all: s.all,
        before_id: s.before_id,
        limit: s.limit,
    })
}

/// The request of `dlq purge`; refuses a request without a filter unless `--all`.
pub fn prepare_purge(args: &DlqBulkArgs, now: DateTime<Utc>) -> Result<v1::PurgeDeadRequest> {
    let s = prepare_selection("purge", args, now)?;
    Ok(v1::PurgeDeadRequest {
        task_type: s.task_type,
        error_code: s.error_code,
        since_ms: s.since_ms,
        until_ms: s.until_ms,
        dry_run: s.dry_run,
        all: s.all,
        before_id: s.before_id,
        limit: s.limit,
    })
}

/// A dry run's page of ids: newest first, and the `--before` of the next page (`None`: the
/// last).
#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct IdPage {
    pub ids: Vec<i64>,
    pub next_before: Option<i64>,
}

/// The JSON of `dlq requeue` and `dlq purge`: `ids` and `next_before` only for a dry run.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct DeadBulk {
    pub count: u64,
    pub dry_run: bool,
    #[serde(flatten)]
    pub page: Option<IdPage>,
}

impl DeadBulk {
    fn from_wire(count: u64, dry_run: bool, ids: Vec<i64>, next_before_id: i64) -> Result<Self> {
        if !dry_run {
            return Ok(DeadBulk {
                count,
                dry_run,
                page: None,
            });
        }
        if let Some(bad) = ids.iter().find(|id| **id < 1) {
            let source = WireError::OutOfRange {
                field: "ids",
                value: *bad,
            };
            return Err(Error::bad_wire("dead-letter dry run", source));
        }
        if next_before_id < 0 {
            let source = WireError::OutOfRange {
                field: "next_before_id",
                value: next_before_id,
            };
            return Err(Error::bad_wire("dead-letter dry run", source));
        }
        Ok(DeadBulk {
            count,
            dry_run,
            page: Some(IdPage {
                ids,
                next_before: (next_before_id > 0).then_some(next_before_id),
            }),
        })
    }
}

/// What the table lines of a bulk action say it did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    Requeue,
    Purge,
}

/// Runs `dlq requeue`.
pub async fn run_requeue(
    agent: &Agent,
    request: v1::RequeueDeadRequest,
    out: &mut Out,
) -> Result<u8> {
    let reply = agent.requeue_dead(request).await?;
    let result = DeadBulk::from_wire(reply.count, reply.dry_run, reply.ids, reply.next_before_id)?;
    write_bulk(Verb::Requeue, &result, out)
}

/// Runs `dlq purge`.
pub async fn run_purge(agent: &Agent, request: v1::PurgeDeadRequest, out: &mut Out) -> Result<u8> {
    let reply = agent.purge_dead(request).await?;
    let result = DeadBulk::from_wire(reply.count, reply.dry_run, reply.ids, reply.next_before_id)?;
    write_bulk(Verb::Purge, &result, out)
}

fn write_bulk(verb: Verb, result: &DeadBulk, out: &mut Out) -> Result<u8> {
    if out.json_mode() {
        out.json(result)?;
    } else {
        out.lines(bulk_lines(verb, result))?;
    }
    Ok(exit::OK)
}

/// `requeued 3 dead tasks` / `would requeue 3 dead tasks (dry run)` (`purged`, `would purge`),
/// then, for a dry run, its ids (`ids: 9 8 7`, wrapped to the table width) and the next page's
/// hint.
pub fn bulk_lines(verb: Verb, r: &DeadBulk) -> Vec<String> {
    let tasks = plural(r.count, "dead task", "dead tasks");
    let (done, would) = match verb {
        Verb::Requeue => ("requeued", "would requeue"),
        Verb::Purge => ("purged", "would purge"),
    };
    let Some(page) = r.page.as_ref().filter(|_| r.dry_run) else {
        return vec![format!("{done} {tasks}")];
    };
    let mut lines = vec![format!("{would} {tasks} (dry run)")];
    let mut line = String::from("ids:");
    for id in &page.ids {
        let id = id.to_string();
        if line.len() + 1 + id.len() > WIDTH {
            lines.push(std::mem::replace(&mut line, "    ".to_owned()));
        }
        line.push(' ');
        line.push_str(&id);
    }
    if !page.ids.is_empty() {
        lines.push(line);
    }
    if let Some(before) = page.next_before {
        lines.push(format!("next page: --before {before}"));
    }
    lines
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

    fn args() -> DlqBulkArgs {
        DlqBulkArgs {
            task_type: None,
            code: None,
            since: None,
            until: None,
            all: false,
            dry_run: false,
            limit: None,
            before: None,
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
                before_id: 0,
                limit: 0,
            })
        );
        std::mem::swap(&mut a.since, &mut a.until);
        assert!(prepare_requeue(&a, now()).is_err());
    }

    #[test]
    fn purge_takes_the_same_filters_and_pages_only_a_dry_run() {
        let err = prepare_purge(&args(), now());
        assert!(
            matches!(&err, Err(Error::Usage(m)) if m == "dlq purge: give a filter or --all (--type, --code, --since, --until)")
        );
        assert_eq!(err.err().map(|e| exit::exit_code(&e)), Some(exit::USAGE));
        let mut a = args();
        a.code = Some("boom".into());
        a.dry_run = true;
        a.limit = Some(2);
        a.before = Some(40);
        assert_eq!(
            prepare_purge(&a, now()).ok(),
            Some(v1::PurgeDeadRequest {
                error_code: "boom".into(),
                dry_run: true,
                before_id: 40,
                limit: 2,
                ..Default::default()
            })
        );
        a.dry_run = false;
        let err = prepare_purge(&a, now());
        assert!(matches!(&err, Err(Error::Usage(m)) if m.contains("--dry-run")));
    }

    fn bulk(count: u64, dry_run: bool, ids: Vec<i64>, next: i64) -> DeadBulk {
        DeadBulk::from_wire(count, dry_run, ids, next).unwrap()
    }

    #[test]
    fn bulk_lines_and_json() {
        let line = |verb, count, dry_run| bulk_lines(verb, &bulk(count, dry_run, vec![], 0));
        assert_eq!(line(Verb::Requeue, 3, false), ["requeued 3 dead tasks"]);
        assert_eq!(line(Verb::Requeue, 1, false), ["requeued 1 dead task"]);
        assert_eq!(line(Verb::Purge, 3, false), ["purged 3 dead tasks"]);
        assert_eq!(
            line(Verb::Purge, 0, true),
            ["would purge 0 dead tasks (dry run)"]
        );
        assert_eq!(
            bulk_lines(Verb::Requeue, &bulk(3, true, vec![9, 8, 7], 0)),
            ["would requeue 3 dead tasks (dry run)", "ids: 9 8 7"]
        );
        assert_eq!(
            bulk_lines(Verb::Purge, &bulk(5, true, vec![9, 8], 8)),
            [
                "would purge 5 dead tasks (dry run)",
                "ids: 9 8",
                "next page: --before 8"
            ]
        );
        let many = bulk(
            1000,
            true,
            (1_000_000..1_001_000).rev().collect(),
            1_000_000,
        );
        let lines = bulk_lines(Verb::Purge, &many);
        assert!(lines.len() > 3);
        for l in &lines {
            assert!(width(l) <= WIDTH, "{l}");
        }
        let listed: Vec<&str> = lines[1..lines.len() - 1]
            .iter()
            .flat_map(|l| l.trim_start_matches("ids:").split_whitespace())
            .collect();
        assert_eq!(listed.len(), 1000);
        assert_eq!(listed[0], "1000999");
        let json = |b: &DeadBulk| serde_json::to_string(b).unwrap();
        assert_eq!(
            json(&bulk(3, false, vec![], 0)),
            r#"{"count":3,"dry_run":false}"#
        );
        assert_eq!(
            json(&bulk(3, true, vec![9, 8, 7], 0)),
            r#"{"count":3,"dry_run":true,"ids":[9,8,7],"next_before":null}"#
        );
        assert_eq!(
            json(&bulk(5, true, vec![9, 8], 8)),
            r#"{"count":5,"dry_run":true,"ids":[9,8],"next_before":8}"#
        );
        assert!(DeadBulk::from_wire(1, true, vec![-1], 0).is_err());
        assert!(DeadBulk::from_wire(1, true, vec![1], -3).is_err());
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
