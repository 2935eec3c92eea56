//! Decoding of SQLite rows into domain types, and the conversions of times (INTEGER
//! microseconds since the Unix epoch) and JSON (TEXT). Bad database state (an unknown status,
//! an invalid type name, unreadable JSON, a time out of range) becomes
//! [`StoreError::Corrupt`], never a panic.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::Row;
use sqlx::sqlite::SqliteRow;

use crate::domain::{
    AgentId, Attempt, AttemptOutcome, LeaseEpoch, Policy, PolicyScope, Progress, Task, TaskError,
    TaskId, TaskStatus, TaskType,
};
use crate::store::{AgentRecord, AgentState, AuditRecord, Result, StoreError};

pub(super) fn get<'r, T>(row: &'r SqliteRow, column: &'static str) -> Result<T>
where
    T: sqlx::Decode<'r, sqlx::Sqlite> + sqlx::Type<sqlx::Sqlite>,
{
    row.try_get(column).map_err(|e| StoreError::Corrupt {
        what: column,
        detail: e.to_string(),
    })
}

/// A stored time (microseconds since the epoch, UTC).
pub(super) fn time(us: i64, what: &'static str) -> Result<DateTime<Utc>> {
    DateTime::from_timestamp_micros(us).ok_or_else(|| StoreError::Corrupt {
        what,
        detail: format!("{us} µs is not a time"),
    })
}

pub(super) fn get_time(row: &SqliteRow, column: &'static str) -> Result<DateTime<Utc>> {
    time(get::<i64>(row, column)?, column)
}

pub(super) fn get_opt_time(row: &SqliteRow, column: &'static str) -> Result<Option<DateTime<Utc>>> {
    get::<Option<i64>>(row, column)?
        .map(|us| time(us, column))
        .transpose()
}

/// A time as stored.
pub(super) fn micros(t: DateTime<Utc>) -> i64 {
    t.timestamp_micros()
}

