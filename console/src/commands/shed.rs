//! `leasehold shed set|clear`: SetShedAfter, a type's load shedding.
//!
//! Checked locally before connecting (exit 2, no call): the task type and the duration, whole
//! milliseconds from 1 ms to 7 days ([`crate::cli::values::shed_after`]). A viewer token is
//! refused by the agent (permission denied, exit 4); whatever else the agent refuses maps as
//! every command's errors do ([`crate::exit`]). What a type sheds is counted in `leasehold
//! types` (SHED/M) and the Types view.

use leasehold_proto::v1;
use serde::Serialize;

use crate::cli::{ShedSetArgs, TypeArgs};
use crate::client::Agent;
use crate::convert::WireError;
use crate::convert::shed::{after_text, shed_after_opt};
use crate::error::{Error, Result};
use crate::output::Out;
use crate::output::text::shown;

/// The request of `shed set` (the duration was checked when parsed).
pub fn prepare_set(args: &ShedSetArgs) -> v1::SetShedAfterRequest {
    v1::SetShedAfterRequest {
        task_type: args.task_type.clone(),
        shed_after_ms: u64::try_from(args.after.as_millis()).unwrap_or(u64::MAX),
        clear: false,
    }
}

/// The request of `shed clear`.
pub fn prepare_clear(args: &TypeArgs) -> v1::SetShedAfterRequest {
    v1::SetShedAfterRequest {
        task_type: args.task_type.clone(),
        shed_after_ms: 0,
        clear: true,
    }
}

/// The JSON of `shed set` and `clear`; `null` means the type does not (or did not) shed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Changed {
    pub task_type: String,
    /// The setting now in force (`null` after a clear).
    pub shed_after_ms: Option<u64>,
    pub previous_ms: Option<u64>,
}

impl Changed {
    /// The change a reply reports for `request`: a set must come back with a setting, a clear
    /// without one.
    pub fn from_reply(
        request: &v1::SetShedAfterRequest,
        reply: &v1::SetShedAfterResponse,
    ) -> Result<Self, WireError> {
        let now = shed_after_opt("shed_after_ms", reply.shed_after_ms)?;
        match (request.clear, now) {
            (false, None) => return Err(WireError::MissingField("shed_after_ms")),
            (true, Some(ms)) => {
                return Err(WireError::Broken(format!(
                    "shedding after {} still in force after clearing it",
                    after_text(ms)
                )));
            }
            _ => {}
        }
        Ok(Self {
            task_type: request.task_type.clone(),
            shed_after_ms: now,
            previous_ms: shed_after_opt("previous_ms", reply.previous_ms)?,
        })
    }
}

/// Runs `shed set` or `shed clear` (one RPC, SetShedAfter).
pub async fn run(agent: &Agent, request: v1::SetShedAfterRequest, out: &mut Out) -> Result<u8> {
    let reply = agent.set_shed_after(request.clone()).await?;
    let changed = Changed::from_reply(&request, &reply)
        .map_err(|e| Error::bad_wire("set load shedding", e))?;
    super::print_change(out, &reply.warnings, &changed, line)
}

/// `type email.send sheds tasks waiting over 30s (was never)`, `type email.send no longer
/// sheds (was 30s)`, …
pub fn line(c: &Changed) -> String {
    let t = shown(&c.task_type, 64);
    let was = c.previous_ms.map_or_else(|| "never".to_owned(), after_text);
    match (c.shed_after_ms, c.previous_ms) {
        (Some(now), Some(before)) if now == before => {
            format!(
                "type {t} sheds tasks waiting over {} (unchanged)",
                after_text(now)
            )
        }
        (Some(now), _) => format!(
            "type {t} sheds tasks waiting over {} (was {was})",
            after_text(now)
        ),
        (None, Some(_)) => format!("type {t} no longer sheds (was {was})"),
        (None, None) => format!("type {t} did not shed (nothing changed)"),
    }
}

#[cfg(test)]
mod tests;
