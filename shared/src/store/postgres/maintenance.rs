//! Maintenance statements run by the leader: recovery of expired leases, deadline expiry, and
//! the listing of suspect leases (renewals overdue, not yet taken).
//!
//! ```text
//!   heartbeat_at < now() - revoke_threshold   → suspect: listed, shown as a renewal failure
//!   lease_until + grace < now()               → recovered: epoch+1, retry_wait | dead | cancelled
//! ```
//!
//! When things fail: recovery re-checks status, owner, epoch and expiry of every selected row in
//! the statement that changes it, and skips rows locked by a completing holder, so it never
//! overwrites a finished or newer-epoch row; a holder that completes first wins, one that
//! completes later is fenced.

use super::db::Db;
use sqlx::types::Json;

use super::rows::{agent_id, get, status, task_type};
use super::{secs, sql};
use crate::domain::{LeaseEpoch, TaskId, TaskStatus, TaskType};
use crate::store::lifecycle;
use crate::store::{BreakerTickParams, BreakerTransition, ShedParams};
use crate::store::{
    ExpireDeadlinesParams, PurgeParams, RecentRun, RecentRunsParams, RecoverParams, Recovered,
    Result, StoreError, SuspectLease, SuspectParams, UnservedParams,
};

pub(super) async fn lease_recover_expired(
    pool: &Db,
    params: &RecoverParams,
) -> Result<Vec<Recovered>> {
    const OP: &str = "lease_recover_expired";
    let mut tx = super::begin_indexed(pool, OP).await?;
    let expired = sqlx::query(sql::lease_list_expired)
        .bind(secs(params.grace))
        .bind(i64::from(params.limit))
        .bind(params.clock_bound)
        .fetch_all(&mut *tx)
        .await
        .map_err(StoreError::db(OP))?;
    if expired.is_empty() {
        tx.commit().await.map_err(StoreError::db(OP))?;
        return Ok(Vec::new());
    }
    let n = expired.len();
    let (mut ids, mut owners, mut epochs) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    let (mut statuses, mut new_epochs, mut errors, mut attempt_errors, mut finished) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    let json = |e: &crate::domain::TaskError| {
        serde_json::to_value(e)
            .map(Json)
            .map_err(|e| StoreError::Corrupt {
                what: "task error",
                detail: e.to_string(),
            })
    };
    for row in &expired {
        let lease = crate::store::rows::expired_lease(row)?;
        let recovery = lifecycle::recover(&lease);
        ids.push(get::<i64>(row, "id")?);
        statuses.push(recovery.status.as_str());
        new_epochs.push(recovery.epoch);
        errors.push(recovery.error.as_ref().map(json).transpose()?);
        attempt_errors.push(json(&recovery.attempt_error)?);
        finished.push(recovery.finished());
        owners.push(lease.owner);
        epochs.push(lease.epoch);
    }
    let rows = sqlx::query(sql::lease_recover_expired)
        .bind(&ids)
        .bind(&owners)
        .bind(&epochs)
        .bind(&statuses)
        .bind(&new_epochs)
        .bind(&errors)
        .bind(&attempt_errors)
        .bind(&finished)
        .fetch_all(&mut *tx)
        .await
        .map_err(StoreError::db(OP))?;
    tx.commit().await.map_err(StoreError::db(OP))?;
    rows.iter()
        .map(|row| {
            Ok(Recovered {
                id: TaskId(get(row, "id")?),
                task_type: task_type(get(row, "task_type")?)?,
                owner: agent_id(get(row, "owner")?)?,
                revoked_epoch: LeaseEpoch(get(row, "revoked_epoch")?),
                status: status(get::<&str>(row, "status")?)?,
            })
        })
        .collect()
}

pub(super) async fn task_expire_deadlines(
    pool: &Db,
    params: &ExpireDeadlinesParams,
) -> Result<Vec<TaskId>> {
    let rows = sqlx::query(sql::task_expire_deadlines)
        .bind(i64::from(params.limit))
        .fetch_all(pool)
        .await
        .map_err(StoreError::db("task_expire_deadlines"))?;
    rows.iter()
        .map(|row| get::<i64>(row, "id").map(TaskId))
        .collect()
}

pub(super) async fn task_shed(pool: &Db, params: &ShedParams) -> Result<Vec<(TaskId, TaskType)>> {
    let rows = sqlx::query(sql::task_shed)
        .bind(i64::from(params.limit))
        .fetch_all(pool)
        .await
        .map_err(StoreError::db("task_shed"))?;
    rows.iter()
        .map(|row| {
            Ok((
                TaskId(get::<i64>(row, "id")?),
                task_type(get::<String>(row, "task_type")?)?,
            ))
        })
        .collect()
}

