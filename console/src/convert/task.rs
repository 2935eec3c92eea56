//! Tasks, attempts and pages of tasks from the wire (see the parent module for conventions).
//!
//! The JSON of a task (`tasks show`, `tasks ls`, `enqueue --output json`):
//!
//! ```text
//! {"id":42,"task_type":"noop","status":"queued","payload":{},"priority":0,"attempt":0,
//!  "max_attempts":3,"lease_owner":null,"lease_epoch":0,"available_at":"…Z",
//!  "created_at":"…Z","started_at":null,"finished_at":null,"deadline_at":null,
//!  "lease_until":null,"heartbeat_at":null,"updated_at":"…Z","timeout_ms":null,
//!  "last_error":null,"result":null,"progress":null,"idempotency_key":null,
//!  "concurrency_key":null,"snoozes":0,"checkpoint":null,"checkpoint_at":null}
//! ```

use leasehold_proto::v1;
use leasehold_shared::TaskStatus;
use serde::Serialize;

use super::{Timestamp, WireError, json, opt_json, opt_ms, opt_string, opt_time, status, time};

/// A task as the commands show it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TaskView {
    pub id: i64,
    pub task_type: String,
    pub status: TaskStatus,
    pub payload: serde_json::Value,
    pub priority: i16,
    pub attempt: i32,
    pub max_attempts: i32,
    pub lease_owner: Option<String>,
    pub lease_epoch: i64,
    pub available_at: Option<Timestamp>,
    pub created_at: Option<Timestamp>,
    pub started_at: Option<Timestamp>,
    pub finished_at: Option<Timestamp>,
    pub deadline_at: Option<Timestamp>,
    pub lease_until: Option<Timestamp>,
    pub heartbeat_at: Option<Timestamp>,
    pub updated_at: Option<Timestamp>,
    pub timeout_ms: Option<i64>,
    pub last_error: Option<ErrorView>,
    pub result: Option<serde_json::Value>,
    pub progress: Option<serde_json::Value>,
    pub idempotency_key: Option<String>,
    /// Tasks of its type sharing this key run at most the type's per-key limit at a time.
    pub concurrency_key: Option<String>,
    /// Times a handler snoozed it (each gave its attempt back).
    pub snoozes: i32,
    /// The last checkpoint a holder saved; the next attempt gets it.
    pub checkpoint: Option<serde_json::Value>,
    pub checkpoint_at: Option<Timestamp>,
}

/// The last error of a task or an attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ErrorView {
    pub code: String,
    pub message: String,
    pub retryable: bool,
}

impl From<v1::TaskError> for ErrorView {
    fn from(e: v1::TaskError) -> Self {
        Self {
            code: e.code,
            message: e.message,
            retryable: e.retryable,
        }
    }
}

impl TaskView {
    /// Converts a wire task, refusing what breaks the contract.
    pub fn from_wire(t: v1::Task) -> Result<Self, WireError> {
        let id = t.id;
        Self::convert(t).map_err(|e| WireError::InTask {
            id,
            source: Box::new(e),
        })
    }

    fn convert(t: v1::Task) -> Result<Self, WireError> {
        if t.id <= 0 {
            return Err(WireError::OutOfRange {
                field: "id",
                value: t.id,
            });
        }
        let priority = i16::try_from(t.priority).map_err(|_| WireError::OutOfRange {
            field: "priority",
            value: i64::from(t.priority),
        })?;
        for (field, value) in [
            ("attempt", t.attempt),
            ("max_attempts", t.max_attempts),
            ("snoozes", t.snoozes),
        ] {
            if value < 0 {
                return Err(WireError::OutOfRange {
                    field,
                    value: i64::from(value),
                });
            }
        }
        Ok(Self {
            id: t.id,
            status: status(t.status)?,
            payload: json("payload_json", &t.payload_json)?,
            priority,
            attempt: t.attempt,
            max_attempts: t.max_attempts,
            lease_owner: opt_string(t.lease_owner),
            lease_epoch: t.lease_epoch,
            available_at: opt_time("available_at_ms", t.available_at_ms)?,
            created_at: opt_time("created_at_ms", t.created_at_ms)?,
            started_at: opt_time("started_at_ms", t.started_at_ms)?,
            finished_at: opt_time("finished_at_ms", t.finished_at_ms)?,
            deadline_at: opt_time("deadline_at_ms", t.deadline_at_ms)?,
            lease_until: opt_time("lease_until_ms", t.lease_until_ms)?,
            heartbeat_at: opt_time("heartbeat_at_ms", t.heartbeat_at_ms)?,
            updated_at: opt_time("updated_at_ms", t.updated_at_ms)?,
            timeout_ms: opt_ms("timeout_ms", t.timeout_ms)?,
            last_error: t.last_error.map(ErrorView::from),
            result: opt_json("result_json", &t.result_json)?,
            progress: opt_json("progress_json", &t.progress_json)?,
            idempotency_key: opt_string(t.idempotency_key),
            concurrency_key: opt_string(t.concurrency_key),
            snoozes: t.snoozes,
            checkpoint: opt_json("checkpoint_json", &t.checkpoint_json)?,
            checkpoint_at: opt_time("checkpoint_at_ms", t.checkpoint_at_ms)?,
            task_type: t.task_type,
        })
    }
}

