//! Holder writes: renew, progress, complete, release. Each carries the lease key (task, owner,
//! epoch) and changes nothing when it no longer matches: the outcome says `Fenced`, or, for a
//! completion or release that this key already made (a retry whose reply was lost), a repeat.

use std::collections::HashSet;

use super::db::Db;
use chrono::{DateTime, Utc};
use sqlx::types::Json;

use super::rows::{get, status};
use super::{secs, sql};
use crate::domain::{LeaseEpoch, TaskId};
use crate::store::lifecycle::{self, ResultWrite, Settled};
use crate::store::{
    CheckpointParams, CompleteOutcome, CompleteParams, HolderWrite, ProgressParams, ReleaseOutcome,
    ReleaseParams, RenewOutcome, RenewParams, RenewedLease, Result, StoreError,
};

fn split(leases: &[(TaskId, LeaseEpoch)]) -> (Vec<i64>, Vec<i64>) {
    let mut sorted = leases.to_vec();
    sorted.sort();
    sorted
        .into_iter()
        .map(|(id, epoch)| (id.0, epoch.0))
        .unzip()
}

pub(super) async fn lease_renew_many(pool: &Db, params: &RenewParams) -> Result<RenewOutcome> {
    params.validate()?;
    let (ids, epochs) = split(&params.leases);
    let query = sqlx::query(sql::lease_renew_many)
        .bind(params.owner.as_str())
        .bind(&ids)
        .bind(&epochs)
        .bind(secs(params.lease_ttl))
        .bind(params.alive_for.map(secs));
    let rows = super::fetch_indexed(pool, query, "lease_renew_many").await?;
    let mut now: Option<DateTime<Utc>> = None;
    let mut renewed = Vec::with_capacity(rows.len());
    for row in &rows {
        now = Some(get(row, "now")?);
        if let Some(id) = get::<Option<i64>>(row, "id")? {
            renewed.push(RenewedLease {
                id: TaskId(id),
                epoch: LeaseEpoch(get(row, "lease_epoch")?),
                lease_until: get(row, "lease_until")?,
                cancel_requested: get(row, "cancel_requested")?,
            });
        }
    }
    let now = now.ok_or_else(|| StoreError::Corrupt {
        what: "renewal",
        detail: "no row returned".into(),
    })?;
    Ok(RenewOutcome::settled(now, renewed, &params.leases))
}

pub(super) async fn task_progress(pool: &Db, params: &ProgressParams) -> Result<HolderWrite> {
    let key = &params.key;
    let row = sqlx::query(sql::task_progress)
        .bind(key.id.0)
        .bind(key.owner.as_str())
        .bind(key.epoch.0)
        .bind(Json(&params.progress))
        .fetch_optional(pool)
        .await
        .map_err(StoreError::db("task_progress"))?;
    Ok(if row.is_some() {
        HolderWrite::Held
    } else {
        HolderWrite::Fenced
    })
}

pub(super) async fn task_checkpoint(pool: &Db, params: &CheckpointParams) -> Result<HolderWrite> {
    let key = &params.key;
    let row = sqlx::query(sql::task_checkpoint)
        .bind(key.id.0)
        .bind(key.owner.as_str())
        .bind(key.epoch.0)
        .bind(Json(&params.checkpoint))
        .fetch_optional(pool)
        .await
        .map_err(StoreError::db("task_checkpoint"))?;
    Ok(if row.is_some() {
        HolderWrite::Held
    } else {
        HolderWrite::Fenced
    })
}

/// One completion as decided, in the columns task_complete_many.sql takes.
struct Decided<'a> {
    params: &'a CompleteParams,
    settled: Settled,
}

