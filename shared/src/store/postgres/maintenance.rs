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

use sqlx::PgPool;

use super::rows::{agent_id, get, status, task_type};
use super::{secs, sql};
use crate::domain::{LeaseEpoch, TaskId};
use crate::store::{
    ExpireDeadlinesParams, RecoverParams, Recovered, Result, StoreError, SuspectLease,
    SuspectParams,
};

pub(super) async fn lease_recover_expired(
    pool: &PgPool,
    params: &RecoverParams,
) -> Result<Vec<Recovered>> {
    let rows = sqlx::query(sql::lease_recover_expired)
        .bind(secs(params.grace))
        .bind(i64::from(params.limit))
        .fetch_all(pool)
        .await
        .map_err(StoreError::db("lease_recover_expired"))?;
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
    pool: &PgPool,
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

pub(super) async fn lease_list_suspect(
    pool: &PgPool,
    params: &SuspectParams,
) -> Result<Vec<SuspectLease>> {
    let rows = sqlx::query(sql::lease_list_suspect)
        .bind(secs(params.threshold))
        .fetch_all(pool)
        .await
        .map_err(StoreError::db("lease_list_suspect"))?;
    rows.iter()
        .map(|row| {
            Ok(SuspectLease {
                id: TaskId(get(row, "id")?),
                task_type: task_type(get(row, "task_type")?)?,
                owner: agent_id(get(row, "lease_owner")?)?,
                epoch: LeaseEpoch(get(row, "lease_epoch")?),
                heartbeat_at: get(row, "heartbeat_at")?,
                lease_until: get(row, "lease_until")?,
                now: get(row, "now")?,
            })
        })
        .collect()
}
