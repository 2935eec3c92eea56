//! `leasehold enqueue TYPE …`: one Enqueue call.
//!
//! Checked locally before connecting: the payload is JSON (and at most the gRPC message
//! limit), the times resolve. Everything else (payload size limit, attempts, timeouts) is the
//! agent's to judge. The payload is sent as the text given, so numbers keep their precision.

use std::io::Read;
use std::path::Path;

use chrono::{DateTime, Utc};
use leasehold_proto::MAX_MESSAGE_BYTES;
use leasehold_proto::{v1, wire};
use leasehold_shared::TaskStatus;
use leasehold_shared::domain::OnConflict;
use leasehold_shared::store::EnqueueOutcome;
use serde::Serialize;

use crate::cli::EnqueueArgs;
use crate::cli::values::{duration_ms, epoch_ms};
use crate::client::Agent;
use crate::convert::task::TaskView;
use crate::error::{Error, Result};
use crate::exit;
use crate::output::Out;
use crate::output::text::{short_duration, shown};

/// Checks the arguments and builds the request.
pub fn prepare(args: &EnqueueArgs, now: DateTime<Utc>) -> Result<v1::EnqueueRequest> {
    let payload_json = match (&args.payload, &args.payload_file) {
        (Some(text), _) => text.clone(),
        (None, Some(path)) => read_payload(path)?,
        (None, None) => "{}".to_owned(),
    };
    request(args, payload_json, now)
}

/// The request for a payload already read.
pub fn request(
    args: &EnqueueArgs,
    payload_json: String,
    now: DateTime<Utc>,
) -> Result<v1::EnqueueRequest> {
    if let Err(e) = serde_json::from_str::<serde::de::IgnoredAny>(&payload_json) {
        return Err(Error::usage(format!("the payload is not valid JSON: {e}")));
    }
    let delay_ms = match (args.delay, args.run_at) {
        (Some(d), _) => duration_ms("--delay", d).map_err(Error::Usage)?,
        // A time already passed means "now".
        (None, Some(at)) => (at - now).num_milliseconds().max(0),
        (None, None) => 0,
    };
    let deadline_at_ms = match args.deadline {
        Some(d) => {
            let at = d
                .after(now)
                .map_err(|e| Error::usage(format!("--deadline: {e}")))?;
            epoch_ms("--deadline", at).map_err(Error::Usage)?
        }
        None => 0,
    };
    let timeout_ms = match args.timeout {
        Some(t) => duration_ms("--timeout", t).map_err(Error::Usage)?,
        None => 0,
    };
    Ok(v1::EnqueueRequest {
        task_type: args.task_type.clone(),
        payload_json,
        priority: i32::from(args.priority),
        delay_ms,
        max_attempts: args.max_attempts.unwrap_or(0),
        idempotency_key: args.idempotency_key.clone().unwrap_or_default(),
        deadline_at_ms,
        timeout_ms,
        concurrency_key: args.concurrency_key.clone().unwrap_or_default(),
        on_conflict: args
            .on_conflict
            .map_or(0, |m| wire::on_conflict_to_wire(m) as i32),
        unique_for_ms: match args.unique_for {
            Some(d) => duration_ms("--unique-for", d).map_err(Error::Usage)?,
            None => 0,
        },
    })
}

/// Reads `--payload-file` (`-` = stdin), refusing more than the gRPC message limit.
fn read_payload(path: &Path) -> Result<String> {
    let what = if path == Path::new("-") {
        "reading the payload from stdin".to_owned()
    } else {
        format!("reading --payload-file {}", path.display())
    };
    let local = |source| Error::Local {
        what: what.clone(),
        source,
    };
    let limit = u64::try_from(MAX_MESSAGE_BYTES).unwrap_or(u64::MAX);
    let mut bytes = Vec::new();
    if path == Path::new("-") {
        std::io::stdin()
            .take(limit + 1)
            .read_to_end(&mut bytes)
            .map_err(local)?;
    } else {
        std::fs::File::open(path)
            .and_then(|f| f.take(limit + 1).read_to_end(&mut bytes))
            .map_err(local)?;
    }
    if bytes.len() > MAX_MESSAGE_BYTES {
        return Err(Error::usage(format!(
            "{what}: the payload is larger than {MAX_MESSAGE_BYTES} bytes"
        )));
    }
    String::from_utf8(bytes).map_err(|_| Error::usage(format!("{what}: the payload is not UTF-8")))
}

