//! `leasehold requeue ID…`: one Requeue call per id, in order; a failed one is reported on
//! stderr and the next one still runs; the exit code is the highest of all.

use leasehold_shared::TaskStatus;
use serde::Serialize;

use crate::client::Agent;
use crate::convert::status;
use crate::error::{Error, Result};
use crate::exit;
use crate::output::Out;

/// One requeued task and the status it left.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Requeued {
    pub id: i64,
    pub previous: TaskStatus,
}

/// Runs the requeues.
pub async fn run(agent: &Agent, ids: Vec<i64>, out: &mut Out) -> Result<u8> {
    let mut code = exit::OK;
    for id in ids {
        let result = match agent.requeue(id).await {
            Ok(reply) => status(reply.previous)
                .map(|previous| Requeued { id, previous })
                .map_err(|e| Error::bad_wire(format!("requeue task {id}"), e)),
            Err(e) => match waiting_status(agent, id, &e).await {
                // Already waiting to run: what the requeue asked for is so; not a failure.
                Some(now) => {
                    let r = AlreadyWaiting {
                        id,
                        outcome: "already_waiting",
                        status: now,
                    };
                    if out.json_mode() {
                        out.json(&r)?;
                    } else {
                        out.line(&format!("task {id} already {now}"))?;
                    }
                    continue;
                }
                None => Err(e),
            },
        };
        match result {
            Ok(r) if out.json_mode() => out.json(&r)?,
            Ok(r) => out.line(&line(&r))?,
            Err(e) => {
                out.error(&e);
                code = code.max(exit::exit_code(&e));
            }
        }
    }
    Ok(code)
}

/// A requeue of a task that already waits to run (queued or retry-waiting): nothing to do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AlreadyWaiting {
    pub id: i64,
    /// Always `already_waiting`, so a script tells it from a requeue (`previous`).
    pub outcome: &'static str,
    pub status: TaskStatus,
}

/// The status of task `id` when a requeue was refused because the task already waits to run.
async fn waiting_status(agent: &Agent, id: i64, e: &Error) -> Option<TaskStatus> {
    if e.status()?.code() != tonic::Code::FailedPrecondition {
        return None;
    }
    let reply = agent.get_task(id).await.ok()?;
    let now = status(reply.task?.status).ok()?;
    matches!(now, TaskStatus::Queued | TaskStatus::RetryWait).then_some(now)
}

/// `task 7: requeued (was dead)`.
pub fn line(r: &Requeued) -> String {
    format!("task {}: requeued (was {})", r.id, r.previous)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_and_json() {
        let r = Requeued {
            id: 7,
            previous: TaskStatus::Dead,
        };
        assert_eq!(line(&r), "task 7: requeued (was dead)");
        assert_eq!(
            serde_json::to_string(&r).ok().as_deref(),
            Some(r#"{"id":7,"previous":"dead"}"#)
        );
    }
}
