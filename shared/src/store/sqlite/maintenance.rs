//! Maintenance run by the leader: recovery of expired leases, deadline expiry, retention,
//! unserved types, and the listing of suspect leases (renewals overdue, not yet taken).
//!
//! ```text
//!   heartbeat_at < now - revoke_threshold   → suspect: listed, shown as a renewal failure
//!   lease_until + grace < now               → recovered: epoch+1, retry_wait | dead | cancelled
//! ```
//! Every change re-checks the row under the write lock, so a holder that completed first wins
//! and one that completes later is fenced.

use serde_json::json;
use sqlx::SqlitePool;

use super::rows::{self, agent_id, get, span, status, task_type};
use super::{commit, json_list, read_tx, write_tx};
use crate::domain::{LeaseEpoch, TaskId, TaskType};
use crate::store::{
    ExpireDeadlinesParams, PurgeParams, RecoverParams, Recovered, Result, StoreError, SuspectLease,
    SuspectParams, UnservedParams,
};

fn stamp(us: i64) -> String {
    chrono::DateTime::from_timestamp_micros(us)
        .map(|t| t.to_string())
        .unwrap_or_else(|| us.to_string())
}

/// Ends waiting task `id` dead with a permanent error `code: message`.
async fn dead_letter(
    tx: &mut sqlx::SqliteConnection,
    id: i64,
    code: &str,
    message: String,
    now: i64,
    op: &'static str,
) -> Result<()> {
    let error = rows::to_text(
        &json!({"code": code, "message": message, "retryable": false}),
        "task error",
    )?;
    sqlx::query(
        "UPDATE tasks SET status = 'dead', last_error = ?2, finished_at = ?3, updated_at = ?3 \
         WHERE id = ?1",
    )
    .bind(id)
    .bind(error)
    .bind(now)
    .execute(&mut *tx)
    .await
    .map_err(StoreError::db(op))?;
    Ok(())
}

pub(super) async fn lease_recover_expired(
    pool: &SqlitePool,
    params: &RecoverParams,
) -> Result<Vec<Recovered>> {
    const OP: &str = "lease_recover_expired";
    let (mut tx, now) = write_tx(pool, OP).await?;
    if params
        .clock_bound
        .is_some_and(|bound| now > rows::micros(bound))
    {
        // The clock reads past the caller's bound: it jumped; take nothing.
        commit(tx, OP).await?;
        return Ok(Vec::new());
    }
    let cutoff = now.saturating_sub(span(params.grace));
    let expired = sqlx::query(
        "SELECT id, task_type, status, lease_owner, lease_epoch, lease_until, attempt, \
                max_attempts, started_at, last_error \
         FROM tasks WHERE status IN ('running', 'cancel_requested') AND lease_until < ?1 \
         ORDER BY lease_until LIMIT ?2",
    )
    .bind(cutoff)
    .bind(i64::from(params.limit))
    .fetch_all(&mut *tx)
    .await
    .map_err(StoreError::db(OP))?;
    let mut recovered = Vec::with_capacity(expired.len());
    for row in &expired {
        let id: i64 = get(row, "id")?;
        let owner: String = get(row, "lease_owner")?;
        let epoch: i64 = get(row, "lease_epoch")?;
        let until: i64 = get(row, "lease_until")?;
        let attempt: i64 = get(row, "attempt")?;
        let cancel = get::<&str>(row, "status")? == "cancel_requested";
        let exhausted = attempt >= get::<i64>(row, "max_attempts")?;
        let next = if cancel {
            "cancelled"
        } else if exhausted {
            "dead"
        } else {
            "retry_wait"
        };
        // A task that will run again gets a new epoch now, fencing the old holder before anyone
        // claims it; one that ends here keeps the epoch of the attempt it ended.
        let new_epoch = if !cancel && !exhausted {
            epoch + 1
        } else {
            epoch
        };
        let last_error = if cancel {
            get::<Option<String>>(row, "last_error")?
        } else {
            Some(rows::to_text(
                &json!({
                    "code": "lease_expired",
                    "message": format!(
                        "lease held by {owner} (epoch {epoch}) expired at {} and was not renewed within the grace period",
                        stamp(until)
                    ),
                    "retryable": true,
                }),
                "task error",
            )?)
        };
        sqlx::query(
            "UPDATE tasks SET status = ?2, lease_epoch = ?3, lease_until = NULL, available_at = ?4, \
             last_error = ?5, finished_at = ?6, updated_at = ?4 WHERE id = ?1",
        )
        .bind(id)
        .bind(next)
        .bind(new_epoch)
        .bind(now)
        .bind(last_error)
        .bind((cancel || exhausted).then_some(now))
        .execute(&mut *tx)
        .await
        .map_err(StoreError::db(OP))?;
        sqlx::query(
            "INSERT INTO task_attempts (task_id, epoch, attempt, agent, started_at, finished_at, \
             outcome, error) VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'lease_expired', ?7)",
        )
        .bind(id)
        .bind(epoch)
        .bind(attempt)
        .bind(&owner)
        .bind(get::<Option<i64>>(row, "started_at")?.unwrap_or(now))
        .bind(now)
        .bind(rows::to_text(
            &json!({"code": "lease_expired", "message": "lease expired and was recovered", "retryable": true}),
            "attempt error",
        )?)
        .execute(&mut *tx)
        .await
        .map_err(StoreError::db(OP))?;
        recovered.push(Recovered {
            id: TaskId(id),
            task_type: task_type(get(row, "task_type")?)?,
            owner: agent_id(owner)?,
            revoked_epoch: LeaseEpoch(epoch),
            status: status(next)?,
        });
    }
    commit(tx, OP).await?;
    Ok(recovered)
}

