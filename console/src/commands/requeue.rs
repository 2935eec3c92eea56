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
            Err(e) => Err(e),
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
