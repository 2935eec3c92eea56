//! `leasehold wait ID… [--timeout DUR] [--interval DUR]`: polls GetTask until every task is
//! terminal (succeeded, partially_succeeded, cancelled, dead).
//!
//! ```text
//! poll every unfinished task ──all terminal──▶ print, exit 0 (all succeeded) or 1
//!      ▲        │ not yet
//!      └─sleep──┘ --timeout passed ──▶ print current statuses, name the unfinished, exit 1
//! ```
//!
//! Only `succeeded` counts as success: a partial success, a cancel or a dead letter is a
//! failure for a pipeline waiting on the task (exit 1). A call that fails ends the wait with
//! that call's exit code (2 for an unknown task, 3 when the agent cannot be reached, 4 when
//! denied) and prints nothing on stdout. Timers are `tokio::time`, so tests can pause time.

use std::time::Duration;

use leasehold_shared::TaskStatus;
use serde::Serialize;
use tokio::time::Instant;

use super::unique;
use crate::cli::WaitArgs;
use crate::client::Agent;
use crate::convert::task::{ErrorView, TaskDetail};
use crate::error::{Error, Result};
use crate::exit;
use crate::output::Out;
use crate::output::text::shown;

/// What to wait for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub ids: Vec<i64>,
    pub timeout: Option<Duration>,
    pub interval: Duration,
}

/// The plan: distinct ids in the order given.
pub fn prepare(args: &WaitArgs) -> Plan {
    Plan {
        ids: unique(&args.ids.ids),
        timeout: args.timeout,
        interval: args.interval,
    }
}

/// Where one task stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Waited {
    pub id: i64,
    pub status: TaskStatus,
    /// True once the status is terminal.
    pub finished: bool,
    pub last_error: Option<ErrorView>,
}

/// Runs the wait.
pub async fn run(agent: &Agent, plan: Plan, out: &mut Out) -> Result<u8> {
    let deadline = plan.timeout.map(|t| Instant::now() + t);
    let mut results: Vec<Option<Waited>> = vec![None; plan.ids.len()];
    let mut timed_out = false;
    loop {
        for (slot, &id) in results.iter_mut().zip(&plan.ids) {
            if slot.as_ref().is_some_and(|w| w.finished) {
                continue;
            }
            let reply = agent.get_task(id).await?;
            let detail = TaskDetail::from_wire(reply)
                .map_err(|e| Error::bad_wire(format!("get task {id}"), e))?;
            *slot = Some(Waited {
                id,
                status: detail.task.status,
                finished: detail.task.status.is_terminal(),
                last_error: detail.task.last_error,
            });
        }
        if results
            .iter()
            .all(|w| w.as_ref().is_some_and(|w| w.finished))
        {
            break;
        }
        let now = Instant::now();
        let pause = match deadline {
            Some(d) if now >= d => {
                timed_out = true;
                break;
            }
            Some(d) => plan.interval.min(d - now),
            None => plan.interval,
        };
        tokio::time::sleep(pause).await;
    }
    let results: Vec<Waited> = results.into_iter().flatten().collect();
    for w in &results {
        if out.json_mode() {
            out.json(w)?;
        } else {
            out.line(&line(w))?;
        }
    }
    if timed_out {
        out.note(&timeout_message(&results, plan.timeout.unwrap_or_default()));
    }
    Ok(exit_code(&results))
}

/// 0 when every task succeeded, else 1.
pub fn exit_code(results: &[Waited]) -> u8 {
    if results
        .iter()
        .all(|w| w.finished && w.status == TaskStatus::Succeeded)
    {
        exit::OK
    } else {
        exit::TASK_FAILED
    }
}

/// `task 42: succeeded`, `task 43: dead (code: message)`, `task 44: not finished: running`.
pub fn line(w: &Waited) -> String {
    let id = w.id;
    if !w.finished {
        return format!("task {id}: not finished: {}", w.status);
    }
    match &w.last_error {
        Some(e) if w.status != TaskStatus::Succeeded => {
            let error = shown(&format!("{}: {}", e.code, e.message), 50);
            format!("task {id}: {} ({error})", w.status)
        }
        _ => format!("task {id}: {}", w.status),
    }
}

/// `wait timed out after 30s: tasks 3, 4 not finished`.
pub fn timeout_message(results: &[Waited], timeout: Duration) -> String {
    let pending: Vec<String> = results
        .iter()
        .filter(|w| !w.finished)
        .map(|w| w.id.to_string())
        .collect();
    let noun = if pending.len() == 1 { "task" } else { "tasks" };
    format!(
        "wait timed out after {}: {noun} {} not finished",
        humantime::format_duration(timeout),
        pending.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::IdsArgs;

    fn waited(id: i64, status: TaskStatus) -> Waited {
        Waited {
            id,
            status,
            finished: status.is_terminal(),
            last_error: None,
        }
    }

    #[test]
    fn the_plan_has_each_id_once() {
        let args = WaitArgs {
            ids: IdsArgs { ids: vec![5, 5, 6] },
            timeout: None,
            interval: Duration::from_millis(250),
        };
        assert_eq!(prepare(&args).ids, [5, 6]);
    }

    #[test]
    fn only_all_succeeded_is_exit_0() {
        use TaskStatus::*;
        assert_eq!(exit_code(&[waited(1, Succeeded), waited(2, Succeeded)]), 0);
        for other in [PartiallySucceeded, Cancelled, Dead, Running, Queued] {
            assert_eq!(
                exit_code(&[waited(1, Succeeded), waited(2, other)]),
                1,
                "{other}"
            );
        }
    }

    #[test]
    fn lines_and_timeout_message() {
        assert_eq!(line(&waited(1, TaskStatus::Succeeded)), "task 1: succeeded");
        assert_eq!(
            line(&waited(2, TaskStatus::Running)),
            "task 2: not finished: running"
        );
        let mut dead = waited(3, TaskStatus::Dead);
        dead.last_error = Some(ErrorView {
            code: "smtp_timeout".into(),
            message: "timed out\u{1b}[2J".into(),
            retryable: true,
        });
        assert_eq!(
            line(&dead),
            "task 3: dead (smtp_timeout: timed out\\u{1b}[2J)"
        );
        let results = [
            waited(1, TaskStatus::Succeeded),
            waited(2, TaskStatus::Running),
            waited(4, TaskStatus::Queued),
        ];
        assert_eq!(
            timeout_message(&results, Duration::from_secs(30)),
            "wait timed out after 30s: tasks 2, 4 not finished"
        );
        assert_eq!(
            serde_json::to_string(&results[0]).ok().as_deref(),
            Some(r#"{"id":1,"status":"succeeded","finished":true,"last_error":null}"#)
        );
    }
}