pub(super) async fn task_expire_deadlines(
    pool: &SqlitePool,
    params: &ExpireDeadlinesParams,
) -> Result<Vec<TaskId>> {
    const OP: &str = "task_expire_deadlines";
    let (mut tx, now) = write_tx(pool, OP).await?;
    let due = sqlx::query(
        "SELECT id, deadline_at FROM tasks \
         WHERE deadline_at IS NOT NULL AND deadline_at <= ?1 AND status IN ('queued', 'retry_wait') \
         ORDER BY deadline_at LIMIT ?2",
    )
    .bind(now)
    .bind(i64::from(params.limit))
    .fetch_all(&mut *tx)
    .await
    .map_err(StoreError::db(OP))?;
    let mut ids = Vec::with_capacity(due.len());
    for row in &due {
        let id: i64 = get(row, "id")?;
        let deadline: i64 = get(row, "deadline_at")?;
        let message = format!(
            "deadline {} passed before the task could finish",
            stamp(deadline)
        );
        dead_letter(&mut tx, id, "deadline_exceeded", message, now, OP).await?;
        ids.push(TaskId(id));
    }
    commit(tx, OP).await?;
    Ok(ids)
}

pub(super) async fn task_purge_finished(pool: &SqlitePool, params: &PurgeParams) -> Result<u64> {
    const OP: &str = "task_purge_finished";
    let statuses: Vec<&str> = params.statuses.iter().map(|s| s.as_str()).collect();
    let (mut tx, now) = write_tx(pool, OP).await?;
    let done = sqlx::query(
        "DELETE FROM tasks WHERE id IN ( \
             SELECT id FROM tasks \
             WHERE status IN ('succeeded', 'partially_succeeded', 'cancelled', 'dead') \
               AND status IN (SELECT value FROM json_each(?1)) AND finished_at < ?2 \
             ORDER BY finished_at LIMIT ?3)",
    )
    .bind(json_list(&statuses)?)
    .bind(now.saturating_sub(span(params.older_than)))
    .bind(i64::from(params.limit))
    .execute(&mut *tx)
    .await
    .map_err(StoreError::db(OP))?;
    commit(tx, OP).await?;
    Ok(done.rows_affected())
}

