//! Read-only queries: task pages, details and explanations, the overview, policies, the audit
//! log. Each reads one snapshot (a read transaction) with SQLite's now.

use sqlx::SqlitePool;

use super::rows::{self, attempt, audit, get, policy, status, task, task_type};
use super::{commit, json_list, read_tx};
use crate::domain::{Policy, TaskError, TaskId};
use crate::store::audit::bind_audit_list;
use crate::store::explain::{EXPLAIN_AHEAD_CAP, ExplainFacts, LimitUse, blockers};
use crate::store::{
    AuditListParams, AuditRecord, Blocker, ExplainParams, OVERVIEW_TYPES_CAP, Overview,
    OverviewRow, Result, StoreError, TaskDetail, TaskListParams, TaskPage, TypeCounts,
};

const POLICY_COLUMNS: &str = "scope, max_concurrency, paused, retry_base_ms, retry_multiplier, \
    retry_max_ms, retry_jitter, timeout_ms, slow_ms";

pub(super) async fn policy_list(pool: &SqlitePool) -> Result<Vec<Policy>> {
    let found = sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT {POLICY_COLUMNS} FROM policies ORDER BY scope = '*' DESC, scope"
    )))
    .fetch_all(pool)
    .await
    .map_err(StoreError::db("policy_list"))?;
    found.iter().map(policy).collect()
}

/// A page of the audit log, newest first: ?1 ids below, ?2 page size, ?3 actor, ?4 action,
/// ?5 result, ?6 text in the target (case-insensitive for ASCII), ?7 at or after, ?8 before.
const AUDIT_LIST: &str = "SELECT id, at, actor, role, action, target, params, result, detail, \
    peer, count FROM audit_log \
    WHERE id < coalesce(?1, 9223372036854775807) \
      AND (?3 IS NULL OR actor = ?3) \
      AND (?4 IS NULL OR action = ?4) \
      AND (?5 IS NULL OR result = ?5) \
      AND (?6 IS NULL OR instr(lower(target), lower(?6)) > 0) \
      AND (?7 IS NULL OR at >= ?7) \
      AND (?8 IS NULL OR at < ?8) \
    ORDER BY id DESC LIMIT ?2";

pub(super) async fn audit_list(
    pool: &SqlitePool,
    params: &AuditListParams,
) -> Result<Vec<AuditRecord>> {
    params.validate()?;
    let found = bind_audit_list(sqlx::query(AUDIT_LIST), params, rows::micros)
        .fetch_all(pool)
        .await
        .map_err(StoreError::db("audit_list"))?;
    found.iter().map(audit).collect()
}

/// A page of tasks, newest first, keyset-paged by id: ?1 statuses (JSON array, null: all),
/// ?2 type, ?3 text in type / error code / error message (case-insensitive), ?4 ids below,
/// ?5 page size, ?6 exact error code, ?7 finished (or last changed) at or after.
const TASK_LIST: &str = "SELECT * FROM tasks t \
    WHERE (?1 IS NULL OR t.status IN (SELECT value FROM json_each(?1))) \
      AND (?2 IS NULL OR t.task_type = ?2) \
      AND (?3 IS NULL \
           OR instr(t.task_type, lower(?3)) > 0 \
           OR instr(lower(coalesce(json_extract(t.last_error, '$.code'), '')), lower(?3)) > 0 \
           OR instr(lower(coalesce(json_extract(t.last_error, '$.message'), '')), lower(?3)) > 0) \
      AND (?6 IS NULL OR json_extract(t.last_error, '$.code') = ?6) \
      AND (?7 IS NULL OR coalesce(t.finished_at, t.updated_at) >= ?7) \
      AND t.id < coalesce(?4, 9223372036854775807) \
    ORDER BY t.id DESC LIMIT ?5";

