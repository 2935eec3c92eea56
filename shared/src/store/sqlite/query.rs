//! Read-only queries: task pages, details and explanations, the overview, and the database
//! clock (policies and the audit log, which both backends list alike, are `store/dialect.rs`).
//! Each reads one snapshot (a read transaction) with SQLite's now. Their input arrives
//! validated (the Store layer, `store/driver.rs`).

use chrono::{DateTime, Utc};
use sqlx::SqlitePool;

use super::rows::{self, attempt, task};
use super::{commit, json_list, read_tx, sql};
use crate::domain::TaskId;
use crate::store::dialect::task_list_page;
use crate::store::explain::{EXPLAIN_AHEAD_CAP, blockers};
use crate::store::rows::{explain_facts, overview_row, stats_row};
use crate::store::{
    Blocker, ExplainParams, OVERVIEW_TYPES_CAP, Overview, QueueStats, Result, StoreError,
    TASK_COUNT_FINISHED_CAP, TaskCountParams, TaskCounts, TaskDetail, TaskListParams, TaskPage,
};

pub(super) async fn db_now(pool: &SqlitePool) -> Result<DateTime<Utc>> {
    let us: i64 = sqlx::query_scalar(sql::db_now)
        .fetch_one(pool)
        .await
        .map_err(StoreError::db("db_now"))?;
    rows::time(us, "now")
}

pub(super) async fn task_list(pool: &SqlitePool, params: &TaskListParams) -> Result<TaskPage> {
    let statuses = if params.statuses.is_empty() {
        None
    } else {
        let names: Vec<&str> = params.statuses.iter().map(|s| s.as_str()).collect();
        Some(json_list(&names)?)
    };
    task_list_page(pool, sql::task_list, statuses, params).await
}

/// The Tasks view's counts, in one read transaction (one snapshot): the live states exactly,
/// each finished state up to one past [`TASK_COUNT_FINISHED_CAP`].
pub(super) async fn task_count_states(
    pool: &SqlitePool,
    params: &TaskCountParams,
) -> Result<TaskCounts> {
    const OP: &str = "task_count_states";
    let (mut tx, now) = read_tx(pool, OP).await?;
    let task_type = params.task_type.as_ref().map(|t| t.as_str());
    let (queued, scheduled, retrying, running): (i64, i64, i64, i64) =
        sqlx::query_as(sql::task_count_live)
            .bind(now)
            .bind(task_type)
            .bind(params.text.as_deref())
            .bind(params.error_code.as_deref())
            .fetch_one(&mut *tx)
            .await
            .map_err(StoreError::db(OP))?;
    let cap = i64::try_from(TASK_COUNT_FINISHED_CAP + 1).unwrap_or(i64::MAX);
    let mut finished = Vec::with_capacity(3);
    for statuses in [
        &["succeeded", "partially_succeeded"][..],
        &["cancelled"][..],
        &["dead"][..],
    ] {
        let n: i64 = sqlx::query_scalar(sql::task_count_finished)
            .bind(task_type)
            .bind(params.text.as_deref())
            .bind(params.error_code.as_deref())
            .bind(json_list(statuses)?)
            .bind(cap)
            .fetch_one(&mut *tx)
            .await
            .map_err(StoreError::db(OP))?;
        finished.push(Some(u64::try_from(n).unwrap_or(0)));
    }
    commit(tx, OP).await?;
    let n = |v: i64| u64::try_from(v).unwrap_or(0);
    Ok(TaskCounts {
        queued: n(queued),
        scheduled: n(scheduled),
        retrying: n(retrying),
        running: n(running),
        succeeded: finished[0],
        cancelled: finished[1],
        dead: finished[2],
        now: rows::time(now, "now")?,
    })
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

pub(super) async fn task_stats(pool: &SqlitePool) -> Result<QueueStats> {
    const OP: &str = "task_stats";
    let (mut tx, now) = read_tx(pool, OP).await?;
    let row = sqlx::query(sql::task_stats)
        .bind(now)
        .fetch_one(&mut *tx)
        .await
        .map_err(StoreError::db(OP))?;
    commit(tx, OP).await?;
    stats_row(&row, rows::time(now, "now")?)
}