/// Agents that count as live: not stopped, and their own liveness deadline is after `now`
/// (?1); a row without one (an agent from before it existed) is live while its registry
/// heartbeat is younger than ?2 microseconds.
const LIVE: &str = "a.state <> 'stopped' \
    AND coalesce(a.alive_until, a.heartbeat_at + ?2) > ?1";

pub(super) async fn task_dead_letter_unserved(
    pool: &SqlitePool,
    params: &UnservedParams,
) -> Result<Vec<(TaskId, TaskType)>> {
    const OP: &str = "task_dead_letter_unserved";
    let (mut tx, now) = write_tx(pool, OP).await?;
    let stale = span(params.legacy_stale_after);
    let live: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT count(*) FROM agents a WHERE {LIVE}"
    )))
    .bind(now)
    .bind(stale)
    .fetch_one(&mut *tx)
    .await
    .map_err(StoreError::db(OP))?;
    if live == 0 {
        // An empty fleet is an outage, not a verdict on the tasks.
        commit(tx, OP).await?;
        return Ok(Vec::new());
    }
    let unserved = sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT id, task_type FROM tasks \
         WHERE status IN ('queued', 'retry_wait') AND available_at < ?3 \
           AND task_type NOT IN ( \
               SELECT DISTINCT j.value FROM agents a, json_each(a.task_types) j WHERE {LIVE}) \
         ORDER BY priority DESC, available_at, id LIMIT ?4"
    )))
    .bind(now)
    .bind(stale)
    .bind(now.saturating_sub(span(params.due_for)))
    .bind(i64::from(params.limit))
    .fetch_all(&mut *tx)
    .await
    .map_err(StoreError::db(OP))?;
    let mut out = Vec::with_capacity(unserved.len());
    for row in &unserved {
        let id: i64 = get(row, "id")?;
        let name: String = get(row, "task_type")?;
        let message = format!("no running agent handles task type {name}");
        dead_letter(&mut tx, id, "unknown_type", message, now, OP).await?;
        out.push((TaskId(id), task_type(name)?));
    }
    commit(tx, OP).await?;
    Ok(out)
}

pub(super) async fn task_count_claimable(pool: &SqlitePool, types: &[TaskType]) -> Result<u64> {
    const OP: &str = "task_count_claimable";
    let names: Vec<&str> = types.iter().map(TaskType::as_str).collect();
    let (mut tx, now) = read_tx(pool, OP).await?;
    let n: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM tasks t \
         WHERE t.status IN ('queued', 'retry_wait') AND t.available_at <= ?1 \
           AND (t.deadline_at IS NULL OR t.deadline_at > ?1) \
           AND t.task_type IN (SELECT value FROM json_each(?2)) \
           AND NOT EXISTS (SELECT 1 FROM policies p \
                           WHERE p.paused AND (p.scope = '*' OR p.scope = t.task_type))",
    )
    .bind(now)
    .bind(json_list(&names)?)
    .fetch_one(&mut *tx)
    .await
    .map_err(StoreError::db(OP))?;
    commit(tx, OP).await?;
    Ok(u64::try_from(n).unwrap_or(0))
}