pub(super) async fn task_list(pool: &SqlitePool, params: &TaskListParams) -> Result<TaskPage> {
    params.validate()?;
    let statuses = if params.statuses.is_empty() {
        None
    } else {
        let names: Vec<&str> = params.statuses.iter().map(|s| s.as_str()).collect();
        Some(json_list(&names)?)
    };
    let found = sqlx::query(TASK_LIST)
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
    let Some(row) = sqlx::query("SELECT * FROM tasks WHERE id = ?1")
        .bind(id.0)
        .fetch_optional(&mut *tx)
        .await
        .map_err(StoreError::db(OP))?
    else {
        commit(tx, OP).await?;
        return Ok(None);
    };
    let attempts = sqlx::query(
        "SELECT task_id, epoch, attempt, agent, started_at, finished_at, outcome, error \
         FROM task_attempts WHERE task_id = ?1 ORDER BY epoch",
    )
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

/// The facts that explain why task ?1 is not running (worded in store/explain.rs). ?2 now,
/// ?3 the cutoff before which an agent's registry heartbeat is stale, ?4 most claimable tasks
/// counted ahead of it.
const TASK_EXPLAIN: &str = "WITH t AS ( \
        SELECT id, task_type, status, priority, available_at, deadline_at, attempt, max_attempts, \
               lease_owner, last_error, coalesce(finished_at, updated_at) AS finished_at, \
               status IN ('queued', 'retry_wait') AS waiting \
        FROM tasks WHERE id = ?1) \
    SELECT t.id, t.task_type, t.status, t.available_at, t.deadline_at, t.attempt, t.max_attempts, \
           t.lease_owner, t.last_error, t.finished_at, \
           coalesce(tp.paused, 0) AS type_paused, \
           coalesce(gp.paused, 0) AS global_paused, \
           tp.max_concurrency AS type_limit, \
           CASE WHEN t.waiting AND tp.max_concurrency IS NOT NULL THEN ( \
               SELECT count(*) FROM tasks r \
               WHERE r.status IN ('running', 'cancel_requested') AND r.task_type = t.task_type) \
           END AS type_running, \
           gp.max_concurrency AS global_limit, \
           CASE WHEN t.waiting AND gp.max_concurrency IS NOT NULL THEN ( \
               SELECT count(*) FROM tasks r WHERE r.status IN ('running', 'cancel_requested')) \
           END AS global_running, \
           t.waiting AND EXISTS ( \
               SELECT 1 FROM agents a, json_each(a.task_types) j \
               WHERE a.state = 'running' AND a.heartbeat_at > ?3 AND j.value = t.task_type) \
               AS agent_live, \
           CASE WHEN t.waiting AND t.available_at <= ?2 THEN ( \
               SELECT count(*) FROM ( \
                   SELECT 1 FROM tasks c \
                   WHERE c.status IN ('queued', 'retry_wait') \
                     AND c.task_type = t.task_type \
                     AND c.available_at <= ?2 \
                     AND (c.deadline_at IS NULL OR c.deadline_at > ?2) \
                     AND c.priority >= t.priority \
                     AND (c.priority > t.priority \
                          OR c.available_at < t.available_at \
                          OR (c.available_at = t.available_at AND c.id < t.id)) \
                   LIMIT ?4)) \
           ELSE 0 END AS ahead \
    FROM t \
    LEFT JOIN policies tp ON tp.scope = t.task_type \
    LEFT JOIN policies gp ON gp.scope = '*'";

pub(super) async fn task_explain(
    pool: &SqlitePool,
    params: &ExplainParams,
) -> Result<Vec<Blocker>> {
    const OP: &str = "task_explain";
    params.validate()?;
    let cap = i64::try_from(EXPLAIN_AHEAD_CAP + 1).unwrap_or(i64::MAX);
    let (mut tx, now) = read_tx(pool, OP).await?;
    let row = sqlx::query(TASK_EXPLAIN)
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

/// Counts per task type plus the global policy as the row named '*'. ?1 now, ?2 a minute ago,
/// ?3 caps the rows.
const TASK_OVERVIEW: &str = "WITH live AS ( \
        SELECT task_type, \
               sum(status = 'queued' AND available_at <= ?1) AS queued, \
               sum(status = 'queued' AND available_at > ?1) AS scheduled, \
               sum(status = 'retry_wait') AS retrying, \
               sum(status IN ('running', 'cancel_requested')) AS running \
        FROM tasks WHERE status IN ('queued', 'retry_wait', 'running', 'cancel_requested') \
        GROUP BY task_type \
    ), dead AS ( \
        SELECT task_type, count(*) AS dead FROM tasks WHERE status = 'dead' GROUP BY task_type \
    ), recent AS ( \
        SELECT task_type, \
               sum(status IN ('succeeded', 'partially_succeeded')) AS finished, \
               sum(status = 'dead') AS died \
        FROM tasks \
        WHERE status IN ('succeeded', 'partially_succeeded', 'cancelled', 'dead') \
          AND finished_at >= ?2 \
        GROUP BY task_type \
    ), names AS ( \
        SELECT task_type FROM live UNION SELECT task_type FROM dead \
        UNION SELECT task_type FROM recent UNION SELECT scope FROM policies \
    ) \
    SELECT n.task_type, \
           coalesce(l.queued, 0) AS queued, coalesce(l.scheduled, 0) AS scheduled, \
           coalesce(l.retrying, 0) AS retrying, coalesce(l.running, 0) AS running, \
           coalesce(d.dead, 0) AS dead, coalesce(r.finished, 0) AS finished_last_minute, \
           coalesce(r.died, 0) AS dead_last_minute, p.max_concurrency, \
           coalesce(p.paused, 0) AS paused \
    FROM names n \
    LEFT JOIN live l ON l.task_type = n.task_type \
    LEFT JOIN dead d ON d.task_type = n.task_type \
    LEFT JOIN recent r ON r.task_type = n.task_type \
    LEFT JOIN policies p ON p.scope = n.task_type \
    ORDER BY n.task_type = '*' DESC, n.task_type \
    LIMIT ?3";

pub(super) async fn task_overview(pool: &SqlitePool) -> Result<Overview> {
    const OP: &str = "task_overview";
    let cap = i64::try_from(OVERVIEW_TYPES_CAP + 2).unwrap_or(i64::MAX);
    let (mut tx, now) = read_tx(pool, OP).await?;
    let found = sqlx::query(TASK_OVERVIEW)
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
