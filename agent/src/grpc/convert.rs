//! Conversions between wire (`leasehold.v1`) and domain types of tasks, attempts, agents and
//! filters (enum mappings are in `leasehold_proto::wire`; the audit, schedule, resource,
//! suspect-lease, overview and paging messages convert in their own service modules). Domain →
//! wire cannot fail; wire → domain validates and refuses bad data with INVALID_ARGUMENT naming the
//! field, never a panic.

use std::sync::atomic::Ordering;
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use leasehold_proto::v1 as pb;
use leasehold_proto::wire;
use leasehold_shared::domain::unique::{MAX_UNIQUE_FOR, check_unique_for};
use leasehold_shared::domain::{AgentState, OnConflict};
use leasehold_shared::domain::{Attempt, Task};
use leasehold_shared::store::{AgentRecord, Blocker};
use leasehold_shared::{Progress, TaskError, TaskId, TaskStatus, TaskType};
use tonic::Status;

use crate::runtime::core::Core;

/// Unix milliseconds of a database time.
pub fn ms(t: DateTime<Utc>) -> i64 {
    t.timestamp_millis()
}

/// Unix milliseconds of a database time; 0 for none.
pub fn opt_ms(t: Option<DateTime<Utc>>) -> i64 {
    t.map_or(0, ms)
}

/// A request refused for a value that does not validate: `INVALID_ARGUMENT` with its message.
pub fn invalid(e: impl std::fmt::Display) -> Status {
    Status::invalid_argument(e.to_string())
}

fn json_text(v: &Option<serde_json::Value>) -> String {
    v.as_ref().map(|v| v.to_string()).unwrap_or_default()
}

/// A database time from the wire; 0 means none.
pub fn time_from_wire(field: &str, value: i64) -> Result<Option<DateTime<Utc>>, Status> {
    if value == 0 {
        return Ok(None);
    }
    // Years 1970..=9999: anything else is a unit mistake (seconds for ms, say).
    if !(0..=253_402_300_799_999).contains(&value) {
        return Err(Status::invalid_argument(format!(
            "{field}: {value} is not a time in Unix milliseconds (1970..=9999)"
        )));
    }
    Utc.timestamp_millis_opt(value)
        .single()
        .map(Some)
        .ok_or_else(|| Status::invalid_argument(format!("{field}: {value} is not a time")))
}

/// Progress counters on the wire.
pub fn progress_to_wire(p: &Progress) -> pb::Progress {
    pb::Progress {
        total: p.total,
        processed: p.processed,
        succeeded: p.succeeded,
        failed: p.failed,
        skipped: p.skipped,
    }
}

fn error_to_wire(e: &TaskError) -> pb::TaskError {
    pb::TaskError {
        code: e.code.clone(),
        message: e.message.clone(),
        retryable: e.retryable,
    }
}

/// A status on the wire (the one mapping is [`leasehold_proto::wire`]).
pub fn status_to_wire(s: TaskStatus) -> pb::TaskStatus {
    wire::status_to_wire(s)
}

/// A status from the wire (an enum number); UNSPECIFIED and unknown numbers are refused.
pub fn status_from_wire(field: &str, n: i32) -> Result<TaskStatus, Status> {
    wire::status_from_wire(n).ok_or_else(|| {
        if n == pb::TaskStatus::Unspecified as i32 {
            Status::invalid_argument(format!(
                "{field}: TASK_STATUS_UNSPECIFIED is not a task status"
            ))
        } else {
            Status::invalid_argument(format!("{field}: {n} is not a task status"))
        }
    })
}

