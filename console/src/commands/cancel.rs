//! `leasehold cancel ID…`: one Cancel call per id, sent to the agent holding the task
//! ([`crate::client::holders`]: the holder stops it at once), up to
//! [`CANCEL_CONCURRENCY`](crate::client::holders::CANCEL_CONCURRENCY) at a time, so cancelling
//! tasks spread over several agents takes about as long as the slowest one, not their sum.
//!
//! Every id is tried; the answers are printed in the order of the ids (a failed one on
//! stderr). The exit code is the highest of all (0 when every call was accepted, including a
//! task that finished before the cancel reached it: that is an outcome, reported plainly).

use leasehold_proto::v1;
use leasehold_shared::TaskStatus;
use leasehold_shared::domain::outcome::CancelOutcome;
use serde::Serialize;

use futures_util::StreamExt;

use super::unique;
use crate::cli::CancelArgs;
use crate::cli::values::duration_ms;
use crate::client::holders::{Holders, cancel_many};
use crate::client::{Agent, Settings};
use crate::convert::{opt_string, status};
use crate::error::{Error, Result};
use crate::exit;
use crate::output::Out;
use crate::output::table::WIDTH;
use crate::output::text::shown;

/// The requests, one per distinct id.
pub fn prepare(args: &CancelArgs) -> Result<Vec<v1::CancelRequest>> {
    let wait_ms = match args.wait_timeout {
        Some(d) => duration_ms("--wait-timeout", d).map_err(Error::Usage)?,
        None => 0,
    };
    Ok(unique(&args.ids.ids)
        .into_iter()
        .map(|id| v1::CancelRequest {
            id,
            wait: !args.no_wait,
            wait_ms,
        })
        .collect())
}

/// The outcome of a cancel refused because its task had finished: this command's own word,
/// not the agent's.
const ALREADY_FINISHED: &str = "already_finished";

/// What became of one cancel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Cancelled {
    pub id: i64,
    pub outcome: String,
    pub status: TaskStatus,
    pub holder: Option<String>,
}

impl Cancelled {
    /// Converts a reply.
    pub fn from_wire(id: i64, r: v1::CancelResponse) -> Result<Self> {
        Ok(Self {
            id,
            outcome: r.read_outcome().word().into_owned(),
            status: status(r.status)
                .map_err(|e| Error::bad_wire(format!("cancel task {id}"), e))?,
            holder: opt_string(r.holder),
        })
    }
}

/// Runs the cancels, each through the agent holding its task, several at once.
pub async fn run(
    settings: &Settings,
    agent: Agent,
    requests: Vec<v1::CancelRequest>,
    out: &mut Out,
) -> Result<u8> {
    let holders = Holders::discover(settings, agent).await;
    let mut answers = std::pin::pin!(cancel_many(&holders, requests));
    let mut code = exit::OK;
    while let Some((id, reply)) = answers.next().await {
        let reply = match reply {
            // A task that finished before the cancel: information, not a failure.
            Err(e) => match finished_status(&holders, id, &e).await {
                Some(done) => Ok(Cancelled {
                    id,
                    outcome: ALREADY_FINISHED.into(),
                    status: done,
                    holder: None,
                }),
                None => Err(e),
            },
            Ok(reply) => Cancelled::from_wire(id, reply),
        };
        match reply {
            Ok(c) if out.json_mode() => out.json(&c)?,
            Ok(c) => out.line(&line(&c))?,
            Err(e) => {
                out.error(&e);
                code = code.max(exit::exit_code(&e));
            }
        }
    }
    Ok(code)
}

/// The status of task `id` when a cancel was refused because the task had already finished
/// (the agent answers "failed precondition"; its current status says whether that is why).
pub async fn finished_status(holders: &Holders, id: i64, e: &Error) -> Option<TaskStatus> {
    if e.status()?.code() != tonic::Code::FailedPrecondition {
        return None;
    }
    let reply = holders.agent_for(id).await.get_task(id).await.ok()?;
    let done = status(reply.task?.status).ok()?;
    done.is_terminal().then_some(done)
}

