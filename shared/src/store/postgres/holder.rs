//! Holder writes: renew, progress, complete, release. Each carries the lease key (task, owner,
//! epoch) and changes nothing when it no longer matches: the outcome says `Fenced`, or, for a
//! completion or release that this key already made (a retry whose reply was lost), a repeat.

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use sqlx::types::Json;

use super::rows::{get, status};
use super::{secs, sql};
use crate::domain::{LeaseEpoch, TaskId};
use crate::store::{
    CompleteOutcome, CompleteParams, Completion, HolderWrite, ProgressParams, ReleaseOutcome,
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

pub(super) async fn lease_renew_many(pool: &PgPool, params: &RenewParams) -> Result<RenewOutcome> {
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
    let held: HashSet<(TaskId, LeaseEpoch)> = renewed.iter().map(|r| (r.id, r.epoch)).collect();
    let lost = params
        .leases
        .iter()
        .copied()
        .filter(|key| !held.contains(key))
        .collect();
    let now = now.ok_or_else(|| StoreError::Corrupt {
        what: "renewal",
        detail: "no row returned".into(),
    })?;
    Ok(RenewOutcome { now, renewed, lost })
}

pub(super) async fn task_progress(pool: &PgPool, params: &ProgressParams) -> Result<HolderWrite> {
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

pub(super) async fn task_complete_many(
    pool: &PgPool,
    batch: &[CompleteParams],
) -> Result<Vec<CompleteOutcome>> {
    let n = batch.len();
    let (mut ids, mut owners, mut epochs, mut outcomes) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    let (mut results, mut errors) = (Vec::with_capacity(n), Vec::with_capacity(n));
    let mut seen = HashSet::with_capacity(n);
    for params in batch {
        params.validate()?;
        if !seen.insert(params.key.id) {
            return Err(StoreError::Invalid(crate::ValidationError::Invalid {
                field: "completions",
                detail: format!("task {} appears twice in one batch", params.key.id),
            }));
        }
        let (result, error) = match &params.completion {
            Completion::Succeeded { result } | Completion::PartiallySucceeded { result } => {
                (result.clone().map(Json), None)
            }
            Completion::Failed { error } => {
                let value = serde_json::to_value(error.clone().bounded()).map_err(|e| {
                    StoreError::Corrupt {
                        what: "task error",
                        detail: e.to_string(),
                    }
                })?;
                (None, Some(Json(value)))
            }
            Completion::Cancelled => (None, None),
        };
        ids.push(params.key.id.0);
        owners.push(params.key.owner.as_str());
        epochs.push(params.key.epoch.0);
        outcomes.push(params.completion.outcome_name());
        results.push(result);
        errors.push(error);
    }
    if n == 0 {
        return Ok(Vec::new());
    }
    let query = sqlx::query(sql::task_complete_many)
        .bind(&ids)
        .bind(&owners)
        .bind(&epochs)
        .bind(&outcomes)
        .bind(&results)
        .bind(&errors);
    let rows = super::fetch_indexed(pool, query, "task_complete").await?;
    let mut by_id = std::collections::HashMap::with_capacity(n);
    for row in &rows {
        let applied = CompleteOutcome::Applied {
            status: status(get::<&str>(row, "status")?)?,
            retry_at: get(row, "retry_at")?,
        };
        by_id.insert(get::<i64>(row, "id")?, applied);
    }
    // The rest changed nothing: each is a repeat of an outcome already recorded (possibly by a
    // statement that committed while this one waited on the row) or fenced. A new statement
    // sees every commit so far and tells them apart.
    let missing: Vec<usize> = (0..n).filter(|&i| !by_id.contains_key(&ids[i])).collect();
    if !missing.is_empty() {
        let pick = |v: &[i64]| missing.iter().map(|&i| v[i]).collect::<Vec<_>>();
        let rows = sqlx::query(sql::task_attempt_outcomes)
            .bind(pick(&ids))
            .bind(missing.iter().map(|&i| owners[i]).collect::<Vec<_>>())
            .bind(pick(&epochs))
            .bind(missing.iter().map(|&i| outcomes[i]).collect::<Vec<_>>())
            .fetch_all(pool)
            .await
            .map_err(StoreError::db("task_complete"))?;
        for row in &rows {
            let repeated = CompleteOutcome::Repeated {
                status: status(get::<&str>(row, "status")?)?,
            };
            by_id.insert(get(row, "id")?, repeated);
        }
    }
    Ok(ids
        .iter()
        .map(|id| by_id.get(id).copied().unwrap_or(CompleteOutcome::Fenced))
        .collect())
}

pub(super) async fn lease_release_many(
    pool: &PgPool,
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