/// A task on the wire.
pub fn task_to_wire(t: &Task) -> pb::Task {
    pb::Task {
        id: t.id.0,
        task_type: t.task_type.as_str().to_string(),
        payload_json: t.payload.to_string(),
        priority: i32::from(t.priority),
        status: status_to_wire(t.status) as i32,
        attempt: t.attempt,
        max_attempts: t.max_attempts,
        lease_owner: t
            .lease_owner
            .as_ref()
            .map(|o| o.as_str().to_string())
            .unwrap_or_default(),
        lease_epoch: t.lease_epoch.0,
        available_at_ms: ms(t.available_at),
        created_at_ms: ms(t.created_at),
        finished_at_ms: opt_ms(t.finished_at),
        last_error: t.last_error.as_ref().map(error_to_wire),
        result_json: json_text(&t.result),
        progress_json: t
            .progress
            .as_ref()
            .and_then(|p| serde_json::to_string(p).ok())
            .unwrap_or_default(),
        deadline_at_ms: opt_ms(t.deadline_at),
        timeout_ms: t.timeout_ms.unwrap_or(0),
        lease_until_ms: opt_ms(t.lease_until),
        heartbeat_at_ms: opt_ms(t.heartbeat_at),
        started_at_ms: opt_ms(t.started_at),
        updated_at_ms: ms(t.updated_at),
        idempotency_key: t.idempotency_key.clone().unwrap_or_default(),
        concurrency_key: t.concurrency_key.clone().unwrap_or_default(),
        snoozes: t.snoozes,
        checkpoint_json: json_text(&t.checkpoint),
        checkpoint_at_ms: opt_ms(t.checkpoint_at),
    }
}

/// An attempt on the wire.
#[allow(deprecated)] // `outcome` is filled for consoles older than `attempt_outcome`
pub fn attempt_to_wire(a: &Attempt) -> pb::Attempt {
    let (attempt_outcome, outcome) = wire::write(a.outcome);
    pb::Attempt {
        epoch: a.epoch.0,
        attempt: a.attempt,
        agent: a.agent.as_str().to_string(),
        started_at_ms: ms(a.started_at),
        finished_at_ms: ms(a.finished_at),
        outcome,
        attempt_outcome,
        error: a.error.as_ref().map(error_to_wire),
    }
}

/// A blocker on the wire.
pub fn blocker_to_wire(b: &Blocker) -> pb::Blocker {
    pb::Blocker {
        kind: b.kind.as_str().to_string(),
        message: b.message.clone(),
    }
}

/// A registry row on the wire.
#[allow(deprecated)] // `state` is filled for consoles older than `agent_state`
pub fn agent_to_wire(a: &AgentRecord) -> pb::AgentInfo {
    let (agent_state, state) = wire::write(a.state);
    pb::AgentInfo {
        id: a.id.as_str().to_string(),
        host: a.host.clone(),
        pid: a.pid,
        grpc_address: a.grpc_address.clone().unwrap_or_default(),
        version: a.version.clone(),
        started_at_ms: ms(a.started_at),
        heartbeat_at_ms: ms(a.heartbeat_at),
        state,
        agent_state,
        local_concurrency: a.local_concurrency,
        name: a.name.clone(),
        task_types: a.task_types.clone(),
        active: a.active,
        leader: a.leader,
        stopped_at_ms: opt_ms(a.stopped_at),
    }
}

/// The leader lease row on the wire.
pub fn leader_to_wire(l: &leasehold_shared::store::LeaderRecord) -> pb::LeaderInfo {
    pb::LeaderInfo {
        owner: l
            .owner
            .as_ref()
            .map(|o| o.as_str().to_string())
            .unwrap_or_default(),
        term: l.term,
        elected_at_ms: opt_ms(l.elected_at),
        lease_until_ms: opt_ms(l.lease_until),
        heartbeat_at_ms: opt_ms(l.heartbeat_at),
        held: l.held(),
    }
}

/// This agent's counters on the wire.
#[allow(deprecated)] // `state` is filled for consoles older than `agent_state`
pub(crate) fn stats_to_wire(core: &Core) -> pb::AgentStats {
    let s = &core.stats;
    let g = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
    let held = core.book.len();
    let (agent_state, state) = wire::write(if core.is_draining() {
        AgentState::Draining
    } else {
        AgentState::Running
    });
    pb::AgentStats {
        active: u32::try_from(core.book.executing()).unwrap_or(u32::MAX),
        local_limit: u32::try_from(core.book.limit()).unwrap_or(u32::MAX),
        claimed: g(&s.claimed),
        succeeded: g(&s.succeeded) + g(&s.partially_succeeded),
        failed: g(&s.failed),
        fenced_writes: g(&s.fenced),
        renewal_failures: g(&s.renewal_failures),
        dead: g(&s.dead),
        cancelled: g(&s.cancelled),
        released: g(&s.released),
        lease_lost: g(&s.lease_lost),
        retried: g(&s.retried),
        held: u32::try_from(held).unwrap_or(u32::MAX),
        state,
        agent_state,
        leader: core.leading.load(Ordering::Relaxed),
    }
}

