//! `leasehold enqueue TYPE …`: one Enqueue call.
//!
//! Checked locally before connecting: the payload is JSON (and at most the gRPC message
//! limit), the times resolve. Everything else (payload size limit, attempts, timeouts) is the
//! agent's to judge. The payload is sent as the text given, so numbers keep their precision.

use std::io::Read;
use std::path::Path;

use chrono::{DateTime, Utc};
use leasehold_proto::MAX_MESSAGE_BYTES;
use leasehold_proto::v1;
use serde::Serialize;

use crate::cli::EnqueueArgs;
use crate::cli::values::{duration_ms, epoch_ms};
use crate::client::Agent;
use crate::convert::task::TaskView;
use crate::error::{Error, Result};
use crate::exit;
use crate::output::Out;
use crate::output::text::shown;

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

/// The JSON output: the task plus `created`.
#[derive(Serialize)]
struct Enqueued<'a> {
    #[serde(flatten)]
    task: &'a TaskView,
    created: bool,
}

/// Calls Enqueue and prints the task.
pub async fn run(agent: &Agent, request: v1::EnqueueRequest, out: &mut Out) -> Result<u8> {
    let task_type = request.task_type.clone();
    let reply = agent.enqueue(request).await?;
    let what = format!("enqueue {task_type} (task {} was enqueued)", reply.id);
    let wire = reply
        .task
        .ok_or(crate::convert::WireError::MissingField("task"))
        .map_err(|e| Error::bad_wire(what.clone(), e))?;
    let task = TaskView::from_wire(wire).map_err(|e| Error::bad_wire(what, e))?;
    if out.json_mode() {
        out.json(&Enqueued {
            task: &task,
            created: reply.created,
        })?;
    } else {
        out.line(&table_line(&task, reply.created))?;
    }
    Ok(exit::OK)
}

/// `enqueued task 42 (type noop, priority 0)` (`…, concurrency key acme)` with a key) or
/// `task 42 already exists (idempotency key K)`.
pub fn table_line(task: &TaskView, created: bool) -> String {
    if created {
        let key = task
            .concurrency_key
            .as_deref()
            .map(|k| format!(", concurrency key {}", shown(k, 48)))
            .unwrap_or_default();
        format!(
            "enqueued task {} (type {}, priority {}{key})",
            task.id,
            shown(&task.task_type, 64),
            task.priority
        )
    } else {
        format!(
            "task {} already exists (idempotency key {})",
            task.id,
            shown(task.idempotency_key.as_deref().unwrap_or(""), 48)
        )
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
            })
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

    #[test]
    fn table_lines() {
        let mut t = wire_task();
        t.idempotency_key = "order-1".into();
        let keyed = TaskView::from_wire(t.clone()).ok();
        assert_eq!(
            keyed.as_ref().map(|t| table_line(t, true)).as_deref(),
            Some("enqueued task 42 (type email.send, priority -3, concurrency key acme)")
        );
        t.concurrency_key = String::new();
        let task = TaskView::from_wire(t).ok();
        let task = task.as_ref();
        assert_eq!(
            task.map(|t| table_line(t, true)).as_deref(),
            Some("enqueued task 42 (type email.send, priority -3)")
        );
        assert_eq!(
            task.map(|t| table_line(t, false)).as_deref(),
            Some("task 42 already exists (idempotency key order-1)")
        );
    }

    #[test]
    fn json_has_the_task_and_created() {
        let task = TaskView::from_wire(wire_task()).ok();
        let json = task.map(|task| {
            serde_json::to_value(Enqueued {
                task: &task,
                created: true,
            })
            .ok()
        });
        let json = json.flatten().unwrap_or_default();
        assert_eq!(json["id"], 42);
        assert_eq!(json["created"], true);
        assert_eq!(json["status"], "dead");
        assert_eq!(json["concurrency_key"], "acme");
    }
}