pub(super) async fn task_complete_many(
    pool: &Db,
    batch: &[CompleteParams],
) -> Result<Vec<CompleteOutcome>> {
    const OP: &str = "task_complete";
    let mut sorted: Vec<&CompleteParams> = batch.iter().collect();
    sorted.sort_by_key(|p| p.key.id);
    let mut tx = super::begin_indexed(pool, OP).await?;
    let decided = decide(&mut tx, &sorted).await?;
    let mut by_id = std::collections::HashMap::with_capacity(batch.len());
    if !decided.is_empty() {
        let rows = write_decided(&mut tx, &decided).await?;
        for row in &rows {
            let applied = CompleteOutcome::Applied {
                status: status(get::<&str>(row, "status")?)?,
                retry_at: get(row, "retry_at")?,
            };
            by_id.insert(get::<i64>(row, "id")?, applied);
        }
    }
    tx.commit().await.map_err(StoreError::db(OP))?;
    // The rest changed nothing: each is a repeat of an outcome already recorded (possibly by a
    // statement that committed while this one waited on the row) or fenced. A new statement
    // sees every commit so far and tells them apart.
    let missing: Vec<&CompleteParams> = sorted
        .iter()
        .copied()
        .filter(|p| !by_id.contains_key(&p.key.id.0))
        .collect();
    if !missing.is_empty() {
        let rows = sqlx::query(sql::task_attempt_outcomes)
            .bind(missing.iter().map(|p| p.key.id.0).collect::<Vec<_>>())
            .bind(
                missing
                    .iter()
                    .map(|p| p.key.owner.as_str())
                    .collect::<Vec<_>>(),
            )
            .bind(missing.iter().map(|p| p.key.epoch.0).collect::<Vec<_>>())
            .bind(
                missing
                    .iter()
                    .map(|p| p.completion.outcome_name())
                    .collect::<Vec<_>>(),
            )
            .fetch_all(pool)
            .await
            .map_err(StoreError::db(OP))?;
        for row in &rows {
            let repeated = CompleteOutcome::Repeated {
                status: status(get::<&str>(row, "status")?)?,
            };
            by_id.insert(get(row, "id")?, repeated);
        }
    }
    Ok(batch
        .iter()
        .map(|p| {
            by_id
                .get(&p.key.id.0)
                .copied()
                .unwrap_or(CompleteOutcome::Fenced)
        })
        .collect())
}

/// Ends the attempt `params` names inside the caller's transaction `conn`, fenced like
/// [`task_complete_many`]: [`CompleteOutcome::Applied`] when the lease was still held (commit
/// the transaction to make the caller's own writes and the completion land together);
/// [`CompleteOutcome::Fenced`] when it was not — roll back, the lease has moved on and the
/// caller's writes must not land either. Nothing is committed here. The row stays locked until
/// the transaction ends, so commit soon after.
///
/// This is PostgreSQL's transactional completion (issue 24): exactly-once effects for work
/// whose effects live in the same database.
pub async fn task_complete_in(
    conn: &mut sqlx::PgConnection,
    params: &CompleteParams,
) -> Result<CompleteOutcome> {
    const OP: &str = "task_complete_in";
    params.validate().map_err(StoreError::from)?;
    // The planner settings of every completion, for the rest of the caller's transaction (only
    // its commit should follow): statements are planned once per connection.
    sqlx::query(sql::plan_indexed)
        .execute(&mut *conn)
        .await
        .map_err(StoreError::db(OP))?;
    let sorted = [params];
    let written = async {
        let decided = decide(conn, &sorted).await?;
        if decided.is_empty() {
            return Ok(None);
        }
        write_decided(conn, &decided).await.map(Some)
    };
    let rows = match written.await {
        Ok(Some(rows)) => rows,
        Ok(None) => return Ok(CompleteOutcome::Fenced),
        // The row moved to another partition while this waited on its lock: another
        // transaction finished the task (recovery of the expired lease, say), so the lease is
        // gone. The caller's transaction is aborted; fenced tells it to roll back.
        Err(error) if error.is_partition_race() => return Ok(CompleteOutcome::Fenced),
        Err(error) => return Err(error),
    };
    let Some(row) = rows.first() else {
        return Ok(CompleteOutcome::Fenced);
    };
    Ok(CompleteOutcome::Applied {
        status: status(get::<&str>(row, "status")?)?,
        retry_at: get(row, "retry_at")?,
    })
}

/// Decides each completion of `sorted` with [`lifecycle`]. A batch without a failure needs
/// nothing from its rows; one with a failure first reads and locks the rows still held under
/// their keys (a row not returned is fenced or a repeat, and is left out).
async fn decide<'a>(
    tx: &mut sqlx::PgConnection,
    sorted: &[&'a CompleteParams],
) -> Result<Vec<Decided<'a>>> {
    const OP: &str = "task_complete";
    if !sorted.iter().any(|p| lifecycle::needs_row(&p.completion)) {
        return sorted
            .iter()
            .map(|&params| {
                let settled =
                    lifecycle::settle_outcome(&params.completion).ok_or(StoreError::Corrupt {
                        what: "completion",
                        detail: "an outcome without a decision".into(),
                    })?;
                Ok(Decided { params, settled })
            })
            .collect();
    }
    let rows = sqlx::query(sql::task_complete_read)
        .bind(sorted.iter().map(|p| p.key.id.0).collect::<Vec<_>>())
        .bind(
            sorted
                .iter()
                .map(|p| p.key.owner.as_str())
                .collect::<Vec<_>>(),
        )
        .bind(sorted.iter().map(|p| p.key.epoch.0).collect::<Vec<_>>())
        .fetch_all(&mut *tx)
        .await
        .map_err(StoreError::db(OP))?;
    let policies = sqlx::query(sql::policy_list)
        .fetch_all(&mut *tx)
        .await
        .map_err(StoreError::db(OP))?
        .iter()
        .map(super::rows::policy)
        .collect::<Result<Vec<_>>>()?;
    let mut held = std::collections::HashMap::with_capacity(rows.len());
    for row in &rows {
        held.insert(get::<i64>(row, "id")?, row);
    }
    let mut decided = Vec::with_capacity(rows.len());
    for &params in sorted {
        let Some(row) = held.get(&params.key.id.0) else {
            continue;
        };
        let settled = lifecycle::settle_held(
            &params.completion,
            &crate::store::rows::failed_attempt(*row)?,
            get::<&str>(row, "task_type")?,
            &policies,
            get(row, "now")?,
        )
        .ok_or(StoreError::Corrupt {
            what: "completion",
            detail: "an outcome without a decision".into(),
        })?;
        decided.push(Decided { params, settled });
    }
    Ok(decided)
}