/// A task type from the wire.
pub fn task_type_from_wire(field: &str, name: &str) -> Result<TaskType, Status> {
    TaskType::new(name).map_err(|e| Status::invalid_argument(format!("{field}: {e}")))
}

/// An optional task type from the wire (empty = none).
pub fn opt_task_type(field: &str, name: &str) -> Result<Option<TaskType>, Status> {
    if name.is_empty() {
        Ok(None)
    } else {
        task_type_from_wire(field, name).map(Some)
    }
}

/// A task id from the wire.
pub fn task_id_from_wire(field: &str, id: i64) -> Result<TaskId, Status> {
    if id <= 0 {
        return Err(Status::invalid_argument(format!(
            "{field}: {id} is not a task id (ids are positive)"
        )));
    }
    Ok(TaskId(id))
}

/// An error code filter from the wire (empty = none).
pub fn opt_error_code(field: &str, code: &str) -> Result<Option<String>, Status> {
    if code.is_empty() {
        return Ok(None);
    }
    if code.len() > 64 || code.chars().any(char::is_control) {
        return Err(Status::invalid_argument(format!(
            "{field}: must be at most 64 bytes without control characters"
        )));
    }
    Ok(Some(code.to_string()))
}

/// Refuses text holding a NUL character: PostgreSQL's `text` cannot store it, so it would
/// fail in the database instead of as bad input.
pub fn text_without_nul(field: &str, text: &str) -> Result<(), Status> {
    if text.contains('\0') {
        return Err(Status::invalid_argument(format!(
            "{field}: must not contain a NUL character"
        )));
    }
    Ok(())
}

/// Refuses JSON holding a NUL character (`\u0000`) in any string or key: PostgreSQL's `jsonb`
/// cannot store it.
pub fn json_without_nul(field: &str, value: &serde_json::Value) -> Result<(), Status> {
    let refused = || {
        Status::invalid_argument(format!(
            "{field}: strings and keys must not contain \\u0000 (the database cannot store it)"
        ))
    };
    let mut stack = vec![value];
    while let Some(v) = stack.pop() {
        match v {
            serde_json::Value::String(s) if s.contains('\0') => return Err(refused()),
            serde_json::Value::Array(items) => stack.extend(items),
            serde_json::Value::Object(map) => {
                if map.keys().any(|k| k.contains('\0')) {
                    return Err(refused());
                }
                stack.extend(map.values());
            }
            _ => {}
        }
    }
    Ok(())
}

/// A non-negative millisecond duration from the wire.
pub fn duration_from_wire(field: &str, value: i64) -> Result<Option<Duration>, Status> {
    match value {
        0 => Ok(None),
        v if v < 0 => Err(Status::invalid_argument(format!(
            "{field}: {v} ms is negative"
        ))),
        v => Ok(Some(Duration::from_millis(v.unsigned_abs()))),
    }
}

/// An Enqueue's `on_conflict`: UNSPECIFIED is skip; an unknown number is refused.
pub fn on_conflict_from_wire(n: i32) -> Result<OnConflict, Status> {
    wire::on_conflict_from_wire(n).ok_or_else(|| {
        Status::invalid_argument(format!(
            "on_conflict: {n} is not a conflict mode (SKIP, REPLACE or DEBOUNCE)"
        ))
    })
}

