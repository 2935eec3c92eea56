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
    TASK_COUNT_FINISHED_CAP, TASK_COUNT_FINISHED_TIMEOUT, TaskCountParams, TaskCounts, TaskDetail,
    TaskListParams, TaskPage,
};

pub(super) async fn db_now(pool: &Db) -> Result<DateTime<Utc>> {
    let row = sqlx::query(sql::db_now)
        .fetch_one(pool)
        .await
        .map_err(StoreError::db("db_now"))?;
    get(&row, "now")
}

pub(super) async fn task_list(pool: &Db, params: &TaskListParams) -> Result<TaskPage> {
    // Only waiting tasks can be due or not: a `due` without statuses asks for them, from
    // tasks_live alone rather than every partition.
    let waiting;
    let params = if params.due.is_some() && params.statuses.is_empty() {
        waiting = TaskListParams {
            statuses: vec![TaskStatus::Queued, TaskStatus::RetryWait],
            ..params.clone()
        };
        &waiting
    } else {
        params
    };
    let statuses: Option<Vec<&str>> =
        (!params.statuses.is_empty()).then(|| params.statuses.iter().map(|s| s.as_str()).collect());
    // Plans are generic, so the statuses that have their own partial index get a statement that
    // names them as constants.
    let statement = if params.statuses == [TaskStatus::Dead] {
        sql::task_list_dead
    } else if !params.statuses.is_empty() && params.statuses.iter().all(|s| s.is_leased()) {
        sql::task_list_leased
    } else if !params.statuses.is_empty() && params.statuses.iter().all(|s| s.is_claimable()) {
        sql::task_list_waiting
    } else if !params.statuses.is_empty()
        && params
            .statuses
            .iter()
            .all(|s| s.is_terminal() && *s != TaskStatus::Dead)
    {
        sql::task_list_finished
    } else {
        sql::task_list
    };
    task_list_page(pool, statement, statuses, params).await
}

/// The Tasks view's counts: the live states in one pass over tasks_live, then each finished
/// state in a transaction of its own under [`TASK_COUNT_FINISHED_TIMEOUT`] (a count that runs
/// out of time is `None`; the others still come).
pub(super) async fn task_count_states(pool: &Db, params: &TaskCountParams) -> Result<TaskCounts> {
    const OP: &str = "task_count_states";
    let task_type = params.task_type.as_ref().map(|t| t.as_str());
    let row = sqlx::query(sql::task_count_live)
        .bind(task_type)
        .bind(params.text.as_deref())
        .bind(params.error_code.as_deref())
        .fetch_one(pool)
        .await
        .map_err(StoreError::db(OP))?;
    let count = |name: &'static str| -> Result<u64> {
        let n: i64 = get(&row, name)?;
        Ok(u64::try_from(n).unwrap_or(0))
    };
    let (queued, scheduled, retrying, running) = (
        count("queued")?,
        count("scheduled")?,
        count("retrying")?,
        count("running")?,
    );
    let now = get(&row, "db_now")?;
    let finished = |statement: &'static str| async move {
        let mut tx = pool.begin().await.map_err(StoreError::db(OP))?;
        // set_config(…, true) is SET LOCAL: the timeout ends with this transaction.
        sqlx::query("SELECT set_config('statement_timeout', $1, true)")
            .bind(format!("{}ms", TASK_COUNT_FINISHED_TIMEOUT.as_millis()))
            .execute(&mut *tx)
            .await
            .map_err(StoreError::db(OP))?;
        let cap = i64::try_from(TASK_COUNT_FINISHED_CAP + 1).unwrap_or(i64::MAX);
        let n: std::result::Result<i64, sqlx::Error> = sqlx::query_scalar(statement)
            .bind(task_type)
            .bind(params.text.as_deref())
            .bind(params.error_code.as_deref())
            .bind(cap)
            .fetch_one(&mut *tx)
            .await;
        match n {
            Ok(n) => {
                tx.commit().await.map_err(StoreError::db(OP))?;
                Ok(Some(u64::try_from(n).unwrap_or(0)))
            }
            // 57014 query_canceled: the statement timeout ran out.
            Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("57014") => Ok(None),
            Err(e) => Err(StoreError::db(OP)(e)),
        }
    };
    Ok(TaskCounts {
        queued,
        scheduled,
        retrying,
        running,
        succeeded: finished(sql::task_count_succeeded).await?,
        cancelled: finished(sql::task_count_cancelled).await?,
        dead: finished(sql::task_count_dead).await?,
        now,
    })
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