/// A duration in stored units (saturating).
pub(super) fn span(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

pub(super) fn status(raw: &str) -> Result<TaskStatus> {
    raw.parse().map_err(
        |e: crate::domain::status::UnknownStatus| StoreError::Corrupt {
            what: "task status",
            detail: e.to_string(),
        },
    )
}

pub(super) fn task_type(raw: String) -> Result<TaskType> {
    TaskType::new(raw).map_err(|e| StoreError::Corrupt {
        what: "task type",
        detail: e.to_string(),
    })
}

pub(super) fn agent_id(raw: String) -> Result<AgentId> {
    AgentId::new(raw).map_err(|e| StoreError::Corrupt {
        what: "agent id",
        detail: e.to_string(),
    })
}

pub(super) fn json<T: serde::de::DeserializeOwned>(
    raw: Option<String>,
    what: &'static str,
) -> Result<Option<T>> {
    raw.map(|text| serde_json::from_str(&text))
        .transpose()
        .map_err(|e| StoreError::Corrupt {
            what,
            detail: e.to_string(),
        })
}

/// A JSON value as stored.
pub(super) fn to_text<T: serde::Serialize>(value: &T, what: &'static str) -> Result<String> {
    serde_json::to_string(value).map_err(|e| StoreError::Corrupt {
        what,
        detail: e.to_string(),
    })
}

fn small<T: TryFrom<i64>>(row: &SqliteRow, column: &'static str) -> Result<T> {
    let value: i64 = get(row, column)?;
    T::try_from(value).map_err(|_| StoreError::Corrupt {
        what: column,
        detail: format!("{value} is out of range"),
    })
}

/// A `tasks` row (selected with `*`).
pub(super) fn task(row: &SqliteRow) -> Result<Task> {
    let payload: String = get(row, "payload")?;
    Ok(Task {
        id: TaskId(get(row, "id")?),
        task_type: task_type(get(row, "task_type")?)?,
        payload: serde_json::from_str(&payload).map_err(|e| StoreError::Corrupt {
            what: "task payload",
            detail: e.to_string(),
        })?,
        priority: small(row, "priority")?,
        status: status(get::<&str>(row, "status")?)?,
        available_at: get_time(row, "available_at")?,
        deadline_at: get_opt_time(row, "deadline_at")?,
        timeout_ms: get(row, "timeout_ms")?,
        attempt: small(row, "attempt")?,
        max_attempts: small(row, "max_attempts")?,
        lease_owner: get::<Option<String>>(row, "lease_owner")?
            .map(agent_id)
            .transpose()?,
        lease_epoch: LeaseEpoch(get(row, "lease_epoch")?),
        lease_until: get_opt_time(row, "lease_until")?,
        heartbeat_at: get_opt_time(row, "heartbeat_at")?,
        idempotency_key: get(row, "idempotency_key")?,
        progress: json::<Progress>(get(row, "progress")?, "task progress")?,
        result: json::<serde_json::Value>(get(row, "result")?, "task result")?,
        last_error: json::<TaskError>(get(row, "last_error")?, "task error")?,
        created_at: get_time(row, "created_at")?,
        started_at: get_opt_time(row, "started_at")?,
        finished_at: get_opt_time(row, "finished_at")?,
        updated_at: get_time(row, "updated_at")?,
    })
}

/// A `task_attempts` row.
pub(super) fn attempt(row: &SqliteRow) -> Result<Attempt> {
    let outcome: String = get(row, "outcome")?;
    Ok(Attempt {
        task_id: TaskId(get(row, "task_id")?),
        epoch: LeaseEpoch(get(row, "epoch")?),
        attempt: small(row, "attempt")?,
        agent: agent_id(get(row, "agent")?)?,
        started_at: get_time(row, "started_at")?,
        finished_at: get_time(row, "finished_at")?,
        outcome: AttemptOutcome::parse(&outcome).ok_or_else(|| StoreError::Corrupt {
            what: "attempt outcome",
            detail: outcome.clone(),
        })?,
        error: json::<TaskError>(get(row, "error")?, "attempt error")?,
    })
}

fn millis(value: Option<i64>) -> Option<Duration> {
    value.map(|ms| Duration::from_millis(u64::try_from(ms).unwrap_or(0)))
}

/// A `policies` row.
pub(super) fn policy(row: &SqliteRow) -> Result<Policy> {
    let scope: String = get(row, "scope")?;
    let limit: Option<i64> = get(row, "max_concurrency")?;
    Ok(Policy {
        scope: PolicyScope::from_key(&scope).map_err(|e| StoreError::Corrupt {
            what: "policy scope",
            detail: e.to_string(),
        })?,
        max_concurrency: limit.map(|l| u32::try_from(l).unwrap_or(0)),
        paused: get(row, "paused")?,
        retry_base: millis(get(row, "retry_base_ms")?),
        retry_multiplier: get(row, "retry_multiplier")?,
        retry_max: millis(get(row, "retry_max_ms")?),
        retry_jitter: get(row, "retry_jitter")?,
        timeout: millis(get(row, "timeout_ms")?),
        slow_threshold: millis(get(row, "slow_ms")?),
    })
}

/// An `agents` row (with `now` and `leader`).
pub(super) fn agent(row: &SqliteRow) -> Result<AgentRecord> {
    let state: String = get(row, "state")?;
    let types: String = get(row, "task_types")?;
    Ok(AgentRecord {
        id: agent_id(get(row, "id")?)?,
        name: get(row, "name")?,
        host: get(row, "host")?,
        pid: small::<u32>(row, "pid").unwrap_or(0),
        grpc_address: get(row, "grpc_address")?,
        version: get(row, "version")?,
        task_types: serde_json::from_str(&types).map_err(|e| StoreError::Corrupt {
            what: "agent task types",
            detail: e.to_string(),
        })?,
        local_concurrency: small::<u32>(row, "local_concurrency").unwrap_or(0),
        active: small::<u32>(row, "active").unwrap_or(0),
        state: AgentState::parse(&state).ok_or_else(|| StoreError::Corrupt {
            what: "agent state",
            detail: state.clone(),
        })?,
        started_at: get_time(row, "started_at")?,
        heartbeat_at: get_time(row, "heartbeat_at")?,
        stopped_at: get_opt_time(row, "stopped_at")?,
        alive_until: get_opt_time(row, "alive_until")?,
        now: get_time(row, "now")?,
        leader: get(row, "leader")?,
    })
}

/// An `audit_log` row.
pub(super) fn audit(row: &SqliteRow) -> Result<AuditRecord> {
    Ok(AuditRecord {
        id: get(row, "id")?,
        at: get_time(row, "at")?,
        actor: get(row, "actor")?,
        role: get(row, "role")?,
        action: get(row, "action")?,
        target: get(row, "target")?,
        params: json::<serde_json::Value>(get(row, "params")?, "audit params")?,
        result: get(row, "result")?,
        detail: get(row, "detail")?,
        peer: get(row, "peer")?,
        count: get(row, "count")?,
    })
}