/// An Enqueue's `unique_for_ms`: 0 is none; otherwise 1..=365 days.
pub fn unique_for_from_wire(ms: i64) -> Result<Option<Duration>, Status> {
    let Some(d) = duration_from_wire("unique_for_ms", ms)? else {
        return Ok(None);
    };
    check_unique_for(d)
        .map_err(|_| {
            Status::invalid_argument(format!(
                "unique_for_ms: {ms} ms is not within 1..={} (365 days)",
                MAX_UNIQUE_FOR.as_millis()
            ))
        })
        .map(|_| Some(d))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn conflict_modes_from_the_wire_and_unknown_ones_refused() {
        for m in OnConflict::ALL {
            let n = wire::on_conflict_to_wire(m) as i32;
            assert_eq!(on_conflict_from_wire(n).unwrap(), m);
        }
        assert_eq!(on_conflict_from_wire(0).unwrap(), OnConflict::Skip);
        for n in [4, 99, -1] {
            let e = on_conflict_from_wire(n).unwrap_err();
            assert_eq!(e.code(), tonic::Code::InvalidArgument);
            assert!(e.message().starts_with("on_conflict: "), "{}", e.message());
        }
    }

    #[test]
    fn unique_for_from_the_wire_is_1ms_to_365_days() {
        assert_eq!(unique_for_from_wire(0).unwrap(), None);
        assert_eq!(
            unique_for_from_wire(1).unwrap(),
            Some(Duration::from_millis(1))
        );
        assert_eq!(
            unique_for_from_wire(31_536_000_000).unwrap(),
            Some(MAX_UNIQUE_FOR)
        );
        for ms in [-1, 31_536_000_001, i64::MAX, i64::MIN] {
            let e = unique_for_from_wire(ms).unwrap_err();
            assert_eq!(e.code(), tonic::Code::InvalidArgument);
            assert!(
                e.message().starts_with("unique_for_ms: "),
                "{}",
                e.message()
            );
        }
    }

    #[test]
    fn every_wire_status_round_trips_and_unspecified_or_unknown_ones_are_refused() {
        for s in TaskStatus::ALL {
            let n = status_to_wire(s) as i32;
            assert_eq!(status_from_wire("s", n).unwrap(), s);
        }
        let e = status_from_wire("statuses", 0).unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
        assert_eq!(
            e.message(),
            "statuses: TASK_STATUS_UNSPECIFIED is not a task status"
        );
        let e = status_from_wire("statuses", 99).unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
        assert_eq!(e.message(), "statuses: 99 is not a task status");
        let e = status_from_wire("statuses", -3).unwrap_err();
        assert_eq!(e.message(), "statuses: -3 is not a task status");
    }

    #[test]
    fn bad_ids_times_and_durations_are_refused_by_field() {
        assert!(task_id_from_wire("id", 0).is_err());
        assert!(task_id_from_wire("id", -5).is_err());
        assert_eq!(task_id_from_wire("id", 7).unwrap(), TaskId(7));
        assert!(time_from_wire("since_ms", -1).is_err());
        assert!(time_from_wire("since_ms", i64::MAX).is_err());
        assert_eq!(time_from_wire("since_ms", 0).unwrap(), None);
        assert!(
            time_from_wire("since_ms", 1_700_000_000_000)
                .unwrap()
                .is_some()
        );
        assert!(duration_from_wire("delay_ms", -1).is_err());
        assert!(opt_error_code("error_code", &"x".repeat(65)).is_err());
        assert!(opt_error_code("error_code", "a\u{1b}b").is_err());
        assert!(task_type_from_wire("task_type", "Bad Type").is_err());
    }

    #[test]
    fn nul_characters_are_refused_in_text_and_json() {
        assert!(text_without_nul("text", "a\0b").is_err());
        assert!(text_without_nul("text", "ab").is_ok());
        let nul_value = serde_json::json!({"a": [1, {"b": "x\u{0}"}]});
        let e = json_without_nul("payload_json", &nul_value).unwrap_err();
        assert!(e.message().starts_with("payload_json"), "{}", e.message());
        assert!(json_without_nul("p", &serde_json::json!({"k\u{0}": 1})).is_err());
        assert!(json_without_nul("p", &serde_json::json!({"k": ["\u{1}", null]})).is_ok());
    }
}
