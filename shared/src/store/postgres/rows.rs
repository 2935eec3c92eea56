//! Decoding of database rows into domain types. Bad database state (an unknown status, an
//! invalid type name, unreadable JSON) becomes [`StoreError::Corrupt`], never a panic.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::Row;
use sqlx::postgres::PgRow;
use sqlx::types::Json;

use crate::domain::{
    AgentId, Attempt, AttemptOutcome, LeaseEpoch, Policy, PolicyScope, Progress, Task, TaskError,
    TaskId, TaskStatus, TaskType,
};
use crate::store::{AgentRecord, AgentState, AuditRecord, Result, StoreError};

pub(super) fn get<'r, T>(row: &'r PgRow, column: &'static str) -> Result<T>
where
    T: sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres>,
{
    row.try_get(column).map_err(|e| StoreError::Corrupt {
        what: column,
        detail: e.to_string(),
    })
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

fn json_field<T: serde::de::DeserializeOwned>(
    value: Option<Json<serde_json::Value>>,
    what: &'static str,
) -> Result<Option<T>> {
    value
        .map(|Json(v)| serde_json::from_value(v))
        .transpose()
        .map_err(|e| StoreError::Corrupt {
            what,
            detail: e.to_string(),
        })
}

/// A `tasks` row (selected with `t.*`).
pub(super) fn task(row: &PgRow) -> Result<Task> {
    let Json(payload): Json<serde_json::Value> = get(row, "payload")?;
    Ok(Task {
        id: TaskId(get(row, "id")?),
        task_type: task_type(get(row, "task_type")?)?,
        payload,
        priority: get(row, "priority")?,
        status: status(get::<&str>(row, "status")?)?,
        available_at: get(row, "available_at")?,
        deadline_at: get(row, "deadline_at")?,
        timeout_ms: get(row, "timeout_ms")?,
        attempt: get(row, "attempt")?,
        max_attempts: get(row, "max_attempts")?,
        lease_owner: get::<Option<String>>(row, "lease_owner")?
            .map(agent_id)
            .transpose()?,
        lease_epoch: LeaseEpoch(get(row, "lease_epoch")?),
        lease_until: get(row, "lease_until")?,
        heartbeat_at: get(row, "heartbeat_at")?,
        idempotency_key: get(row, "idempotency_key")?,
        progress: json_field::<Progress>(get(row, "progress")?, "task progress")?,
        result: get::<Option<Json<serde_json::Value>>>(row, "result")?.map(|Json(v)| v),
        last_error: json_field::<TaskError>(get(row, "last_error")?, "task error")?,
        created_at: get(row, "created_at")?,
        started_at: get(row, "started_at")?,
        finished_at: get(row, "finished_at")?,
        updated_at: get(row, "updated_at")?,
    })
}

/// Decodes column `index` of `row` (`column` names it in errors). For hot rows whose column
/// order the statement fixes: no lookup by name.
fn get_at<'r, T>(row: &'r PgRow, index: usize, column: &'static str) -> Result<T>
where
    T: sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres>,
{
    row.try_get(index).map_err(|e| StoreError::Corrupt {
        what: column,
        detail: e.to_string(),
    })
}

/// A row returned by a claim (sql/task_claim.sql, whose RETURNING list fixes the column order
/// read here). The columns the claim set to known values are filled in from the claim's owner
/// and its statement time.
pub(super) fn claimed_task(row: &PgRow, owner: &AgentId, db_now: DateTime<Utc>) -> Result<Task> {
    let Json(payload): Json<serde_json::Value> = get_at(row, 2, "payload")?;
    Ok(Task {
        id: TaskId(get_at(row, 0, "id")?),
        task_type: task_type(get_at(row, 1, "task_type")?)?,
        payload,
        priority: get_at(row, 3, "priority")?,
        status: TaskStatus::Running,
        available_at: get_at(row, 4, "available_at")?,
        deadline_at: get_at(row, 5, "deadline_at")?,
        timeout_ms: get_at(row, 6, "timeout_ms")?,
        attempt: get_at(row, 7, "attempt")?,
        max_attempts: get_at(row, 8, "max_attempts")?,
        lease_owner: Some(owner.clone()),
        lease_epoch: LeaseEpoch(get_at(row, 9, "lease_epoch")?),
        lease_until: get_at(row, 10, "lease_until")?,
        heartbeat_at: Some(db_now),
        idempotency_key: get_at(row, 11, "idempotency_key")?,
        progress: None,
        result: get_at::<Option<Json<serde_json::Value>>>(row, 12, "result")?.map(|Json(v)| v),
        last_error: json_field::<TaskError>(get_at(row, 13, "last_error")?, "task error")?,
        created_at: get_at(row, 14, "created_at")?,
        started_at: Some(db_now),
        finished_at: get_at(row, 15, "finished_at")?,
        updated_at: db_now,
    })
}

/// A `task_attempts` row.
pub(super) fn attempt(row: &PgRow) -> Result<Attempt> {
    let outcome: String = get(row, "outcome")?;
    Ok(Attempt {
        task_id: TaskId(get(row, "task_id")?),
        epoch: LeaseEpoch(get(row, "epoch")?),
        attempt: get(row, "attempt")?,
        agent: agent_id(get(row, "agent")?)?,
        started_at: get(row, "started_at")?,
        finished_at: get(row, "finished_at")?,
        outcome: AttemptOutcome::parse(&outcome).ok_or_else(|| StoreError::Corrupt {
            what: "attempt outcome",
            detail: outcome.clone(),
        })?,
        error: json_field::<TaskError>(get(row, "error")?, "attempt error")?,
    })
}

fn millis(value: Option<i64>) -> Option<Duration> {
    value.map(|ms| Duration::from_millis(u64::try_from(ms).unwrap_or(0)))
}

/// A `policies` row.
pub(super) fn policy(row: &PgRow) -> Result<Policy> {
    let scope: String = get(row, "scope")?;
    let limit: Option<i32> = get(row, "max_concurrency")?;
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
pub(super) fn agent(row: &PgRow) -> Result<AgentRecord> {
    let state: String = get(row, "state")?;
    let pid: i32 = get(row, "pid")?;
    let local: i32 = get(row, "local_concurrency")?;
    let active: i32 = get(row, "active")?;
    Ok(AgentRecord {
        id: agent_id(get(row, "id")?)?,
        name: get(row, "name")?,
        host: get(row, "host")?,
        pid: u32::try_from(pid).unwrap_or(0),
        grpc_address: get(row, "grpc_address")?,
        version: get(row, "version")?,
        task_types: get(row, "task_types")?,
        local_concurrency: u32::try_from(local).unwrap_or(0),
        active: u32::try_from(active).unwrap_or(0),
        state: AgentState::parse(&state).ok_or_else(|| StoreError::Corrupt {
            what: "agent state",
            detail: state.clone(),
        })?,
        started_at: get(row, "started_at")?,
        heartbeat_at: get(row, "heartbeat_at")?,
        stopped_at: get(row, "stopped_at")?,
        alive_until: get(row, "alive_until")?,
        now: get(row, "now")?,
        leader: get(row, "leader")?,
    })
}

/// An `audit_log` row.
pub(super) fn audit(row: &PgRow) -> Result<AuditRecord> {
    Ok(AuditRecord {
        id: get(row, "id")?,
        at: get::<DateTime<Utc>>(row, "at")?,
        actor: get(row, "actor")?,
        role: get(row, "role")?,
        action: get(row, "action")?,
        target: get(row, "target")?,
        params: get::<Option<Json<serde_json::Value>>>(row, "params")?.map(|Json(v)| v),
        result: get(row, "result")?,
        detail: get(row, "detail")?,
        peer: get(row, "peer")?,
        count: get(row, "count")?,
    })
}