/// A task's progress JSON as counters; `None` when it is not the documented object (the
/// caller then shows the JSON itself). Counters a handler left out are 0.
pub fn progress_of(value: &serde_json::Value) -> Option<leasehold_shared::Progress> {
    if !value.is_object() {
        return None;
    }
    serde_json::from_value(value.clone()).ok()
}

/// A wire lease's progress as counters.
pub fn progress_of_wire(p: &v1::Progress) -> leasehold_shared::Progress {
    leasehold_shared::Progress {
        total: p.total,
        processed: p.processed,
        succeeded: p.succeeded,
        failed: p.failed,
        skipped: p.skipped,
    }
}

/// The operator actions that apply to a task in `status` (the state machine's), so a pane
/// offers only those: cancel while it waits or runs (not once cancelling), requeue once it
/// ended.
pub fn offered_actions(status: TaskStatus) -> Offered {
    use leasehold_shared::domain::TaskAction;
    Offered {
        cancel: status != TaskStatus::CancelRequested
            && status.apply(TaskAction::RequestCancel).is_ok(),
        requeue: status.apply(TaskAction::Requeue).is_ok(),
    }
}

/// See [`offered_actions`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offered {
    pub cancel: bool,
    pub requeue: bool,
}

/// One attempt of a task.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AttemptView {
    pub attempt: i32,
    pub epoch: i64,
    pub agent: String,
    pub started_at: Option<Timestamp>,
    pub finished_at: Option<Timestamp>,
    /// Empty on the wire while it runs: `null`.
    pub outcome: Option<String>,
    pub error: Option<ErrorView>,
}

impl AttemptView {
    fn from_wire(a: v1::Attempt) -> Result<Self, WireError> {
        let outcome = opt_string(a.read_outcome().word().into_owned());
        Ok(Self {
            attempt: a.attempt,
            epoch: a.epoch,
            agent: a.agent,
            started_at: opt_time("attempt started_at_ms", a.started_at_ms)?,
            finished_at: opt_time("attempt finished_at_ms", a.finished_at_ms)?,
            outcome,
            error: a.error.map(ErrorView::from),
        })
    }
}

/// Why a task is not running, structured.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BlockerView {
    pub kind: String,
    pub message: String,
}

/// `tasks show`: one task, every attempt, and why it is not running.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TaskDetail {
    pub task: TaskView,
    pub attempts: Vec<AttemptView>,
    /// One reason per line; `null` when the task is running.
    pub why_not_running: Option<String>,
    pub blockers: Vec<BlockerView>,
    /// Database time of the read.
    pub now: Timestamp,
}

impl TaskDetail {
    /// Converts a `GetTask` reply.
    pub fn from_wire(r: v1::GetTaskResponse) -> Result<Self, WireError> {
        let task = TaskView::from_wire(r.task.ok_or(WireError::MissingField("task"))?)?;
        let id = task.id;
        let attempts = r
            .attempts
            .into_iter()
            .map(AttemptView::from_wire)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| WireError::InTask {
                id,
                source: Box::new(e),
            })?;
        Ok(Self {
            task,
            attempts,
            why_not_running: opt_string(r.why_not_running),
            blockers: r
                .blockers
                .into_iter()
                .map(|b| BlockerView {
                    kind: b.kind,
                    message: b.message,
                })
                .collect(),
            now: time("now_ms", r.now_ms)?,
        })
    }
}