pub(super) async fn task_recent_runs(
    pool: &Db,
    params: &RecentRunsParams,
) -> Result<Vec<RecentRun>> {
    const OP: &str = "task_recent_runs";
    let types: Vec<&str> = params.task_types.iter().map(TaskType::as_str).collect();
    // Indexed: the generic plan does not know the scan's LIMIT and could otherwise read and
    // sort every finished row (the plan is a backward scan of tasks_finished_idx, no sort).
    let mut tx = super::begin_indexed(pool, OP).await?;
    let rows = sqlx::query(sql::task_recent_runs)
        .bind(types)
        .bind(i64::from(params.scan))
        .fetch_all(&mut *tx)
        .await
        .map_err(StoreError::db(OP))?;
    tx.commit().await.map_err(StoreError::db(OP))?;
    rows.iter().map(recent_run).collect()
}

fn recent_run(row: &sqlx::postgres::PgRow) -> Result<RecentRun> {
    let us: i64 = get(row, "run_us")?;
    Ok(RecentRun {
        task_type: task_type(get(row, "task_type")?)?,
        run_time: std::time::Duration::from_micros(u64::try_from(us).unwrap_or(0)),
    })
}

pub(super) async fn lease_list_suspect(
    pool: &Db,
    params: &SuspectParams,
) -> Result<Vec<SuspectLease>> {
    let rows = sqlx::query(sql::lease_list_suspect)
        .bind(secs(params.threshold))
        .bind(i64::from(params.limit))
        .fetch_all(pool)
        .await
        .map_err(StoreError::db("lease_list_suspect"))?;
    rows.iter()
        .map(|row| crate::store::rows::suspect_lease(row, get(row, "now")?))
        .collect()
}

/// Retention of finished tasks. `tasks` is partitioned by the UTC day a task finished
/// (migration 20261210000001): a day's partition is dropped whole once its last task is past
/// retention, its tasks of other statuses first moved to `tasks_done_kept`. With a retention of
/// a day or more that is all it takes for the day partitions (tasks are kept up to a day longer
/// than asked), and only the partitions that are not one day's (kept, default, stray finished
/// rows in `tasks_live`) are deleted from row by row; a shorter retention also deletes row by
/// row everywhere. Days go with the retention of succeeded tasks, the bulk of any day; the
/// others' own retention (dead tasks, say) deletes them row by row wherever they are. A call
/// that serves succeeded tasks (once per retention pass) first makes sure the coming days'
/// partitions exist.
pub(super) async fn task_purge_finished(pool: &Db, params: &PurgeParams) -> Result<u64> {
    const OP: &str = "task_purge_finished";
    let statuses: Vec<&str> = params.statuses.iter().map(|s| s.as_str()).collect();
    if !params.statuses.contains(&TaskStatus::Succeeded) {
        return purge_rows(pool, &statuses, params, sql::task_purge_finished).await;
    }
    ensure_day_partitions(pool).await;
    let days: Vec<chrono::NaiveDate> = sqlx::query_scalar(sql::task_done_partitions_due)
        .bind(secs(params.older_than))
        .fetch_all(pool)
        .await
        .map_err(StoreError::db(OP))?;
    let mut purged: u64 = 0;
    for day in days {
        // One day that cannot go now must not hold back the others or the row-by-row part.
        match drop_day(pool, day, &statuses, params.older_than).await {
            Ok(n) => purged += n,
            Err(error) => {
                tracing::warn!(%day, %error, "could not drop the day partition of finished tasks past retention; trying again at the next pass")
            }
        }
    }
    let rows = if params.older_than < WHOLE_DAY {
        purge_rows(pool, &statuses, params, sql::task_purge_finished).await?
    } else {
        purge_rows(pool, &statuses, params, sql::task_purge_finished_undivided).await?
    };
    Ok(purged + rows)
}

/// Retention row by row with `statement` (task_purge_finished.sql over every partition, or
/// task_purge_finished_undivided.sql over those that are not one day's); how many it deleted.
async fn purge_rows(
    pool: &Db,
    statuses: &[&str],
    params: &PurgeParams,
    statement: &'static str,
) -> Result<u64> {
    let n: i64 = sqlx::query_scalar(statement)
        .bind(statuses)
        .bind(secs(params.older_than))
        .bind(i64::from(params.limit))
        .fetch_one(pool)
        .await
        .map_err(StoreError::db("task_purge_finished"))?;
    Ok(u64::try_from(n).unwrap_or(0))
}

/// Below this, retention deletes row by row everywhere: a day partition cannot be dropped
/// before its day is over.
const WHOLE_DAY: std::time::Duration = std::time::Duration::from_secs(86_400);

/// How long making or dropping a day's partition may wait for its lock (attaching locks the
/// default partition, dropping locks `tasks`, each for an instant; every statement that needs
/// them waits behind it meanwhile). Past it, the change is given up and tried at the next
/// pass. The statement may run longer than the pool's statement timeout: dropping a day first
/// deletes its attempt rows and counts its tasks.
const PARTITION_DDL_SETTINGS: &str =
    "SET LOCAL lock_timeout = '200ms'; SET LOCAL statement_timeout = '30s'";

