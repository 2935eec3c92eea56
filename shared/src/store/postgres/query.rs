//! Read-only queries: the database clock, task pages, details and explanations, the overview
//! (policies and the audit log, which both backends list alike, are `store/dialect.rs`). Their
//! input arrives validated (the Store layer, `store/driver.rs`).

use super::db::Db;
use chrono::{DateTime, Utc};

use super::rows::{attempt, get, task};
use super::{secs, sql};
use crate::domain::{TaskId, TaskStatus};
use crate::store::dialect::task_list_page;
use crate::store::explain::{EXPLAIN_AHEAD_CAP, blockers};
use crate::store::rows::{explain_facts, overview_row, stats_row};
use crate::store::{
    Blocker, ExplainParams, OVERVIEW_TYPES_CAP, Overview, QueueStats, Result, StoreError,
    TaskDetail, TaskListParams, TaskPage,
};

pub(super) async fn db_now(pool: &Db) -> Result<DateTime<Utc>> {
    let row = sqlx::query(sql::db_now)
        .fetch_one(pool)
        .await
        .map_err(StoreError::db("db_now"))?;
    get(&row, "now")
}

pub(super) async fn task_list(pool: &Db, params: &TaskListParams) -> Result<TaskPage> {
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
    task_list_page(pool, statement, statuses, params).await
}

pub(super) async fn task_get(pool: &Db, id: TaskId) -> Result<Option<TaskDetail>> {
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

pub(super) async fn task_explain(pool: &Db, params: &ExplainParams) -> Result<Vec<Blocker>> {
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

pub(super) async fn task_overview(pool: &Db) -> Result<Overview> {
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

pub(super) async fn task_stats(pool: &Db) -> Result<QueueStats> {
    let row = sqlx::query(sql::task_stats)
        .fetch_one(pool)
        .await
        .map_err(StoreError::db("task_stats"))?;
    stats_row(&row, get(&row, "db_now")?)
}