pub(super) async fn lease_list_suspect(
    pool: &SqlitePool,
    params: &SuspectParams,
) -> Result<Vec<SuspectLease>> {
    const OP: &str = "lease_list_suspect";
    let (mut tx, now) = read_tx(pool, OP).await?;
    let found = sqlx::query(
        "SELECT id, task_type, lease_owner, lease_epoch, heartbeat_at, lease_until FROM tasks \
         WHERE status IN ('running', 'cancel_requested') AND heartbeat_at < ?1 \
         ORDER BY heartbeat_at, id LIMIT ?2",
    )
    .bind(now.saturating_sub(span(params.threshold)))
    .bind(i64::from(params.limit))
    .fetch_all(&mut *tx)
    .await
    .map_err(StoreError::db(OP))?;
    commit(tx, OP).await?;
    let now = rows::time(now, "now")?;
    found
        .iter()
        .map(|row| {
            Ok(SuspectLease {
                id: TaskId(get(row, "id")?),
                task_type: task_type(get(row, "task_type")?)?,
                owner: agent_id(get(row, "lease_owner")?)?,
                epoch: LeaseEpoch(get(row, "lease_epoch")?),
                heartbeat_at: rows::get_time(row, "heartbeat_at")?,
                lease_until: rows::get_time(row, "lease_until")?,
                now,
            })
        })
        .collect()
}

pub(super) async fn task_idle_report(
    pool: &SqlitePool,
    params: &crate::store::IdleReportParams,
) -> Result<crate::store::IdleReport> {
    const OP: &str = "task_idle_report";
    let names: Vec<&str> = params.task_types.iter().map(TaskType::as_str).collect();
    let (mut tx, now) = read_tx(pool, OP).await?;
    // The branches and their meaning are those of the PostgreSQL statement
    // (`postgres/sql/task_idle_report.sql`); ids are cut to the limit here.
    let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
        "WITH ours AS (SELECT value AS task_type FROM json_each(?3)), \
              served AS (SELECT DISTINCT j.value AS task_type \
                         FROM agents a, json_each(a.task_types) j WHERE {LIVE}), \
              picked AS ( \
           SELECT 'pending' AS kind, t.id, t.status, t.task_type FROM tasks t \
           WHERE t.status IN ('queued', 'retry_wait', 'running', 'cancel_requested') \
             AND t.task_type IN (SELECT task_type FROM ours) \
           UNION ALL \
           SELECT 'ended_badly', t.id, t.status, t.task_type FROM tasks t \
           WHERE t.status IN ('dead', 'cancelled') \
             AND t.task_type IN (SELECT task_type FROM ours) \
             AND (?4 IS NULL OR t.created_at >= ?1 - ?4 OR t.finished_at >= ?1 - ?4) \
           UNION ALL \
           SELECT 'unserved', t.id, t.status, t.task_type FROM tasks t \
           WHERE t.status IN ('queued', 'retry_wait') \
             AND t.task_type NOT IN (SELECT task_type FROM ours) \
             AND t.task_type NOT IN (SELECT task_type FROM served)) \
         SELECT kind, status, task_type, count(*) AS n, json_group_array(id) AS ids \
         FROM (SELECT * FROM picked ORDER BY id) \
         GROUP BY kind, status, task_type ORDER BY kind, status, task_type"
    )))
    .bind(now)
    .bind(span(params.legacy_stale_after))
    .bind(json_list(&names)?)
    .bind(params.ended_within.map(span))
    .fetch_all(&mut *tx)
    .await
    .map_err(StoreError::db(OP))?;
    commit(tx, OP).await?;
    let limit = usize::try_from(params.id_limit).unwrap_or(usize::MAX);
    let mut report = crate::store::IdleReport::default();
    for row in &rows {
        let kind: String = get(row, "kind")?;
        let n: i64 = get(row, "n")?;
        let mut ids: Vec<i64> =
            serde_json::from_str(&get::<String>(row, "ids")?).map_err(|e| StoreError::Corrupt {
                what: "idle report ids",
                detail: e.to_string(),
            })?;
        ids.sort_unstable();
        let group = crate::store::IdleGroup {
            status: status(&get::<String>(row, "status")?)?,
            task_type: task_type(get(row, "task_type")?)?,
            count: u64::try_from(n).unwrap_or(0),
            ids: ids.into_iter().take(limit).map(TaskId).collect(),
        };
        if !report.push(&kind, group) {
            return Err(StoreError::Corrupt {
                what: "idle report kind",
                detail: kind,
            });
        }
    }
    Ok(report)
}
