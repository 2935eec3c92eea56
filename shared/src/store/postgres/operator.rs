//! The PostgreSQL side of the seam the operator actions, resource leases and schedules are
//! written over ([`crate::store::audit::backend`]): READ COMMITTED transactions, the
//! database's `now()`, audit rows, and the statements of the operator actions
//! ([`crate::store::audit::operator`], which decides). Each statement that decides on a row
//! locks it first, so two actions on one task queue on its row.

use sqlx::postgres::PgRow;
use sqlx::types::Json;
use sqlx::{Column, PgExecutor, Postgres, Row, Transaction, TypeInfo};

use super::db::Db;

use super::rows::{get, policy};
use super::{enqueue, sql, tx_now};
use crate::domain::{LeaseEpoch, Policy, TaskId, TaskStatus};
use crate::store::audit::backend::{self, Backend, Columns, row_by};
use crate::store::audit::operator::{CancelRow, OperatorStatements, bind_policy, dead_page};
use crate::store::params::{DeadFilter, DeadIdsPage, ValidTask};
use crate::store::{AuditEntry, DeadBulkOutcome, DeniedCalls, Enqueued, Result, StoreError};

/// Writes one audit row through `executor` (pass the transaction of the change it records).
pub async fn audit_write<'e, E: PgExecutor<'e>>(executor: E, entry: &AuditEntry) -> Result<()> {
    audit_insert(executor, entry, None, 1, "audit_write").await
}

/// Writes the one `denied` row of `calls` (validated first: bad input writes nothing).
pub(super) async fn audit_write_denied(pool: &Db, calls: &DeniedCalls) -> Result<()> {
    let count = calls.validated_count()?;
    audit_insert(
        pool,
        &calls.entry,
        Some(&calls.peer),
        count,
        "audit_record_denied",
    )
    .await
}

/// The insert of one audit row with its peer and the number of calls it stands for.
async fn audit_insert<'e, E: PgExecutor<'e>>(
    executor: E,
    entry: &AuditEntry,
    peer: Option<&str>,
    count: i64,
    op: &'static str,
) -> Result<()> {
    sqlx::query(sql::audit_insert)
        .bind(&entry.actor.name)
        .bind(entry.actor.role.as_str())
        .bind(&entry.action)
        .bind(&entry.target)
        .bind(entry.params.clone().map(Json))
        .bind(entry.result.as_str())
        .bind(&entry.detail)
        .bind(peer)
        .bind(count)
        .execute(executor)
        .await
        .map_err(StoreError::db(op))?;
    Ok(())
}

pub(super) async fn begin(pool: &Db, op: &'static str) -> Result<Transaction<'static, Postgres>> {
    pool.begin().await.map_err(StoreError::db(op))
}

/// The PostgreSQL store as the shared operations see it.
pub(super) struct Pg<'a>(pub(super) &'a Db);

impl Backend for Pg<'_> {
    type Tx = Transaction<'static, Postgres>;
    type Row = PgRow;

    async fn begin(&self, op: &'static str) -> Result<Self::Tx> {
        begin(self.0, op).await
    }

    async fn snapshot(&self, op: &'static str) -> Result<Self::Tx> {
        self.0.begin_snapshot().await.map_err(StoreError::db(op))
    }

    async fn now(tx: &mut Self::Tx, op: &'static str) -> Result<chrono::DateTime<chrono::Utc>> {
        tx_now(tx, op).await
    }

    async fn commit(tx: Self::Tx, op: &'static str) -> Result<()> {
        tx.commit().await.map_err(StoreError::db(op))
    }

    async fn audit_in(tx: &mut Self::Tx, entry: &AuditEntry) -> Result<()> {
        audit_write(&mut **tx, entry).await
    }

    async fn audit_alone(&self, entry: &AuditEntry) -> Result<()> {
        audit_write(self.0, entry).await
    }
}