/// The table line of one cancel.
pub fn line(c: &Cancelled) -> String {
    let id = c.id;
    // The agent's words parse through the one table; `already_finished` is this command's own.
    match c.outcome.parse::<CancelOutcome>() {
        Ok(CancelOutcome::Cancelled) => format!("task {id}: cancelled"),
        // The holder goes last: it is the only long part, and the line is cut to fit.
        Ok(CancelOutcome::CancelRequested) => match &c.holder {
            Some(holder) => shown(
                &format!(
                    "task {id}: cancel requested (status {}), holder {holder} will stop it",
                    c.status
                ),
                WIDTH,
            ),
            None => format!("task {id}: cancel requested (status {})", c.status),
        },
        Err(_) if c.outcome == ALREADY_FINISHED => format!("task {id} already {}", c.status),
        Ok(CancelOutcome::AlreadyRequested) => {
            format!("task {id}: cancel already requested (status {})", c.status)
        }
        Ok(CancelOutcome::Succeeded | CancelOutcome::PartiallySucceeded | CancelOutcome::Dead) => {
            format!("task {id}: finished first: {}", c.outcome)
        }
        Err(_) => format!("task {id}: {} (status {})", shown(&c.outcome, 40), c.status),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::cli::IdsArgs;
    use crate::output::text::width;

    fn cancelled(outcome: &str, status: TaskStatus, holder: Option<&str>) -> Cancelled {
        Cancelled {
            id: 7,
            outcome: outcome.into(),
            status,
            holder: holder.map(str::to_owned),
        }
    }

    #[test]
    fn requests_wait_by_default_and_ids_are_deduplicated() {
        let args = CancelArgs {
            ids: IdsArgs { ids: vec![3, 4, 3] },
            no_wait: false,
            wait_timeout: Some(Duration::from_secs(5)),
        };
        let r = prepare(&args).unwrap_or_default();
        assert_eq!(r.len(), 2);
        assert!(r.iter().all(|r| r.wait && r.wait_ms == 5000));
        let args = CancelArgs {
            ids: IdsArgs { ids: vec![3] },
            no_wait: true,
            wait_timeout: None,
        };
        let r = prepare(&args).unwrap_or_default();
        assert_eq!(
            r,
            [v1::CancelRequest {
                id: 3,
                wait: false,
                wait_ms: 0
            }]
        );
    }

    #[test]
    fn lines_say_what_happened() {
        assert_eq!(
            line(&cancelled("cancelled", TaskStatus::Cancelled, None)),
            "task 7: cancelled"
        );
        assert_eq!(
            line(&cancelled("succeeded", TaskStatus::Succeeded, None)),
            "task 7: finished first: succeeded"
        );
        assert_eq!(
            line(&cancelled(
                "cancel_requested",
                TaskStatus::CancelRequested,
                Some("web-1#3")
            )),
            "task 7: cancel requested (status cancel_requested), holder web-1#3 will stop it"
        );
        assert_eq!(
            line(&cancelled(
                "already_requested",
                TaskStatus::CancelRequested,
                None
            )),
            "task 7: cancel already requested (status cancel_requested)"
        );
        let odd = line(&cancelled(
            "new\u{1b}thing",
            TaskStatus::Running,
            Some(&"h".repeat(300)),
        ));
        assert_eq!(odd, "task 7: new\\u{1b}thing (status running)");
        let long = line(&cancelled(
            "cancel_requested",
            TaskStatus::Running,
            Some(&"h".repeat(300)),
        ));
        assert!(width(&long) <= 80, "{long}");
    }

    #[test]
    fn json_of_a_cancel() {
        let c = Cancelled::from_wire(
            7,
            v1::CancelResponse {
                cancel_outcome: v1::CancelOutcome::Cancelled as i32,
                status: v1::TaskStatus::Cancelled as i32,
                holder: String::new(),
                ..Default::default()
            },
        )
        .ok();
        let json = c.and_then(|c| serde_json::to_string(&c).ok());
        assert_eq!(
            json.as_deref(),
            Some(r#"{"id":7,"outcome":"cancelled","status":"cancelled","holder":null}"#)
        );
        let bad = Cancelled::from_wire(7, v1::CancelResponse::default());
        assert!(matches!(bad, Err(Error::BadWire { .. })));
    }
}