/// Writes decided completions (task_complete_many.sql); returns the rows it changed.
async fn write_decided(
    tx: &mut sqlx::PgConnection,
    decided: &[Decided<'_>],
) -> Result<Vec<sqlx::postgres::PgRow>> {
    let json = |value: &serde_json::Value| Json(value.clone());
    let mut errors = Vec::with_capacity(decided.len());
    for d in decided {
        errors.push(
            d.settled
                .error
                .as_ref()
                .map(|e| {
                    serde_json::to_value(e)
                        .map(Json)
                        .map_err(|e| StoreError::Corrupt {
                            what: "task error",
                            detail: e.to_string(),
                        })
                })
                .transpose()?,
        );
    }
    let (set_result, results): (Vec<bool>, Vec<Option<Json<serde_json::Value>>>) = decided
        .iter()
        .map(|d| match &d.settled.result {
            ResultWrite::Keep => (false, None),
            ResultWrite::Set(value) => (true, value.as_ref().map(json)),
        })
        .unzip();
    sqlx::query(sql::task_complete_many)
        .bind(
            decided
                .iter()
                .map(|d| d.params.key.id.0)
                .collect::<Vec<_>>(),
        )
        .bind(
            decided
                .iter()
                .map(|d| d.params.key.owner.as_str())
                .collect::<Vec<_>>(),
        )
        .bind(
            decided
                .iter()
                .map(|d| d.params.key.epoch.0)
                .collect::<Vec<_>>(),
        )
        .bind(
            decided
                .iter()
                .map(|d| d.settled.attempt_outcome(&d.params.completion))
                .collect::<Vec<_>>(),
        )
        .bind(
            decided
                .iter()
                .map(|d| d.settled.status.as_str())
                .collect::<Vec<_>>(),
        )
        .bind(
            decided
                .iter()
                .map(|d| d.settled.retry_at)
                .collect::<Vec<_>>(),
        )
        .bind(errors)
        .bind(set_result)
        .bind(results)
        .bind(
            decided
                .iter()
                .map(|d| d.settled.finished())
                .collect::<Vec<_>>(),
        )
        .bind(
            decided
                .iter()
                .map(|d| d.settled.snoozed)
                .collect::<Vec<_>>(),
        )
        .fetch_all(&mut *tx)
        .await
        .map_err(StoreError::db("task_complete"))
}

pub(super) async fn lease_release_many(
    pool: &Db,
    params: &ReleaseParams,
) -> Result<ReleaseOutcome> {
    let (ids, epochs) = split(&params.leases);
    let query = sqlx::query(sql::lease_release_many)
        .bind(params.owner.as_str())
        .bind(&ids)
        .bind(&epochs);
    let rows = super::fetch_indexed(pool, query, "lease_release_many").await?;
    let released: Vec<TaskId> = rows
        .iter()
        .map(|row| get::<i64>(row, "id").map(TaskId))
        .collect::<Result<_>>()?;
    let done: HashSet<TaskId> = released.iter().copied().collect();
    // The rest changed nothing: each was given back already by this owner (a retry whose
    // first reply was lost: a repeat) or fenced. A new statement tells them apart.
    let (ids, epochs): (Vec<i64>, Vec<i64>) = params
        .leases
        .iter()
        .filter(|(id, _)| !done.contains(id))
        .map(|(id, epoch)| (id.0, epoch.0))
        .unzip();
    let mut repeated = Vec::new();
    if !ids.is_empty() {
        let rows = sqlx::query(sql::lease_release_repeated)
            .bind(params.owner.as_str())
            .bind(&ids)
            .bind(&epochs)
            .fetch_all(pool)
            .await
            .map_err(StoreError::db("lease_release_many"))?;
        for row in &rows {
            repeated.push(TaskId(get(row, "id")?));
        }
    }
    let fenced = ids
        .iter()
        .map(|id| TaskId(*id))
        .filter(|id| !repeated.contains(id))
        .collect();
    Ok(ReleaseOutcome {
        released,
        repeated,
        fenced,
    })
}
