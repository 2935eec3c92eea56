//! `leasehold run-now ID…` (RunNow) and `leasehold delete ID…` (DeleteTask): one call per id, in
//! order; a failed one is reported on stderr and the next one still runs; the exit code is the
//! highest of all.

use leasehold_shared::TaskStatus;
use serde::Serialize;

use crate::client::Agent;
use crate::convert::status;
use crate::error::{Error, Result};
use crate::exit;
use crate::output::Out;

/// What a run-now did to one task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RanNow {
    pub id: i64,
    /// Its status (unchanged: it waits for a claim).
    pub status: TaskStatus,
    /// False when it was already due.
    pub moved: bool,
}

/// One deleted task and the status it had.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Deleted {
    pub id: i64,
    pub previous: TaskStatus,
}

/// Runs the run-nows.
pub async fn run_now(agent: &Agent, ids: Vec<i64>, out: &mut Out) -> Result<u8> {
    let mut code = exit::OK;
    for id in ids {
        let result = agent.run_now(id).await.and_then(|reply| {
            status(reply.status)
                .map(|status| RanNow {
                    id,
                    status,
                    moved: reply.moved,
                })
                .map_err(|e| Error::bad_wire(format!("run task {id} now"), e))
        });
        code = code.max(report(out, result, ran_now_line)?);
    }
    Ok(code)
}

/// Runs the deletes.
pub async fn delete(agent: &Agent, ids: Vec<i64>, out: &mut Out) -> Result<u8> {
    let mut code = exit::OK;
    for id in ids {
        let result = agent.delete_task(id).await.and_then(|reply| {
            status(reply.previous)
                .map(|previous| Deleted { id, previous })
                .map_err(|e| Error::bad_wire(format!("delete task {id}"), e))
        });
        code = code.max(report(out, result, deleted_line)?);
    }
    Ok(code)
}

/// Prints one outcome (as JSON or as its line) or its error; the exit code it makes.
fn report<T: Serialize>(
    out: &mut Out,
    result: Result<T>,
    line: impl Fn(&T) -> String,
) -> Result<u8> {
    match result {
        Ok(r) if out.json_mode() => out.json(&r).map(|()| exit::OK),
        Ok(r) => out.line(&line(&r)).map(|()| exit::OK),
        Err(e) => {
            out.error(&e);
            Ok(exit::exit_code(&e))
        }
    }
}

/// `task 7: due now (queued)` or `task 7: already due (queued)`.
pub fn ran_now_line(r: &RanNow) -> String {
    let what = if r.moved { "due now" } else { "already due" };
    format!("task {}: {what} ({})", r.id, r.status)
}

/// `task 7: deleted (was dead)`.
pub fn deleted_line(r: &Deleted) -> String {
    format!("task {}: deleted (was {})", r.id, r.previous)
}