/// The column's integer width, by its type's name.
fn width(row: &PgRow, column: &'static str) -> &'static str {
    match row.try_column(column).map(|c| c.type_info().name()) {
        Ok("INT2") => "INT2",
        Ok("INT4") => "INT4",
        _ => "INT8",
    }
}

impl Columns for PgRow {
    backend::decoded_columns!(get, get, get);

    fn int(&self, column: &'static str) -> Result<i64> {
        match width(self, column) {
            "INT2" => get::<i16>(self, column).map(i64::from),
            "INT4" => get::<i32>(self, column).map(i64::from),
            _ => get(self, column),
        }
    }

    fn opt_int(&self, column: &'static str) -> Result<Option<i64>> {
        match width(self, column) {
            "INT2" => get::<Option<i16>>(self, column).map(|v| v.map(i64::from)),
            "INT4" => get::<Option<i32>>(self, column).map(|v| v.map(i64::from)),
            _ => get(self, column),
        }
    }

    fn json(&self, column: &'static str) -> Result<Option<serde_json::Value>> {
        Ok(get::<Option<Json<serde_json::Value>>>(self, column)?.map(|Json(v)| v))
    }
}

/// Locks the task's row in its own statement, so the action's statement reads the row as it
/// is once the lock is ours (see task_lock.sql). A missing task locks nothing.
async fn lock_task(
    tx: &mut Transaction<'static, Postgres>,
    id: TaskId,
    op: &'static str,
) -> Result<()> {
    sqlx::query(sql::task_lock)
        .bind(id.0)
        .fetch_optional(&mut **tx)
        .await
        .map_err(StoreError::db(op))?;
    Ok(())
}

/// Locks task `id` (task_lock.sql), then runs `statement` (task_requeue.sql, task_run_now.sql),
/// which answers the status it found (`before`) and whether it moved the task (`changed`);
/// `None` for no such task.
async fn move_locked(
    tx: &mut Transaction<'static, Postgres>,
    id: TaskId,
    statement: &'static str,
    op: &'static str,
) -> Result<Option<(TaskStatus, bool)>> {
    lock_task(tx, id, op).await?;
    let row = sqlx::query(statement)
        .bind(id.0)
        .fetch_optional(&mut **tx)
        .await
        .map_err(StoreError::db(op))?;
    row.map(|row| Ok((backend::status(&row.text("before")?)?, row.flag("changed")?)))
        .transpose()
}

/// Runs `statement` (task_requeue_dead.sql, task_purge_dead.sql) over the dead tasks `f`
/// matches; the count it returns.
async fn dead_count(
    tx: &mut Transaction<'static, Postgres>,
    statement: &'static str,
    f: &DeadFilter,
    op: &'static str,
) -> Result<u64> {
    let row = sqlx::query(statement)
        .bind(f.task_type.as_ref().map(|t| t.as_str()))
        .bind(f.error_code.as_deref())
        .bind(f.since)
        .bind(f.until)
        .fetch_one(&mut **tx)
        .await
        .map_err(StoreError::db(op))?;
    Ok(u64::try_from(row.int("count")?).unwrap_or(0))
}

impl OperatorStatements for Pg<'_> {
    /// READ COMMITTED: a key whose task a concurrent transaction committed mid-statement is
    /// visible to the next statement of this same transaction, so the insert looks again.
    async fn enqueue(tx: &mut Self::Tx, task: &ValidTask) -> Result<Enqueued> {
        enqueue::enqueue_valid(tx, task).await
    }

    /// task_cancel.sql moves the task as [`flow::cancel_step`] says and returns it before and
    /// after.
    async fn task_cancel(tx: &mut Self::Tx, id: TaskId) -> Result<Option<CancelRow>> {
        const OP: &str = "task_cancel";
        lock_task(tx, id, OP).await?;
        let row = sqlx::query(sql::task_cancel)
            .bind(id.0)
            .fetch_optional(&mut **tx)
            .await
            .map_err(StoreError::db(OP))?;
        row.map(|row| {
            Ok(CancelRow {
                before: backend::status(&row.text("before")?)?,
                after: row
                    .opt_text("after")?
                    .as_deref()
                    .map(backend::status)
                    .transpose()?,
                owner: row
                    .opt_text("lease_owner")?
                    .map(backend::agent_id)
                    .transpose()?,
                epoch: LeaseEpoch(row.int("lease_epoch")?),
            })
        })
        .transpose()
    }

    async fn task_requeue(tx: &mut Self::Tx, id: TaskId) -> Result<Option<(TaskStatus, bool)>> {
        move_locked(tx, id, sql::task_requeue, "task_requeue").await
    }

    async fn task_run_now(tx: &mut Self::Tx, id: TaskId) -> Result<Option<(TaskStatus, bool)>> {
        move_locked(tx, id, sql::task_run_now, "task_run_now").await
    }

    async fn task_delete(
        tx: &mut Self::Tx,
        id: TaskId,
    ) -> Result<Option<(TaskStatus, String, bool)>> {
        const OP: &str = "task_delete";
        lock_task(tx, id, OP).await?;
        let row = sqlx::query(sql::task_delete)
            .bind(id.0)
            .fetch_optional(&mut **tx)
            .await
            .map_err(StoreError::db(OP))?;
        row.map(|row| {
            Ok((
                backend::status(&row.text("before")?)?,
                row.text("task_type")?,
                row.flag("changed")?,
            ))
        })
        .transpose()
    }

    async fn task_requeue_dead(tx: &mut Self::Tx, f: &DeadFilter) -> Result<u64> {
        dead_count(tx, sql::task_requeue_dead, f, "task_requeue_dead").await
    }

    async fn task_purge_dead(tx: &mut Self::Tx, f: &DeadFilter) -> Result<u64> {
        dead_count(tx, sql::task_purge_dead, f, "task_purge_dead").await
    }

    /// task_match_dead.sql counts and pages in one statement (one snapshot).
    async fn task_match_dead(
        tx: &mut Self::Tx,
        f: &DeadFilter,
        page: DeadIdsPage,
    ) -> Result<DeadBulkOutcome> {
        const OP: &str = "task_match_dead";
        let row = sqlx::query(sql::task_match_dead)
            .bind(f.task_type.as_ref().map(|t| t.as_str()))
            .bind(f.error_code.as_deref())
            .bind(f.since)
            .bind(f.until)
            .bind(page.before.map(|id| id.0))
            .bind(i64::from(page.limit) + 1)
            .fetch_one(&mut **tx)
            .await
            .map_err(StoreError::db(OP))?;
        let ids: Vec<i64> = get(&row, "ids")?;
        Ok(dead_page(
            u64::try_from(row.int("count")?).unwrap_or(0),
            ids,
            page.limit,
        ))
    }

    /// The exclusive policy guard orders the change against every claim (which takes it
    /// shared).
    async fn policy_begin(&self, op: &'static str) -> Result<Self::Tx> {
        let mut tx = begin(self.0, op).await?;
        sqlx::query(sql::policy_guard_exclusive)
            .execute(&mut *tx)
            .await
            .map_err(StoreError::db(op))?;
        Ok(tx)
    }

    async fn policy_locked(tx: &mut Self::Tx, key: &str) -> Result<Option<Policy>> {
        let current = row_by(&mut **tx, sql::policy_get_for_update, key, "policy_set").await?;
        current.as_ref().map(policy).transpose()
    }

    async fn policy_upsert(tx: &mut Self::Tx, key: &str, next: &Policy) -> Result<Policy> {
        let limit = |l: u32| i32::try_from(l).unwrap_or(i32::MAX);
        let row = bind_policy(sqlx::query(sql::policy_upsert), key, next, limit)
            .fetch_one(&mut **tx)
            .await
            .map_err(StoreError::db("policy_set"))?;
        policy(&row)
    }
}

// The `Store` methods, each the shared operation on this store.
crate::store::audit::operator::operator_entry_points!(Pg, Db);
