//! Read-only queries: task pages, details and explanations, the overview, policies, the audit
//! log. Each reads one snapshot (a read transaction) with SQLite's now.

use sqlx::SqlitePool;

use super::rows::{self, attempt, audit, get, policy, status, task, task_type};
use super::{commit, json_list, read_tx, sql};
use crate::domain::{Policy, TaskError, TaskId};
use crate::store::audit::bind_audit_list;
use crate::store::explain::{EXPLAIN_AHEAD_CAP, ExplainFacts, LimitUse, blockers};
use crate::store::{
    AuditListParams, AuditRecord, Blocker, ExplainParams, OVERVIEW_TYPES_CAP, Overview,
    OverviewRow, Result, StoreError, TaskDetail, TaskListParams, TaskPage, TypeCounts,
};

pub(super) async fn policy_list(pool: &SqlitePool) -> Result<Vec<Policy>> {
    let found = sqlx::query(sql::policy_list)
        .fetch_all(pool)
        .await
        .map_err(StoreError::db("policy_list"))?;
    found.iter().map(policy).collect()
}

pub(super) async fn audit_list(
    pool: &SqlitePool,
    params: &AuditListParams,
) -> Result<Vec<AuditRecord>> {
    params.validate()?;
    let found = bind_audit_list(sqlx::query(sql::audit_list), params, rows::micros)
        .fetch_all(pool)
        .await
        .map_err(StoreError::db("audit_list"))?;
    found.iter().map(audit).collect()
}

pub(super) async fn task_list(pool: &SqlitePool, params: &TaskListParams) -> Result<TaskPage> {
    params.validate()?;
    let statuses = if params.statuses.is_empty() {
        None
    } else {
        let names: Vec<&str> = params.statuses.iter().map(|s| s.as_str()).collect();
        Some(json_list(&names)?)
    };
    let found = sqlx::query(sql::task_list)
        .bind(statuses)
        .bind(params.task_type.as_ref().map(|t| t.as_str()))
        .bind(params.text.as_deref())
        .bind(params.before.map(|id| id.0))
        .bind(i64::from(params.limit))
        .bind(params.error_code.as_deref())
        .bind(params.since.map(rows::micros))
        .fetch_all(pool)
        .await
        .map_err(StoreError::db("task_list"))?;
    let tasks = found.iter().map(task).collect::<Result<Vec<_>>>()?;
    let full_page = tasks.len() == params.limit as usize;
    let next_before = if full_page {
        tasks.last().map(|t| t.id)
    } else {
        None
    };
    Ok(TaskPage { tasks, next_before })
}

pub(super) async fn task_get(pool: &SqlitePool, id: TaskId) -> Result<Option<TaskDetail>> {
    const OP: &str = "task_get";
    let (mut tx, now) = read_tx(pool, OP).await?;
    let Some(row) = sqlx::query(sql::task_get)
        .bind(id.0)
        .fetch_optional(&mut *tx)
        .await
        .map_err(StoreError::db(OP))?
    else {
        commit(tx, OP).await?;
        return Ok(None);
    };
    let attempts = sqlx::query(sql::task_attempts)
        .bind(id.0)
        .fetch_all(&mut *tx)
        .await
        .map_err(StoreError::db(OP))?;
    commit(tx, OP).await?;
    Ok(Some(TaskDetail {
        task: task(&row)?,
        attempts: attempts.iter().map(attempt).collect::<Result<_>>()?,
        now: rows::time(now, "now")?,
    }))
}

pub(super) async fn task_explain(
    pool: &SqlitePool,
    params: &ExplainParams,
) -> Result<Vec<Blocker>> {
    const OP: &str = "task_explain";
    params.validate()?;
    let cap = i64::try_from(EXPLAIN_AHEAD_CAP + 1).unwrap_or(i64::MAX);
    let (mut tx, now) = read_tx(pool, OP).await?;
    let row = sqlx::query(sql::task_explain)
        .bind(params.id.0)
        .bind(now)
        .bind(now.saturating_sub(rows::span(params.agent_stale_after)))
        .bind(cap)
        .fetch_optional(&mut *tx)
        .await
        .map_err(StoreError::db(OP))?
        .ok_or(StoreError::NotFound(params.id))?;
    commit(tx, OP).await?;
    let limit_use = |limit: &'static str, running: &'static str| -> Result<Option<LimitUse>> {
        let limit: Option<i64> = get(&row, limit)?;
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
        available_at: rows::get_time(&row, "available_at")?,
        deadline_at: rows::get_opt_time(&row, "deadline_at")?,
        attempt: i32::try_from(get::<i64>(&row, "attempt")?).unwrap_or(i32::MAX),
        max_attempts: i32::try_from(get::<i64>(&row, "max_attempts")?).unwrap_or(i32::MAX),
        lease_owner: get(&row, "lease_owner")?,
        last_error: rows::json::<TaskError>(get(&row, "last_error")?, "task error")?,
        finished_at: rows::get_time(&row, "finished_at")?,
        now: rows::time(now, "now")?,
        type_paused: get(&row, "type_paused")?,
        global_paused: get(&row, "global_paused")?,
        type_limit: limit_use("type_limit", "type_running")?,
        global_limit: limit_use("global_limit", "global_running")?,
        agent_live: get(&row, "agent_live")?,
        ahead: u64::try_from(get::<i64>(&row, "ahead")?).unwrap_or(0),
    };
    Ok(blockers(&facts))
}

pub(super) async fn task_overview(pool: &SqlitePool) -> Result<Overview> {
    const OP: &str = "task_overview";
    let cap = i64::try_from(OVERVIEW_TYPES_CAP + 2).unwrap_or(i64::MAX);
    let (mut tx, now) = read_tx(pool, OP).await?;
    let found = sqlx::query(sql::task_overview)
        .bind(now)
        .bind(now.saturating_sub(60_000_000))
        .bind(cap)
        .fetch_all(&mut *tx)
        .await
        .map_err(StoreError::db(OP))?;
    commit(tx, OP).await?;
    let count =
        |row, column| -> Result<u64> { Ok(u64::try_from(get::<i64>(row, column)?).unwrap_or(0)) };
    let limit = |row| -> Result<Option<u32>> {
        Ok(get::<Option<i64>>(row, "max_concurrency")?.map(|n| u32::try_from(n).unwrap_or(0)))
    };
    if found.is_empty() {
        return Err(StoreError::Corrupt {
            what: "task_overview",
            detail: "no global policy row".into(),
        });
    }
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
    Overview::from_rows(rows::time(now, "now")?, found.iter().map(decode))
}
