//! Read-only queries: task pages, details and explanations, the overview, policies, the audit
//! log, and the database clock. Each reads one snapshot (a read transaction) with SQLite's now.
//! Their input arrives validated (the Store layer, `store/driver.rs`).

use chrono::{DateTime, Utc};
use sqlx::SqlitePool;

use super::rows::{self, attempt, audit, policy, task};
use super::{commit, json_list, read_tx, sql};
use crate::domain::{Policy, TaskId};
use crate::store::audit::bind_audit_list;
use crate::store::explain::{EXPLAIN_AHEAD_CAP, blockers};
use crate::store::rows::{explain_facts, fetch_mapped, overview_row, task_page};
use crate::store::{
    AuditListParams, AuditRecord, Blocker, ExplainParams, OVERVIEW_TYPES_CAP, Overview, Result,
    StoreError, TaskDetail, TaskListParams, TaskPage,
};

pub(super) async fn db_now(pool: &SqlitePool) -> Result<DateTime<Utc>> {
    let us: i64 = sqlx::query_scalar(sql::db_now)
        .fetch_one(pool)
        .await
        .map_err(StoreError::db("db_now"))?;
    rows::time(us, "now")
}

pub(super) async fn policy_list(pool: &SqlitePool) -> Result<Vec<Policy>> {
    fetch_mapped(sqlx::query(sql::policy_list), pool, "policy_list", policy).await
}

pub(super) async fn audit_list(
    pool: &SqlitePool,
    params: &AuditListParams,
) -> Result<Vec<AuditRecord>> {
    let query = bind_audit_list(sqlx::query(sql::audit_list), params, rows::micros);
    fetch_mapped(query, pool, "audit_list", audit).await
}

pub(super) async fn task_list(pool: &SqlitePool, params: &TaskListParams) -> Result<TaskPage> {
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
    task_page(&found, params.limit)
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
    let facts = explain_facts(&row, rows::time(now, "now")?)?;
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
    if found.is_empty() {
        return Err(StoreError::Corrupt {
            what: "task_overview",
            detail: "no global policy row".into(),
        });
    }
    Overview::from_rows(rows::time(now, "now")?, found.iter().map(overview_row))
}
