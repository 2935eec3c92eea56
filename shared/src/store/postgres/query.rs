//! Read-only queries: task pages, details and explanations, policies, the audit log.

use sqlx::PgPool;
use sqlx::types::Json;

use super::rows::{attempt, audit, get, policy, status, task, task_type};
use super::{secs, sql};
use crate::domain::{Policy, TaskError, TaskId, TaskStatus};
use crate::store::audit::bind_audit_list;
use crate::store::explain::{EXPLAIN_AHEAD_CAP, ExplainFacts, LimitUse, blockers};
use crate::store::{
    AuditListParams, AuditRecord, Blocker, ExplainParams, OVERVIEW_TYPES_CAP, Overview,
    OverviewRow, Result, StoreError, TaskDetail, TaskListParams, TaskPage, TypeCounts,
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
        .bind(params.error_code.as_deref())
        .bind(params.since)
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

pub(super) async fn task_explain(pool: &PgPool, params: &ExplainParams) -> Result<Vec<Blocker>> {
    params.validate()?;
    let cap = i64::try_from(EXPLAIN_AHEAD_CAP + 1).unwrap_or(i64::MAX);
    let row = sqlx::query(sql::task_explain)
        .bind(params.id.0)
        .bind(secs(params.agent_stale_after))
        .bind(cap)
        .fetch_optional(pool)
        .await
        .map_err(StoreError::db("task_explain"))?
        .ok_or(StoreError::NotFound(params.id))?;
    let limit_use = |limit: &'static str, running: &'static str| -> Result<Option<LimitUse>> {
        let limit: Option<i32> = get(&row, limit)?;
        let running: Option<i64> = get(&row, running)?;
        Ok(limit.map(|limit| LimitUse {
            limit: u32::try_from(limit).unwrap_or(0),
            running: running.map_or(0, |n| u64::try_from(n).unwrap_or(0)),
        }))
    };
    let facts = ExplainFacts {
        id: TaskId(get(&row, "id")?),
        task_type: task_type(get(&row, "task_type")?)?,
        status: status(get::<&str>(&row, "status")?)?,
        available_at: get(&row, "available_at")?,
        deadline_at: get(&row, "deadline_at")?,
        attempt: get(&row, "attempt")?,
        max_attempts: get(&row, "max_attempts")?,
        lease_owner: get(&row, "lease_owner")?,
        last_error: get::<Option<Json<TaskError>>>(&row, "last_error")?.map(|Json(e)| e),
        finished_at: get(&row, "finished_at")?,
        now: get(&row, "db_now")?,
        type_paused: get(&row, "type_paused")?,
        global_paused: get(&row, "global_paused")?,
        type_limit: limit_use("type_limit", "type_running")?,
        global_limit: limit_use("global_limit", "global_running")?,
        agent_live: get(&row, "agent_live")?,
        ahead: u64::try_from(get::<i64>(&row, "ahead")?).unwrap_or(0),
    };
    Ok(blockers(&facts))
}

pub(super) async fn task_overview(pool: &PgPool) -> Result<Overview> {
    let cap = i64::try_from(OVERVIEW_TYPES_CAP + 2).unwrap_or(i64::MAX);
    let rows = sqlx::query(sql::task_overview)
        .bind(cap)
        .fetch_all(pool)
        .await
        .map_err(StoreError::db("task_overview"))?;
    let count =
        |row, column| -> Result<u64> { Ok(u64::try_from(get::<i64>(row, column)?).unwrap_or(0)) };
    let limit = |row| -> Result<Option<u32>> {
        Ok(get::<Option<i32>>(row, "max_concurrency")?.map(|n| u32::try_from(n).unwrap_or(0)))
    };
    let Some(first) = rows.first() else {
        return Err(StoreError::Corrupt {
            what: "task_overview",
            detail: "no global policy row".into(),
        });
    };
    let decode = |row| -> Result<OverviewRow> {
        let name: &str = get(row, "task_type")?;
        if name == "*" {
            return Ok(OverviewRow::Global {
                limit: limit(row)?,
                paused: get(row, "paused")?,
            });
        }
        Ok(OverviewRow::Type(TypeCounts {
            task_type: task_type(name.to_string())?,
            queued: count(row, "queued")?,
            scheduled: count(row, "scheduled")?,
            retrying: count(row, "retrying")?,
            running: count(row, "running")?,
            dead: count(row, "dead")?,
            finished_last_minute: count(row, "finished_last_minute")?,
            dead_last_minute: count(row, "dead_last_minute")?,
            limit: limit(row)?,
            paused: get(row, "paused")?,
        }))
    };
    Overview::from_rows(get(first, "db_now")?, rows.iter().map(decode))
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
    params.validate()?;
    let rows = bind_audit_list(sqlx::query(sql::audit_list), params, |t| t)
        .fetch_all(pool)
        .await
        .map_err(StoreError::db("audit_list"))?;
    rows.iter().map(audit).collect()
}
