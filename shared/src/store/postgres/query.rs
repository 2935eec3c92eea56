//! Read-only queries: task pages and details, policies, the audit log.

use sqlx::PgPool;

use super::rows::{attempt, audit, get, policy, task};
use super::sql;
use crate::domain::{Policy, TaskId, TaskStatus};
use crate::store::{
    AuditListParams, AuditRecord, Result, StoreError, TaskDetail, TaskListParams, TaskPage,
};

pub(super) async fn task_list(pool: &PgPool, params: &TaskListParams) -> Result<TaskPage> {
    params.validate()?;
    let statuses: Option<Vec<&str>> =
        (!params.statuses.is_empty()).then(|| params.statuses.iter().map(|s| s.as_str()).collect());
    // Plans are generic, so the statuses that have their own partial index get a statement that
    // names them as constants.
    let statement = if params.statuses == [TaskStatus::Dead] {
        sql::task_list_dead
    } else if !params.statuses.is_empty() && params.statuses.iter().all(|s| s.is_leased()) {
        sql::task_list_leased
    } else {
        sql::task_list
    };
    let rows = sqlx::query(statement)
        .bind(statuses)
        .bind(params.task_type.as_ref().map(|t| t.as_str()))
        .bind(params.text.as_deref())
        .bind(params.before.map(|id| id.0))
        .bind(i64::from(params.limit))
        .fetch_all(pool)
        .await
        .map_err(StoreError::db("task_list"))?;
    let tasks = rows.iter().map(task).collect::<Result<Vec<_>>>()?;
    let full_page = tasks.len() == params.limit as usize;
    let next_before = if full_page {
        tasks.last().map(|t| t.id)
    } else {
        None
    };
    Ok(TaskPage { tasks, next_before })
}

pub(super) async fn task_get(pool: &PgPool, id: TaskId) -> Result<Option<TaskDetail>> {
    let Some(row) = sqlx::query(sql::task_get)
        .bind(id.0)
        .fetch_optional(pool)
        .await
        .map_err(StoreError::db("task_get"))?
    else {
        return Ok(None);
    };
    let attempts = sqlx::query(sql::task_attempts)
        .bind(id.0)
        .fetch_all(pool)
        .await
        .map_err(StoreError::db("task_get"))?;
    Ok(Some(TaskDetail {
        task: task(&row)?,
        attempts: attempts.iter().map(attempt).collect::<Result<_>>()?,
        now: get(&row, "db_now")?,
    }))
}

pub(super) async fn policy_list(pool: &PgPool) -> Result<Vec<Policy>> {
    let rows = sqlx::query(sql::policy_list)
        .fetch_all(pool)
        .await
        .map_err(StoreError::db("policy_list"))?;
    rows.iter().map(policy).collect()
}

pub(super) async fn audit_list(
    pool: &PgPool,
    params: &AuditListParams,
) -> Result<Vec<AuditRecord>> {
    let rows = sqlx::query(sql::audit_list)
        .bind(params.before_id)
        .bind(i64::from(params.limit.clamp(1, 1000)))
        .fetch_all(pool)
        .await
        .map_err(StoreError::db("audit_list"))?;
    rows.iter().map(audit).collect()
}