impl TaskDetail {
    /// The attempts, with the one running now added when the task is held and the database
    /// has no row for it yet (an attempt's row is written when it ends): attempt N, epoch,
    /// holder and start, no finish.
    pub fn attempts_with_current(&self) -> Vec<AttemptView> {
        let mut attempts = self.attempts.clone();
        let t = &self.task;
        let held = matches!(t.status, TaskStatus::Running | TaskStatus::CancelRequested);
        if held && !attempts.iter().any(|a| a.epoch == t.lease_epoch) {
            attempts.push(AttemptView {
                attempt: t.attempt,
                epoch: t.lease_epoch,
                agent: t.lease_owner.clone().unwrap_or_default(),
                started_at: t.started_at,
                finished_at: None,
                // Not ended: no outcome yet (a cancel asked of it is said).
                outcome: (t.status == TaskStatus::CancelRequested)
                    .then(|| "cancel requested".to_owned()),
                error: None,
            });
        }
        attempts
    }
}

/// `tasks ls` / `dlq ls`: one page of tasks, newest first.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TaskPage {
    pub tasks: Vec<TaskView>,
    /// Give this as `--before` for the next page; `null` on the last page.
    pub next_before_id: Option<i64>,
    /// Database time of the read.
    pub now: Timestamp,
}