/// The JSON output: the task plus what the enqueue did.
#[derive(Serialize)]
struct Enqueued<'a> {
    #[serde(flatten)]
    task: &'a TaskView,
    created: bool,
    outcome: &'static str,
    existing_status: Option<TaskStatus>,
    released_from: Option<i64>,
}

/// What the agent said the enqueue did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reply {
    pub outcome: EnqueueOutcome,
    /// The status the key's task had when found.
    pub existing_status: Option<TaskStatus>,
    /// The finished task that gave the key up (`--unique-for`).
    pub released_from: Option<i64>,
    /// The mode asked for (an unchanged task is told apart from a skip).
    pub mode: OnConflict,
}

impl Reply {
    /// The reply's outcome fields; an agent from before unique enqueues sends none, and its
    /// `created` says which of created and existing it was.
    pub fn from_wire(reply: &v1::EnqueueResponse, mode: OnConflict) -> Self {
        let outcome = wire::enqueue_outcome_from_wire(reply.outcome).unwrap_or(if reply.created {
            EnqueueOutcome::Created
        } else {
            EnqueueOutcome::Existing
        });
        Reply {
            outcome,
            existing_status: wire::status_from_wire(reply.existing_status),
            released_from: (reply.released_from > 0).then_some(reply.released_from),
            mode,
        }
    }
}

/// Calls Enqueue and prints the task. Every outcome is success (exit 0): a conflict that
/// changed nothing is what the mode asked for.
pub async fn run(agent: &Agent, request: v1::EnqueueRequest, out: &mut Out) -> Result<u8> {
    let task_type = request.task_type.clone();
    let mode = wire::on_conflict_from_wire(request.on_conflict).unwrap_or_default();
    let reply = agent.enqueue(request).await?;
    let what = format!("enqueue {task_type} (task {} was enqueued)", reply.id);
    let said = Reply::from_wire(&reply, mode);
    let wire_task = reply
        .task
        .ok_or(crate::convert::WireError::MissingField("task"))
        .map_err(|e| Error::bad_wire(what.clone(), e))?;
    let task = TaskView::from_wire(wire_task).map_err(|e| Error::bad_wire(what, e))?;
    if out.json_mode() {
        out.json(&Enqueued {
            task: &task,
            created: reply.created,
            outcome: said.outcome.as_str(),
            existing_status: said.existing_status,
            released_from: said.released_from,
        })?;
    } else {
        out.line(&table_line(&task, &said))?;
    }
    Ok(exit::OK)
}