/// Makes today's partition of finished tasks and the next three days' where missing; a
/// failure is logged (a day without a partition finishes into `tasks_done_default`, which
/// retention serves row by row) and tried again at the next pass.
async fn ensure_day_partitions(pool: &Db) {
    let made = async {
        let mut tx = pool.begin().await?;
        sqlx::raw_sql(PARTITION_DDL_SETTINGS)
            .execute(&mut *tx)
            .await?;
        let created: i64 = sqlx::query_scalar(sql::task_done_partitions_ensure)
            .fetch_one(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok::<_, sqlx::Error>(created)
    };
    match made.await {
        Ok(0) => {}
        Ok(created) => tracing::info!(created, "created day partitions for finished tasks"),
        Err(error) => {
            tracing::warn!(%error, "could not create the coming days' partitions for finished tasks; trying again at the next pass")
        }
    }
}

/// Drops `day`'s partition (see [`task_purge_finished`]); 0 when it was not due after all, or
/// when its lock could not be had in time (logged; the next pass tries again).
async fn drop_day(
    pool: &Db,
    day: chrono::NaiveDate,
    statuses: &[&str],
    older_than: std::time::Duration,
) -> Result<u64> {
    const OP: &str = "task_purge_finished";
    let mut tx = pool.begin().await.map_err(StoreError::db(OP))?;
    sqlx::raw_sql(PARTITION_DDL_SETTINGS)
        .execute(&mut *tx)
        .await
        .map_err(StoreError::db(OP))?;
    let dropped = sqlx::query_scalar::<_, i64>(sql::task_done_partition_drop)
        .bind(day)
        .bind(statuses)
        .bind(secs(older_than))
        .fetch_one(&mut *tx)
        .await;
    let dropped = match dropped {
        Ok(n) => n,
        Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("55P03") => {
            tracing::info!(%day, "dropping the finished tasks of a day waited too long for its lock; trying again at the next pass");
            return Ok(0);
        }
        Err(e) => return Err(StoreError::db(OP)(e)),
    };
    tx.commit().await.map_err(StoreError::db(OP))?;
    if dropped > 0 {
        tracing::info!(%day, tasks = dropped, "dropped the day partition of finished tasks past retention");
    }
    Ok(u64::try_from(dropped).unwrap_or(0))
}

pub(super) async fn task_dead_letter_unserved(
    pool: &Db,
    params: &UnservedParams,
) -> Result<Vec<(TaskId, TaskType)>> {
    let rows = sqlx::query(sql::task_dead_letter_unserved)
        .bind(secs(params.due_for))
        .bind(secs(params.legacy_stale_after))
        .bind(i64::from(params.limit))
        .fetch_all(pool)
        .await
        .map_err(StoreError::db("task_dead_letter_unserved"))?;
    rows.iter()
        .map(|row| Ok((TaskId(get(row, "id")?), task_type(get(row, "task_type")?)?)))
        .collect()
}

pub(super) async fn task_count_claimable(pool: &Db, task_types: &[TaskType]) -> Result<u64> {
    let types: Vec<&str> = task_types.iter().map(TaskType::as_str).collect();
    let n: i64 = sqlx::query_scalar(sql::task_count_claimable)
        .bind(types)
        .fetch_one(pool)
        .await
        .map_err(StoreError::db("task_count_claimable"))?;
    Ok(u64::try_from(n).unwrap_or(0))
}

pub(super) async fn task_idle_report(
    pool: &Db,
    params: &crate::store::IdleReportParams,
) -> Result<crate::store::IdleReport> {
    const OP: &str = "task_idle_report";
    let types: Vec<&str> = params.task_types.iter().map(TaskType::as_str).collect();
    let rows = sqlx::query(sql::task_idle_report)
        .bind(types)
        .bind(params.ended_within.map(secs))
        .bind(secs(params.legacy_stale_after))
        .bind(i32::try_from(params.id_limit).unwrap_or(i32::MAX))
        .fetch_all(pool)
        .await
        .map_err(StoreError::db(OP))?;
    let mut report = crate::store::IdleReport::default();
    for row in &rows {
        let kind: String = get(row, "kind")?;
        let n: i64 = get(row, "n")?;
        let ids: Vec<i64> = get(row, "ids")?;
        let group = crate::store::IdleGroup {
            status: status(&get::<String>(row, "status")?)?,
            task_type: task_type(get(row, "task_type")?)?,
            count: u64::try_from(n).unwrap_or(0),
            ids: ids.into_iter().map(TaskId).collect(),
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

/// The leader's move of the circuit breakers (breaker_tick.sql), each move audited in the same
/// transaction.
pub(super) async fn breaker_tick(
    pool: &Db,
    params: &BreakerTickParams,
) -> Result<Vec<BreakerTransition>> {
    const OP: &str = "breaker_tick";
    let mut tx = pool.begin().await.map_err(StoreError::db(OP))?;
    let rows = sqlx::query(sql::breaker_tick)
        .fetch_all(&mut *tx)
        .await
        .map_err(StoreError::db(OP))?;
    let moves = rows
        .iter()
        .map(crate::store::rows::breaker_transition)
        .collect::<Result<Vec<_>>>()?;
    for moved in &moves {
        super::operator::audit_write(&mut *tx, &moved.audit_entry(&params.agent)).await?;
    }
    tx.commit().await.map_err(StoreError::db(OP))?;
    Ok(moves)
}