impl TaskPage {
    /// Converts a `ListTasks` reply.
    pub fn from_wire(r: v1::ListTasksResponse) -> Result<Self, WireError> {
        let next_before_id = match r.next_before_id {
            0 => None,
            1.. => Some(r.next_before_id),
            value => {
                return Err(WireError::OutOfRange {
                    field: "next_before_id",
                    value,
                });
            }
        };
        Ok(Self {
            tasks: r
                .tasks
                .into_iter()
                .map(TaskView::from_wire)
                .collect::<Result<_, _>>()?,
            next_before_id,
            now: time("now_ms", r.now_ms)?,
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A wire task with every field set, for tests of conversion and rendering.
    pub(crate) fn wire_task() -> v1::Task {
        v1::Task {
            id: 42,
            task_type: "email.send".into(),
            payload_json: r#"{"to":"a@example.com","n":[1,2]}"#.into(),
            priority: -3,
            status: v1::TaskStatus::Dead as i32,
            attempt: 3,
            max_attempts: 3,
            lease_owner: "web-1#7".into(),
            lease_epoch: 5,
            available_at_ms: 1_764_588_000_000,
            created_at_ms: 1_764_587_000_000,
            finished_at_ms: 1_764_588_003_123,
            last_error: Some(v1::TaskError {
                code: "smtp_timeout".into(),
                message: "connection timed out".into(),
                retryable: true,
            }),
            result_json: String::new(),
            progress_json: r#"{"total":10,"processed":4}"#.into(),
            deadline_at_ms: 0,
            timeout_ms: 30_000,
            lease_until_ms: 0,
            heartbeat_at_ms: 1_764_588_002_000,
            started_at_ms: 1_764_588_001_000,
            updated_at_ms: 1_764_588_003_123,
            idempotency_key: String::new(),
            concurrency_key: "acme".into(),
            snoozes: 2,
            checkpoint_json: r#"{"page":7}"#.into(),
            checkpoint_at_ms: 1_764_588_002_500,
        }
    }

    #[test]
    fn a_task_renders_as_the_documented_json() {
        let view = TaskView::from_wire(wire_task()).map_err(|e| e.to_string());
        let json = view.map(|v| serde_json::to_value(v).ok());
        let expected = serde_json::json!({
            "id": 42,
            "task_type": "email.send",
            "status": "dead",
            "payload": {"to": "a@example.com", "n": [1, 2]},
            "priority": -3,
            "attempt": 3,
            "max_attempts": 3,
            "lease_owner": "web-1#7",
            "lease_epoch": 5,
            "available_at": "2025-12-01T11:20:00.000Z",
            "created_at": "2025-12-01T11:03:20.000Z",
            "started_at": "2025-12-01T11:20:01.000Z",
            "finished_at": "2025-12-01T11:20:03.123Z",
            "deadline_at": null,
            "lease_until": null,
            "heartbeat_at": "2025-12-01T11:20:02.000Z",
            "updated_at": "2025-12-01T11:20:03.123Z",
            "timeout_ms": 30000,
            "last_error": {"code": "smtp_timeout", "message": "connection timed out", "retryable": true},
            "result": null,
            "progress": {"total": 10, "processed": 4},
            "idempotency_key": null,
            "concurrency_key": "acme",
            "snoozes": 2,
            "checkpoint": {"page": 7},
            "checkpoint_at": "2025-12-01T11:20:02.500Z",
        });
        assert_eq!(json, Ok(Some(expected)));
    }

    #[test]
    fn json_keys_keep_the_documented_order() {
        let view = TaskView::from_wire(wire_task()).ok();
        let text = view
            .and_then(|v| serde_json::to_string(&v).ok())
            .unwrap_or_default();
        assert!(
            text.starts_with(r#"{"id":42,"task_type":"email.send","status":"dead","payload":"#)
        );
    }

    #[test]
    fn every_status_renders_snake_case() {
        let names = [
            (1, "queued"),
            (2, "running"),
            (3, "retry_wait"),
            (4, "cancel_requested"),
            (5, "succeeded"),
            (6, "partially_succeeded"),
            (7, "cancelled"),
            (8, "dead"),
        ];
        for (number, name) in names {
            let mut t = wire_task();
            t.status = number;
            let json = TaskView::from_wire(t)
                .ok()
                .and_then(|v| serde_json::to_value(v).ok());
            assert_eq!(
                json.map(|j| j["status"].clone()),
                Some(serde_json::json!(name))
            );
        }
    }

    #[test]
    fn bad_wire_tasks_are_errors_naming_the_task() {
        type Spoil = fn(&mut v1::Task);
        let cases: Vec<(Spoil, &str)> = vec![
            (|t| t.status = 0, "TASK_STATUS_UNSPECIFIED"),
            (|t| t.status = 42, "task status 42"),
            (|t| t.payload_json = "{nope".into(), "payload_json"),
            (|t| t.payload_json = String::new(), "payload_json"),
            (|t| t.result_json = "[".into(), "result_json"),
            (|t| t.progress_json = "x".into(), "progress_json"),
            (|t| t.created_at_ms = -1, "created_at_ms"),
            (|t| t.finished_at_ms = i64::MAX, "finished_at_ms"),
            (|t| t.priority = 40_000, "priority"),
            (|t| t.timeout_ms = -5, "timeout_ms"),
            (|t| t.attempt = -1, "attempt"),
            (|t| t.snoozes = -1, "snoozes"),
            (|t| t.checkpoint_json = "{".into(), "checkpoint_json"),
            (|t| t.id = 0, "id"),
        ];
        for (spoil, needle) in cases {
            let mut t = wire_task();
            spoil(&mut t);
            let err = TaskView::from_wire(t).err().map(|e| e.to_string());
            let err = err.unwrap_or_default();
            assert!(err.contains(needle), "{err:?} should mention {needle}");
            assert!(err.contains("for task"), "{err:?} should name the task");
        }
    }

    #[test]
    fn a_detail_needs_its_task_and_a_page_its_clock() {
        let r = v1::GetTaskResponse {
            task: None,
            now_ms: 1,
            ..Default::default()
        };
        assert_eq!(
            TaskDetail::from_wire(r).err(),
            Some(WireError::MissingField("task"))
        );
        let page = v1::ListTasksResponse {
            tasks: vec![wire_task()],
            next_before_id: 0,
            now_ms: 0,
        };
        assert!(TaskPage::from_wire(page).is_err());
        let page = v1::ListTasksResponse {
            tasks: vec![wire_task()],
            next_before_id: 41,
            now_ms: 1_764_588_003_123,
        };
        let page = TaskPage::from_wire(page).ok();
        assert_eq!(page.and_then(|p| p.next_before_id), Some(41));
    }
}
