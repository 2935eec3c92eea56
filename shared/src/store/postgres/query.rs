//! Read-only queries: the database clock, task pages, details and explanations, the overview,
//! policies, the audit log. Their input arrives validated (the Store layer, `store/driver.rs`).

use chrono::{DateTime, Utc};
use sqlx::PgPool;

use super::rows::{attempt, audit, get, policy, task};
use super::{secs, sql};
use crate::domain::{Policy, TaskId, TaskStatus};
use crate::store::audit::bind_audit_list;
use crate::store::explain::{EXPLAIN_AHEAD_CAP, blockers};
use crate::store::rows::{explain_facts, fetch_mapped, overview_row, task_page};
use crate::store::{
    AuditListParams, AuditRecord, Blocker, ExplainParams, OVERVIEW_TYPES_CAP, Overview, Result,
    StoreError, TaskDetail, TaskListParams, TaskPage,
};

pub(super) async fn db_now(pool: &PgPool) -> Result<DateTime<Utc>> {
    let row = sqlx::query(sql::db_now)
        .fetch_one(pool)
        .await
        .map_err(StoreError::db("db_now"))?;
    get(&row, "now")
}

pub(super) async fn task_list(pool: &PgPool, params: &TaskListParams) -> Result<TaskPage> {
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
        .bind(params.error_code.as_deref())
        .bind(params.since)
        .fetch_all(pool)
        .await
        .map_err(StoreError::db("task_list"))?;
    task_page(&rows, params.limit)
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

pub(super) async fn task_explain(pool: &PgPool, params: &ExplainParams) -> Result<Vec<Blocker>> {
    let cap = i64::try_from(EXPLAIN_AHEAD_CAP + 1).unwrap_or(i64::MAX);
    let row = sqlx::query(sql::task_explain)
        .bind(params.id.0)
        .bind(secs(params.agent_stale_after))
        .bind(cap)
        .fetch_optional(pool)
        .await
        .map_err(StoreError::db("task_explain"))?
        .ok_or(StoreError::NotFound(params.id))?;
    let facts = explain_facts(&row, get(&row, "db_now")?)?;
    Ok(blockers(&facts))
}

pub(super) async fn task_overview(pool: &PgPool) -> Result<Overview> {
    let cap = i64::try_from(OVERVIEW_TYPES_CAP + 2).unwrap_or(i64::MAX);
    let rows = sqlx::query(sql::task_overview)
        .bind(cap)
        .fetch_all(pool)
        .await
        .map_err(StoreError::db("task_overview"))?;
    let Some(first) = rows.first() else {
        return Err(StoreError::Corrupt {
            what: "task_overview",
            detail: "no global policy row".into(),
        });
    };
    Overview::from_rows(get(first, "db_now")?, rows.iter().map(overview_row))
}

pub(super) async fn policy_list(pool: &PgPool) -> Result<Vec<Policy>> {
    fetch_mapped(sqlx::query(sql::policy_list), pool, "policy_list", policy).await
}

pub(super) async fn audit_list(
    pool: &PgPool,
    params: &AuditListParams,
) -> Result<Vec<AuditRecord>> {
    let query = bind_audit_list(sqlx::query(sql::audit_list), params, |t| t);
    fetch_mapped(query, pool, "audit_list", audit).await
}
