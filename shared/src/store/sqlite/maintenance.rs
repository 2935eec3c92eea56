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
use super::{commit, json_list, read_tx, sql, write_tx};
use crate::domain::BreakerState;
use crate::domain::PolicyScope;
use crate::domain::{LeaseEpoch, TaskId, TaskType};
use crate::store::lifecycle;
use crate::store::{BreakerTickParams, BreakerTransition, ShedParams};
use crate::store::{
    ExpireDeadlinesParams, PurgeParams, RecentRun, RecentRunsParams, RecoverParams, Recovered,
    Result, StoreError, SuspectLease, SuspectParams, UnservedParams,
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
    sqlx::query(sql::task_dead_letter)
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
    let expired = sqlx::query(sql::lease_list_expired)
        .bind(cutoff)
        .bind(i64::from(params.limit))
        .fetch_all(&mut *tx)
        .await
        .map_err(StoreError::db(OP))?;
    let mut recovered = Vec::with_capacity(expired.len());
    for row in &expired {
        let id: i64 = get(row, "id")?;
        let attempt: i64 = get(row, "attempt")?;
        let lease = crate::store::rows::expired_lease(row)?;
        let recovery = lifecycle::recover(&lease);
        let last_error = match &recovery.error {
            Some(error) => Some(rows::to_text(error, "task error")?),
            None => get::<Option<String>>(row, "last_error")?,
        };
        sqlx::query(sql::lease_recover_expired)
            .bind(id)
            .bind(recovery.status.as_str())
            .bind(recovery.epoch)
            .bind(now)
            .bind(last_error)
            .bind(recovery.finished().then_some(now))
            .execute(&mut *tx)
            .await
            .map_err(StoreError::db(OP))?;
        sqlx::query(sql::task_attempt_insert)
            .bind(id)
            .bind(lease.epoch)
            .bind(attempt)
            .bind(&lease.owner)
            .bind(get::<Option<i64>>(row, "started_at")?.unwrap_or(now))
            .bind(now)
            .bind(lifecycle::LEASE_EXPIRED)
            .bind(rows::to_text(&recovery.attempt_error, "attempt error")?)
            .execute(&mut *tx)
            .await
            .map_err(StoreError::db(OP))?;
        recovered.push(Recovered {
            id: TaskId(id),
            task_type: task_type(get(row, "task_type")?)?,
            owner: agent_id(lease.owner)?,
            revoked_epoch: LeaseEpoch(lease.epoch),
            status: recovery.status,
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
    let due = sqlx::query(sql::task_list_past_deadline)
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
    let done = sqlx::query(sql::task_purge_finished)
        .bind(json_list(&statuses)?)
        .bind(now.saturating_sub(span(params.older_than)))
        .bind(i64::from(params.limit))
        .execute(&mut *tx)
        .await
        .map_err(StoreError::db(OP))?;
    commit(tx, OP).await?;
    Ok(done.rows_affected())
}

pub(super) async fn task_dead_letter_unserved(
    pool: &SqlitePool,
    params: &UnservedParams,
) -> Result<Vec<(TaskId, TaskType)>> {
    const OP: &str = "task_dead_letter_unserved";
    let (mut tx, now) = write_tx(pool, OP).await?;
    let stale = span(params.legacy_stale_after);
    let live: i64 = sqlx::query_scalar(sql::agent_count_live)
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
    let unserved = sqlx::query(sql::task_list_unserved)
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

pub(super) async fn task_shed(
    pool: &SqlitePool,
    params: &ShedParams,
) -> Result<Vec<(TaskId, TaskType)>> {
    const OP: &str = "task_shed";
    // Without a shedding type, a read and no write lock (the leader asks every tick).
    let sheds = |rows: &[sqlx::sqlite::SqliteRow]| -> Result<Vec<(String, std::time::Duration)>> {
        let mut out = Vec::new();
        for row in rows {
            let policy = rows::policy(row)?;
            if let (PolicyScope::Type(t), Some(after)) = (&policy.scope, policy.shed_after) {
                out.push((t.as_str().to_string(), after));
            }
        }
        Ok(out)
    };
    let read = sqlx::query(sql::policy_list)
        .fetch_all(pool)
        .await
        .map_err(StoreError::db(OP))?;
    if sheds(&read)?.is_empty() {
        return Ok(Vec::new());
    }
    let (mut tx, now) = write_tx(pool, OP).await?;
    let policies = sqlx::query(sql::policy_list)
        .fetch_all(&mut *tx)
        .await
        .map_err(StoreError::db(OP))?;
    let mut out = Vec::new();
    for (name, after) in sheds(&policies)? {
        let left = usize::try_from(params.limit)
            .unwrap_or(usize::MAX)
            .saturating_sub(out.len());
        if left == 0 {
            break;
        }
        let shed = sqlx::query(sql::task_shed)
            .bind(&name)
            .bind(now.saturating_sub(span(after)))
            .bind(i64::try_from(left).unwrap_or(i64::MAX))
            .bind(i64::try_from(after.as_millis()).unwrap_or(i64::MAX))
            .bind(now)
            .fetch_all(&mut *tx)
            .await
            .map_err(StoreError::db(OP))?;
        for row in &shed {
            out.push((TaskId(get(row, "id")?), task_type(get(row, "task_type")?)?));
        }
    }
    commit(tx, OP).await?;
    Ok(out)
}

/// The leader's move of the circuit breakers (see the PostgreSQL breaker_tick.sql for the
/// rules), each move audited in the same transaction. Without a breaker, one read and no write
/// lock.
pub(super) async fn breaker_tick(
    pool: &SqlitePool,
    params: &BreakerTickParams,
) -> Result<Vec<BreakerTransition>> {
    const OP: &str = "breaker_tick";
    let read = sqlx::query(sql::breaker_list)
        .fetch_all(pool)
        .await
        .map_err(StoreError::db(OP))?;
    if read.is_empty() {
        return Ok(Vec::new());
    }
    let (mut tx, now) = write_tx(pool, OP).await?;
    let now_time = rows::time(now, "now")?;
    let listed = sqlx::query(sql::breaker_list)
        .fetch_all(&mut *tx)
        .await
        .map_err(StoreError::db(OP))?;
    let mut moves = Vec::new();
    for row in &listed {
        let scope: String = get(row, "scope")?;
        let Some(breaker) = rows::breaker_status(row)? else {
            continue;
        };
        let since = breaker.since.map(super::rows::micros);
        let (to, failures) = match breaker.state {
            BreakerState::Closed => {
                let window_start = now
                    .saturating_sub(span(breaker.policy.within))
                    .max(since.unwrap_or(i64::MIN));
                let failed: i64 = sqlx::query_scalar(sql::breaker_failures)
                    .bind(&scope)
                    .bind(window_start)
                    .fetch_one(&mut *tx)
                    .await
                    .map_err(StoreError::db(OP))?;
                let failed = u64::try_from(failed).unwrap_or(0);
                let trips = failed >= u64::from(breaker.policy.failures);
                (trips.then_some(BreakerState::Open), Some(failed))
            }
            BreakerState::Open => {
                let over = breaker.until.is_none_or(|until| until <= now_time);
                (over.then_some(BreakerState::HalfOpen), None)
            }
            BreakerState::HalfOpen => {
                let probe = sqlx::query(sql::breaker_probe)
                    .bind(&scope)
                    .bind(since.unwrap_or(i64::MIN))
                    .fetch_one(&mut *tx)
                    .await
                    .map_err(StoreError::db(OP))?;
                let to = if get::<bool>(&probe, "failed")? {
                    Some(BreakerState::Open)
                } else if get::<bool>(&probe, "ok")? {
                    Some(BreakerState::Closed)
                } else {
                    None
                };
                (to, None)
            }
        };
        let Some(to) = to else {
            continue;
        };
        let until =
            (to == BreakerState::Open).then(|| now.saturating_add(span(breaker.policy.cooldown)));
        sqlx::query(sql::breaker_move)
            .bind(&scope)
            .bind(to.as_str())
            .bind(now)
            .bind(until)
            .execute(&mut *tx)
            .await
            .map_err(StoreError::db(OP))?;
        let moved = BreakerTransition {
            task_type: task_type(scope)?,
            from: breaker.state,
            to,
            failures: if to == BreakerState::Open {
                failures
            } else {
                None
            },
            until: until.map(|u| rows::time(u, "breaker_until")).transpose()?,
            policy: breaker.policy,
        };
        super::operator::audit_write(&mut tx, &moved.audit_entry(&params.agent), now).await?;
        moves.push(moved);
    }
    commit(tx, OP).await?;
    Ok(moves)
}

pub(super) async fn task_count_claimable(pool: &SqlitePool, types: &[TaskType]) -> Result<u64> {
    const OP: &str = "task_count_claimable";
    let names: Vec<&str> = types.iter().map(TaskType::as_str).collect();
    let (mut tx, now) = read_tx(pool, OP).await?;
    let n: i64 = sqlx::query_scalar(sql::task_count_claimable)
        .bind(now)
        .bind(json_list(&names)?)
        .fetch_one(&mut *tx)
        .await
        .map_err(StoreError::db(OP))?;
    commit(tx, OP).await?;
    Ok(u64::try_from(n).unwrap_or(0))
}

pub(super) async fn task_recent_runs(
    pool: &SqlitePool,
    params: &RecentRunsParams,
) -> Result<Vec<RecentRun>> {
    const OP: &str = "task_recent_runs";
    let names: Vec<&str> = params.task_types.iter().map(TaskType::as_str).collect();
    let rows = sqlx::query(sql::task_recent_runs)
        .bind(json_list(&names)?)
        .bind(i64::from(params.scan))
        .fetch_all(pool)
        .await
        .map_err(StoreError::db(OP))?;
    rows.iter()
        .map(|row| {
            let us: i64 = get(row, "run_us")?;
            Ok(RecentRun {
                task_type: task_type(get(row, "task_type")?)?,
                run_time: std::time::Duration::from_micros(u64::try_from(us).unwrap_or(0)),
            })
        })
        .collect()
}

pub(super) async fn lease_list_suspect(
    pool: &SqlitePool,
    params: &SuspectParams,
) -> Result<Vec<SuspectLease>> {
    const OP: &str = "lease_list_suspect";
    let (mut tx, now) = read_tx(pool, OP).await?;
    let found = sqlx::query(sql::lease_list_suspect)
        .bind(now.saturating_sub(span(params.threshold)))
        .bind(i64::from(params.limit))
        .fetch_all(&mut *tx)
        .await
        .map_err(StoreError::db(OP))?;
    commit(tx, OP).await?;
    let now = rows::time(now, "now")?;
    found
        .iter()
        .map(|row| crate::store::rows::suspect_lease(row, now))
        .collect()
}

pub(super) async fn task_idle_report(
    pool: &SqlitePool,
    params: &crate::store::IdleReportParams,
) -> Result<crate::store::IdleReport> {
    const OP: &str = "task_idle_report";
    let names: Vec<&str> = params.task_types.iter().map(TaskType::as_str).collect();
    let (mut tx, now) = read_tx(pool, OP).await?;
    // The branches are those of the PostgreSQL statement; ids are cut to the limit here.
    let rows = sqlx::query(sql::task_idle_report)
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
