//! PostgreSQL rows: the decode of its column types. [`RecordColumns`] (with [`Columns`],
//! implemented next to the operator statements) hands plain values to the mapping written once
//! for both stores (`store/rows.rs`), re-exported here; the claim's hot row, read by column
//! position, is mapped here. Bad database state becomes [`StoreError::Corrupt`], never a panic.

use chrono::{DateTime, Utc};
use sqlx::Row;
use sqlx::postgres::PgRow;
use sqlx::types::Json;

use crate::domain::{AgentId, LeaseEpoch, Task, TaskError, TaskId, TaskStatus};
use crate::store::rows::{RecordColumns, parse};
pub(super) use crate::store::rows::{
    agent, agent_id, attempt, get, policy, status, task, task_type,
};
use crate::store::{Result, StoreError};

impl RecordColumns for PgRow {
    fn opt_float(&self, column: &'static str) -> Result<Option<f64>> {
        get(self, column)
    }

    fn text_list(&self, column: &'static str) -> Result<Vec<String>> {
        get(self, column)
    }
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
        concurrency_key: get_at(row, 18, "concurrency_key")?,
        progress: None,
        snoozes: get_at(row, 19, "snoozes")?,
        checkpoint: get_at::<Option<Json<serde_json::Value>>>(row, 20, "checkpoint")?
            .map(|Json(v)| v),
        checkpoint_at: get_at(row, 21, "checkpoint_at")?,
        result: get_at::<Option<Json<serde_json::Value>>>(row, 12, "result")?.map(|Json(v)| v),
        last_error: parse::<TaskError>(
            get_at::<Option<Json<serde_json::Value>>>(row, 13, "last_error")?.map(|Json(v)| v),
            "task error",
        )?,
        created_at: get_at(row, 14, "created_at")?,
        started_at: Some(db_now),
        finished_at: get_at(row, 15, "finished_at")?,
        updated_at: db_now,
    })
}