/// `enqueued task 42 (type noop, priority 0)` (`…, concurrency key acme)` with a key), or what
/// happened to the idempotency key's task (see the command's help).
pub fn table_line(task: &TaskView, reply: &Reply) -> String {
    let key = shown(task.idempotency_key.as_deref().unwrap_or(""), 48);
    match reply.outcome {
        EnqueueOutcome::Created => {
            let concurrency = task
                .concurrency_key
                .as_deref()
                .map(|k| format!(", concurrency key {}", shown(k, 48)))
                .unwrap_or_default();
            let released = reply
                .released_from
                .map(|old| format!(", idempotency key \"{key}\" released by task {old}"))
                .unwrap_or_default();
            format!(
                "enqueued task {} (type {}, priority {}{concurrency}{released})",
                task.id,
                shown(&task.task_type, 64),
                task.priority
            )
        }
        EnqueueOutcome::Existing if reply.mode == OnConflict::Skip => {
            format!("task {} already exists (idempotency key {key})", task.id)
        }
        EnqueueOutcome::Existing => format!(
            "task {} exists ({}; idempotency key \"{key}\")",
            task.id,
            reply.existing_status.unwrap_or(task.status)
        ),
        EnqueueOutcome::Replaced => {
            format!("task {} replaced (idempotency key \"{key}\")", task.id)
        }
        EnqueueOutcome::Debounced => {
            let (to, wait) = match (task.available_at, task.updated_at) {
                (Some(at), Some(now)) => (
                    at.rfc3339(),
                    format!(
                        "in {}; ",
                        short_duration((at.millis() - now.millis()).max(0))
                    ),
                ),
                (Some(at), None) => (at.rfc3339(), String::new()),
                _ => ("?".to_owned(), String::new()),
            };
            format!(
                "task {} debounced to {to} ({wait}idempotency key \"{key}\")",
                task.id
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::cli::values::TimeOrDuration;
    use crate::convert::task::tests::wire_task;

    fn args() -> EnqueueArgs {
        EnqueueArgs {
            task_type: "noop".into(),
            payload: None,
            payload_file: None,
            priority: 0,
            delay: None,
            run_at: None,
            deadline: None,
            timeout: None,
            max_attempts: None,
            idempotency_key: None,
            concurrency_key: None,
            on_conflict: None,
            unique_for: None,
        }
    }

    fn now() -> DateTime<Utc> {
        DateTime::from_timestamp_millis(1_764_588_000_000).unwrap_or_default()
    }

    #[test]
    fn defaults_send_an_empty_object_and_zeroes() {
        let r = prepare(&args(), now()).ok();
        assert_eq!(
            r,
            Some(v1::EnqueueRequest {
                task_type: "noop".into(),
                payload_json: "{}".into(),
                ..Default::default()
            })
        );
    }

    #[test]
    fn every_flag_reaches_the_request() {
        let mut a = args();
        a.payload = Some(r#"{"big": 12345678901234567890123}"#.into());
        a.priority = -7;
        a.delay = Some(Duration::from_secs(90));
        a.deadline = Some(TimeOrDuration::Relative(Duration::from_secs(3600)));
        a.timeout = Some(Duration::from_secs(30));
        a.max_attempts = Some(5);
        a.idempotency_key = Some("order-9".into());
        a.concurrency_key = Some("acme".into());
        let r = prepare(&a, now()).ok();
        assert_eq!(
            r,
            Some(v1::EnqueueRequest {
                task_type: "noop".into(),
                // Sent as given: no precision lost to a re-encoding.
                payload_json: r#"{"big": 12345678901234567890123}"#.into(),
                priority: -7,
                delay_ms: 90_000,
                max_attempts: 5,
                idempotency_key: "order-9".into(),
                deadline_at_ms: 1_764_591_600_000,
                timeout_ms: 30_000,
                concurrency_key: "acme".into(),
                on_conflict: 0,
                unique_for_ms: 0,
            })
        );
        a.on_conflict = Some(OnConflict::Debounce);
        a.unique_for = Some(Duration::from_secs(3600));
        let r = prepare(&a, now()).ok();
        assert_eq!(
            r.map(|r| (r.on_conflict, r.unique_for_ms)),
            Some((v1::OnConflict::Debounce as i32, 3_600_000))
        );
    }

    #[test]
    fn run_at_becomes_a_delay_and_a_past_time_means_now() {
        let mut a = args();
        a.run_at = Some(now() + chrono::Duration::seconds(45));
        assert_eq!(prepare(&a, now()).ok().map(|r| r.delay_ms), Some(45_000));
        a.run_at = Some(now() - chrono::Duration::seconds(45));
        assert_eq!(prepare(&a, now()).ok().map(|r| r.delay_ms), Some(0));
    }

    #[test]
    fn bad_json_is_refused_before_any_call() {
        let mut a = args();
        a.payload = Some("{\"unterminated\": ".into());
        assert!(matches!(prepare(&a, now()), Err(Error::Usage(m)) if m.contains("not valid JSON")));
    }

    #[test]
    fn payload_files_are_read_and_bounded() {
        let dir = std::env::temp_dir().join(format!("leasehold-enqueue-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let file = dir.join("p.json");
        let _ = std::fs::write(&file, "[1, 2, 3]");
        let mut a = args();
        a.payload_file = Some(file.clone());
        assert_eq!(
            prepare(&a, now()).ok().map(|r| r.payload_json).as_deref(),
            Some("[1, 2, 3]")
        );
        let _ = std::fs::write(&file, vec![b' '; MAX_MESSAGE_BYTES + 1]);
        assert!(matches!(prepare(&a, now()), Err(Error::Usage(m)) if m.contains("larger")));
        a.payload_file = Some(dir.join("missing.json"));
        assert!(matches!(prepare(&a, now()), Err(Error::Local { .. })));
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn reply(outcome: EnqueueOutcome, mode: OnConflict) -> Reply {
        Reply {
            outcome,
            existing_status: None,
            released_from: None,
            mode,
        }
    }

    #[test]
    fn table_lines() {
        let mut t = wire_task();
        t.idempotency_key = "order-1".into();
        let keyed = TaskView::from_wire(t.clone()).ok();
        let created = reply(EnqueueOutcome::Created, OnConflict::Skip);
        assert_eq!(
            keyed.as_ref().map(|t| table_line(t, &created)).as_deref(),
            Some("enqueued task 42 (type email.send, priority -3, concurrency key acme)")
        );
        let released = Reply {
            released_from: Some(41),
            ..created
        };
        assert_eq!(
            keyed.as_ref().map(|t| table_line(t, &released)).as_deref(),
            Some(
                "enqueued task 42 (type email.send, priority -3, concurrency key acme, \
                 idempotency key \"order-1\" released by task 41)"
            )
        );
        t.concurrency_key = String::new();
        let task = TaskView::from_wire(t.clone()).ok();
        let task = task.as_ref();
        assert_eq!(
            task.map(|t| table_line(t, &created)).as_deref(),
            Some("enqueued task 42 (type email.send, priority -3)")
        );
        let skip = reply(EnqueueOutcome::Existing, OnConflict::Skip);
        assert_eq!(
            task.map(|t| table_line(t, &skip)).as_deref(),
            Some("task 42 already exists (idempotency key order-1)")
        );
        let not_waiting = Reply {
            existing_status: Some(TaskStatus::Running),
            ..reply(EnqueueOutcome::Existing, OnConflict::Replace)
        };
        assert_eq!(
            task.map(|t| table_line(t, &not_waiting)).as_deref(),
            Some("task 42 exists (running; idempotency key \"order-1\")")
        );
        let replaced = reply(EnqueueOutcome::Replaced, OnConflict::Replace);
        assert_eq!(
            task.map(|t| table_line(t, &replaced)).as_deref(),
            Some("task 42 replaced (idempotency key \"order-1\")")
        );
        t.updated_at_ms = t.available_at_ms - 30_000;
        let task = TaskView::from_wire(t).ok();
        let debounced = reply(EnqueueOutcome::Debounced, OnConflict::Debounce);
        let line = task.as_ref().map(|t| table_line(t, &debounced));
        let line = line.unwrap_or_default();
        assert!(line.starts_with("task 42 debounced to 20"), "{line}");
        assert!(
            line.ends_with("(in 30s; idempotency key \"order-1\")"),
            "{line}"
        );
    }

    #[test]
    fn an_old_agent_without_an_outcome_is_read_from_created() {
        let mut r = v1::EnqueueResponse {
            created: true,
            ..Default::default()
        };
        assert_eq!(
            Reply::from_wire(&r, OnConflict::Skip).outcome,
            EnqueueOutcome::Created
        );
        r.created = false;
        assert_eq!(
            Reply::from_wire(&r, OnConflict::Skip).outcome,
            EnqueueOutcome::Existing
        );
        r.outcome = v1::EnqueueOutcome::Debounced as i32;
        r.existing_status = v1::TaskStatus::RetryWait as i32;
        let read = Reply::from_wire(&r, OnConflict::Debounce);
        assert_eq!(read.outcome, EnqueueOutcome::Debounced);
        assert_eq!(read.existing_status, Some(TaskStatus::RetryWait));
    }

    #[test]
    fn json_has_the_task_created_and_the_outcome() {
        let task = TaskView::from_wire(wire_task()).ok();
        let json = task.map(|task| {
            serde_json::to_value(Enqueued {
                task: &task,
                created: false,
                outcome: "replaced",
                existing_status: Some(TaskStatus::Queued),
                released_from: None,
            })
            .ok()
        });
        let json = json.flatten().unwrap_or_default();
        assert_eq!(json["id"], 42);
        assert_eq!(json["created"], false);
        assert_eq!(json["outcome"], "replaced");
        assert_eq!(json["existing_status"], "queued");
        assert_eq!(json["released_from"], serde_json::Value::Null);
        assert_eq!(json["status"], "dead");
        assert_eq!(json["concurrency_key"], "acme");
    }
}
